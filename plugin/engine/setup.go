package engine

import (
	"encoding/binary"
	"errors"
	"strconv"

	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/shared/limit"
)

var errRandom = errors.New("host random source failed")

// SeedKey is the shared-data key of the fingerprint seed.
const SeedKey = "sluice.v1.seed"

// LoadSeed returns the process-wide fingerprint seed, creating it if no
// worker has yet. Every worker must hash with the same seed; two workers
// starting at once may both try to create it, and the CAS rule for missing
// keys (createCAS) lets exactly one win, the other reads the winner's.
func LoadSeed(store Store) (uint64, error) {
	for attempt := 0; attempt < MaxCASRetries; attempt++ {
		v, _, found, err := store.Get(SeedKey)
		if err != nil {
			return 0, err
		}
		if found && len(v) == 8 {
			return binary.LittleEndian.Uint64(v), nil
		}
		var b [8]byte
		if err := ReadRandom(b[:]); err != nil {
			return 0, err
		}
		if _, err := store.Set(SeedKey, b[:], createCAS); err != nil {
			return 0, err
		}
	}
	return 0, ErrContention
}

// Throttles reports whether any rule may hold requests (max_delay or a
// leaky bucket), which needs a fast tick to release them on time.
func Throttles(c *config.Config) bool {
	for i := range c.Rules {
		r := &c.Rules[i]
		if !r.Shadow && (r.MaxDelay > 0 || r.Limit.Algorithm() == limit.LeakyBucket) {
			return true
		}
	}
	return false
}

// Summary is the one-line description of a configuration logged at start.
// It appends its parts to one buffer (summaryLine) rather than formatting
// them with sprintf: each formatted value boxed in an interface costs code
// at every call site, and code costs memory in every Envoy
// (docs/design/memory.md).
func Summary(c *config.Config, t *Table) string {
	b := summaryLine(make([]byte, 0, 256))
	b.num(int64(len(c.Rules)), " rule(s):")
	for i := range c.Rules {
		if i == summaryRules && len(c.Rules) > config.PoolFrom {
			// One log line: a thousand rules would make it 100 KB.
			b.str(" and ", "")
			b.num(int64(len(c.Rules)-i), " more rules;")
			break
		}
		b.rule(&c.Rules[i], t.RegionCapacity(i))
	}
	onErr := "allow"
	if c.OnErrorDeny {
		onErr = "deny"
	}
	b.str(" headers=", c.HeadersName())
	b.str(" status=", "")
	b.num(int64(c.Status), " max_keys=")
	b.num(int64(c.MaxKeys), " (")
	b.num(int64(t.Buckets()), " shared-data keys of ")
	b.num(BucketSize, " bytes and ")
	b.num(int64(t.Regions()), " overflow states of ")
	b.num(slotSize, ") on_error=")
	b.str(onErr, " xff_trusted_hops=")
	b.num(int64(c.ClientIP.XFFTrustedHops), " exempt=")
	b.num(int64(len(c.Exempt)), " range(s)")
	if n := t.PoolBuckets(); n > 0 {
		b.str(" spill pool=", "")
		b.num(int64(n*SlotsPerBucket), " states (")
		b.num(int64(n), " shared-data keys) for the rules without their own max_keys")
	}
	return string(b)
}

// summaryLine is Summary's buffer.
type summaryLine []byte

// str appends s and then text. Not inlined: an inlined append is
// several times the code of a call at each of the line's call sites.
//
//go:noinline
func (b *summaryLine) str(s, text string) { *b = append(append(*b, s...), text...) }

// num appends n in decimal and then text (not inlined either).
//
//go:noinline
func (b *summaryLine) num(n int64, text string) { *b = append(strconv.AppendInt(*b, n, 10), text...) }

// rule appends rule r's part of the line, keeping states of its own.
func (b *summaryLine) rule(r *config.Rule, states int) {
	b.str(" ", r.Name)
	switch {
	case IsAdaptive(r):
		b.str("=adaptive_concurrency ", "")
		b.num(r.Limit.MinLimit(), "..")
		b.num(r.Limit.Limit(), " in flight")
	case IsConcurrency(r):
		b.str("=concurrency ", "")
		b.num(r.Limit.Limit(), " in flight")
	default:
		b.str("=", r.Limit.Algorithm().String())
		b.str(" ", "")
		b.num(r.Limit.Limit(), "/")
		b.str(r.Limit.Window().String(), " burst ")
		b.num(r.Limit.Burst(), "")
	}
	b.str(" keeps ", "")
	b.num(int64(states), " states")
	if r.MaxDelay > 0 {
		b.str(" max_delay ", r.MaxDelay.String())
	}
	if r.Shadow {
		b.str(" (shadow)", "")
	}
	if c := &r.Cost; c.Set() {
		b.cost(c)
	}
	b.str(";", "")
}

// cost appends a rule's cost.
func (b *summaryLine) cost(c *config.Cost) {
	if c.RequestHeader != "" {
		b.str(" cost=request_header ", c.RequestHeader)
	} else {
		b.str(" cost=after response", "")
		if c.ResponseHeader != "" {
			b.str(" header ", c.ResponseHeader)
		}
		for i, st := range c.OnStatus {
			sep := ","
			if i == 0 {
				sep = " on_status "
			}
			b.str(sep, "")
			b.num(int64(st), "")
		}
	}
	b.str(" max ", "")
	b.num(c.Max, "")
}

// summaryRules is how many rules Summary lists by name when there are
// more than config.PoolFrom.
const summaryRules = 16
