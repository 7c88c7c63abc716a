// Package flight holds the in-flight rules of the engine: concurrency
// rules (a slot from admission until the stream ends), adaptive ones (the
// same slots under a learnt limit) and their priority classes. It owns
// their state; the engine routes a request through it and reaches the
// shared state table only through Table.
package flight

import (
	"errors"
	"time"

	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/shared/limit"
)

// Modifier computes the new state of a slot for Table.Modify. It may be
// called several times for one Modify (once per CAS attempt), each time
// with the state as it is then, and whether it is the rule's overflow
// state; it reports write false to leave the slot as it is.
type Modifier interface {
	Modify(st limit.State, now int64, overflow bool) (next limit.State, expiry int64, write bool)
}

// Table is what the in-flight rules need of the engine's state table: a
// CAS update of one key's state in a region, and for the rules with
// classes, values of their own (the engine's Table).
type Table interface {
	Modify(fp uint64, region int, onlyOverflow bool, now int64, m Modifier) (int, error)
	// LoadValue reads the value of key into buf: size bytes and its CAS;
	// a missing or damaged value reads as free (zeros, with the CAS that
	// creates the key).
	LoadValue(key string, size int, buf []byte) ([]byte, uint32, error)
	// StoreValue writes val under cas; mismatch: another worker changed
	// it first (read it again).
	StoreValue(key string, val []byte, cas uint32) (mismatch bool, err error)
	// Contended counts an update that ran out of CAS retries.
	Contended()
}

// The state table's rules that the in-flight rules' own values follow too.
const (
	// MaxCASRetries bounds the compare-and-swap loop of one update.
	MaxCASRetries = 32
	// OverflowFP marks the state in a rule's overflow key.
	OverflowFP = 1
	overflowFP = OverflowFP
)

// ErrContention: MaxCASRetries conflicting updates in a row.
var ErrContention = errors.New("shared data contention: CAS retries exhausted")

// JumpHash is Lamping and Veach's jump consistent hash: the bucket of key
// among n, such that going from n to m buckets moves only the keys of the
// buckets added or removed.
func JumpHash(key, n uint64) uint64 {
	b, j := int64(-1), int64(0)
	for j < int64(n) {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64(key>>33+1)))
	}
	return uint64(b)
}

// SlotRef is a concurrency slot held by a request, to be released when its
// stream ends.
type SlotRef struct {
	_        [0]func() // not comparable: no equality function in the module
	Rule     int
	FP       uint64
	Overflow bool  // the slot is the rule's overflow slot of the bucket
	Since    int64 // when it was acquired (ns)
	// Saturated: an adaptive rule's slot taken at its learnt limit (or
	// after a wait in its queue): see limit.Gauge.AtLimit.
	Saturated bool
	// Waited is how long the request waited in the rule's queue for the
	// slot (0: taken at once); counted once the request is admitted.
	Waited time.Duration
	// Ticket is an adaptive rule's limit.Sampler ticket for the request's
	// sample (0: no sample, see Adaptive.AdmitSamples, or given already:
	// Adaptive.Sample uses it up).
	Ticket uint32
	// Class is the slot's priority class (rules with classes).
	Class uint8
}

// IsAdaptive reports whether rule r learns its concurrency limit.
func IsAdaptive(r *config.Rule) bool { return r.Limit.Algorithm() == limit.AdaptiveConcurrency }

// IsConcurrency reports whether rule r limits requests in flight.
func IsConcurrency(r *config.Rule) bool {
	return r.Limit.Algorithm() == limit.Concurrency || IsAdaptive(r)
}
