package engine

import (
	"encoding/binary"
	"errors"
	"strings"

	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/plugin/internal/sprintf"
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
func Summary(c *config.Config, t *Table) string {
	var b strings.Builder
	b.WriteString(sprintf.Sprintf("%d rule(s):", len(c.Rules)))
	for i := range c.Rules {
		if i == summaryRules && len(c.Rules) > config.PoolFrom {
			// One log line: a thousand rules would make it 100 KB.
			b.WriteString(sprintf.Sprintf(" and %d more rules;", len(c.Rules)-i))
			break
		}
		r := &c.Rules[i]
		if IsAdaptive(r) {
			b.WriteString(sprintf.Sprintf(" %s=adaptive_concurrency %d..%d in flight", r.Name, r.Limit.MinLimit(), r.Limit.Limit()))
		} else if IsConcurrency(r) {
			b.WriteString(sprintf.Sprintf(" %s=concurrency %d in flight", r.Name, r.Limit.Limit()))
		} else {
			b.WriteString(sprintf.Sprintf(" %s=%s %d/%s burst %d", r.Name, r.Limit.Algorithm(), r.Limit.Limit(), r.Limit.Window(), r.Limit.Burst()))
		}
		b.WriteString(sprintf.Sprintf(" keeps %d states", t.RegionCapacity(i)))
		if r.MaxDelay > 0 {
			b.WriteString(sprintf.Sprintf(" max_delay %s", r.MaxDelay))
		}
		if r.Shadow {
			b.WriteString(" (shadow)")
		}
		if c := &r.Cost; c.Set() {
			b.WriteString(costSummary(c))
		}
		b.WriteString(";")
	}
	onErr := "allow"
	if c.OnErrorDeny {
		onErr = "deny"
	}
	b.WriteString(sprintf.Sprintf(" headers=%s status=%d max_keys=%d (%d shared-data keys of %d bytes and %d overflow states of %d) on_error=%s xff_trusted_hops=%d exempt=%d range(s)",
		c.HeadersName(), c.Status, c.MaxKeys, t.Buckets(), BucketSize, t.Regions(), slotSize, onErr, c.ClientIP.XFFTrustedHops, len(c.Exempt)))
	if n := t.PoolBuckets(); n > 0 {
		b.WriteString(sprintf.Sprintf(" spill pool=%d states (%d shared-data keys) for the rules without their own max_keys", n*SlotsPerBucket, n))
	}
	return b.String()
}

// summaryRules is how many rules Summary lists by name when there are
// more than config.PoolFrom.
const summaryRules = 16
