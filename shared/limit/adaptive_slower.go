package limit

// A slower upstream, told from a queue that stands at it (see
// Gauge.slower).

import "time"

// A rough Base. A round measuring after a backoff decided against a Base
// of fewer than MinRound samples (a cold rule's first round of 4, slow
// start's small rounds) that reads clearly over it, under 1.5x, is
// measured once more at the same limit as after a stall (see endRound,
// measured): under 1.5x the old Base, slow start goes on from there, Base
// the mean of the two; if the limit queues, slow start's next rounds show
// it again. The mean of 4 latencies that vary by a factor of two (25-75
// ms) is a fifth or more under the upstream's in one cold start of
// twelve, and a Base read that low takes every round for a queue: the
// backoff found no knee, and the round under the lowered limit, of more
// samples, reads the same latency again (it does not answer to the
// requests in flight). Backing off again from it, then probing by one
// request per round of 16 samples (8-16 round trips under a limit of
// 1-2), ratcheted the model of 16 slots of 25-75 ms from 8 down to 1-2 in
// a second, for seconds, as in a CI run of the e2e test (3, then 1, then
// 2-5 to its end: 64/s of 320).

// slower decides a measuring round whose mean (now Base) is 1.5x the old
// Base or more, after a stall or in the second round measuring at the
// same limit: the upstream itself may have slowed down (its service time,
// not a queue), and slow start finds the limit that fits it. But a queue
// that stands at the upstream reads the same when it is not this limit's
// alone: other Envoys in front of the same upstream, each learning on its
// own, back off from a rise a round or more later, or not at all when
// their own Base already holds the queue. Taken for the upstream's
// latency, that queue stays for good, and each Envoy that measures while
// the other queues takes in the other's: two Envoys on a 50 ms upstream
// ratcheted their Bases 50 -> 131 -> 195 ms, holding a queue of 20-30 at
// its 8 slots. What tells the two apart is the latency's answer to this
// limit's own requests in flight: the upstream's own latency does not
// change with them, a queue does. So the limit halves, and the next round,
// at half the requests in flight, measures again: Base is the lower of the
// two (see confirmSlower). Only for a rule without classes: with classes a
// round's Base is its classes' (see ClassBases), whose bases follow a
// slower class themselves (see ClassBases.RoundEnded).
func (g Gauge) slower(clamp func(float64) float64) Gauge {
	if g.Use > 0 {
		g.SlowStart = true
		return g
	}
	g.Limit = clamp(g.Limit / 2)
	g.Measure, g.Warned, g.Stalled = true, true, true
	return g
}

// measuring ends a round that measured Base (see measured), or measured
// it again at half the limit (see confirmSlower).
func (g Gauge) measuring(mean time.Duration, clamp func(float64) float64) Gauge {
	if g.confirming() {
		return g.confirmSlower(mean, clamp)
	}
	return g.measured(mean, clamp)
}

// confirming reports whether the round measures Base again at half the
// limit (see slower): Measure, Warned and Stalled, a combination no other
// state has (a measuring round after a stall decides at once, see
// measured).
func (g Gauge) confirming() bool { return g.Measure && g.Warned && g.Stalled }

// confirmSlower ends the round that measured Base again at half the
// requests in flight (see slower). Base is the lower of the two rounds:
// the upstream's own latency reads the same in both, and where this
// limit's requests queued, the lower is nearer the upstream's latency.
// Slow start then finds the limit from here. A queue that is all
// another's reads the same in both rounds and is taken, but this limit
// then holds a small share of the upstream, and its Base comes down at
// once when that queue drains (a round 1.5x under Base, see calm and
// held). Halving again until the latency stops answering found Base
// better in the model of two Envoys, but each halving is a round at half
// the limit, and under a small limit a round spans several round trips:
// on the demo's store (150 ms buys) a stall of half a second in the
// launch's first second left one seed of 40 at 11% of the orders (34%
// without it; TestAdaptiveLaunchDayStall).
func (g Gauge) confirmSlower(mean time.Duration, clamp func(float64) float64) Gauge {
	g.Base, g.BaseN = min(g.Base, mean), g.N
	g.Measure, g.Warned, g.Stalled, g.SlowStart = false, false, false, true
	return g.based()
}
