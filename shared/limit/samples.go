package limit

import "time"

// Samples is a batch of latency samples for one Gauge round.
type Samples struct {
	_         [0]func() // not comparable: no equality function in the module
	Round     uint32    // the round the samples belong to
	N         int64
	Sum       time.Duration
	Saturated bool // the round used its limit (see Gauge.Saturated)
	// Use is the mean share of the limit in flight when the batch's
	// requests were admitted (see Gauge.Use; 0: not measured).
	Use float64
	// Exp sums the no-queue latencies of the samples' priority classes
	// (see ClassBases; 0: a rule without classes): the round's Base is
	// then Exp/N, each sample compared with its own class's base.
	Exp time.Duration
	// Fast counts the samples of fast classes (see ClassBases.Fast),
	// Queued those of them that took FastRise times their class's base
	// or more: they waited for a slot at the upstream.
	Fast, Queued int64
	// Calm counts the samples of fast classes given at once in slow
	// start (see Gauge.WordAtOnce) that were admitted at the limit (see
	// Gauge.AtLimit) and came back under FastRise times their class's
	// base: the upstream had a free slot with the limit used (see
	// Gauge.calmWord).
	Calm int64
}

// Add counts one request's latency; saturated: it was admitted at its
// round's limit (see Gauge.AtLimit).
func (s *Samples) Add(latency time.Duration, saturated bool) {
	s.N++
	s.Sum += min(max(latency, 0), MaxLatency)
	s.Saturated = s.Saturated || saturated
}

// AddBase counts one request's latency, of a class whose no-queue latency
// is base (see ClassBases).
func (s *Samples) AddBase(latency, base time.Duration, saturated bool) {
	s.Add(latency, saturated)
	s.Exp += min(max(base, time.Microsecond), MaxLatency)
}

// Pending reports whether the batch has anything to add: samples, or
// the fast classes' word (see Gauge.Fast), which comes before its
// samples' windows are complete.
func (s Samples) Pending() bool { return s.N > 0 || s.Fast > 0 }
