package limit

// The parts of the adaptive estimator (see Gauge) that only a rule with
// priority classes uses: the cut of a backoff from the classes' share of
// the limit, and the fast classes' word on the upstream's queue.

import "time"

// What a round's samples of fast classes said (Gauge.Fast).
const (
	FastNone int64 = iota
	FastCalm
	FastOnce
	FastQueue
)

// FastPause is how many saturated round trips the limit holds after a
// step down on the fast classes' word (see fastStep) before it probes
// again.
const FastPause = ProbeAfter / 4

// FastRise is the latency over its class's base at which a sample of a
// fast class waited in the upstream's queue (see ClassBases.Fast).
const FastRise = 2

// AddFast counts one request's latency, of a fast class whose no-queue
// latency is base (see ClassBases.Fast).
func (s *Samples) AddFast(latency, base time.Duration, saturated bool) {
	s.AddBase(latency, base, saturated)
	s.Fast++
	if latency >= FastRise*base {
		s.Queued++
	}
}

// classesCut returns a backoff's cut for a rule with classes (Use > 0).
func (g Gauge) classesCut(cut float64, stalled bool) float64 {
	// The latency was measured at Limit × Use in flight (lower classes
	// alone hold only part of the limit, the round used a class's cap):
	// the capacity estimate is from that, or the limit would settle at
	// capacity / Use, and the reserve of the classes above would sit
	// past the knee. It halves the limit at most, as one backoff does (a
	// stall is no estimate, and a round of a few samples is rough).
	if g.Use < 1 {
		cut = max(cut*g.Use, min(cut, 0.5))
	}
	if g.Grown && !stalled {
		// The crossing of the knee, for a rule with classes: slow start
		// grew the limit by half from a round of MinRound/2 samples or
		// more that read calm, and this round shows the queue the growth
		// built. The limit it grew from had no queue, with the same mix
		// of classes: the estimate (scaled by Use, with the Backoff
		// margin, from a round whose first answers had not all queued)
		// keeps at least that. In the demo's store (20 slots) it put
		// the limit at 17-19 after a crossing from 20 to 30, the buys'
		// cap 15-17, where 20 had read calm (the buys' 18); the median
		// launch sold 81% of the slots' orders, now 84% (80 seeds of the
		// store-wide model). A growth decided on fewer samples is no
		// such proof: where the upstream's speed moved by the second,
		// the limit then held over the knee and backed off again and
		// again, down to 1 (TestClassBasesShift).
		cut = max(cut, 2.0/3)
	}
	return cut
}

// fastStep decides a saturated round, outside slow start, whose samples
// of fast classes read a queue at the upstream (FastQueue: two or more
// of them at FastRise times their class's base or more) while the round
// as a whole did not rise clearly. A queue of W at an upstream that
// serves in order delays every request by W, whatever its service time:
// a 4 ms login waiting for one of twenty 150 ms buys to end reads 2-3x
// its base, while the round's ratio (weighted by the bases, see
// ClassBases) moves by 2-5% and says nothing. The limit lets the lower
// classes fill the upstream: one less, and a pause of FastPause round
// trips before the next probe. In the demo's store the buys' cap is
// then 19 of the 20 slots (a limit of 22), where one more (20) makes
// every login wait for a buy to end.
func (g Gauge) fastStep(clamp func(float64) float64) Gauge {
	g.Limit = clamp(g.Limit - 1)
	g.Calm, g.Warned = ProbeAfter-FastPause, false
	return g
}
