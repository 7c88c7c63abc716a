package limit

import (
	"errors"
	"math"
	"time"
)

// AdaptiveConcurrency limits requests in flight like Concurrency, with a
// limit nobody sets: it is learnt from the latency of the requests the rule
// admitted (see Gauge). The slots, leases and queue are Concurrency's
// (Slots, with Limit.At(learnt)); the learning is a second small state, the
// Gauge, updated with the same compare-and-swap by every worker.
const AdaptiveConcurrency Algorithm = 5

// ErrAdaptive is returned by NewAdaptive for bounds out of range.
var ErrAdaptive = errors.New("must be 1 <= min_limit <= max_limit <= 65535")

// NewAdaptive returns the adaptive concurrency limit learnt between minLimit
// and maxLimit requests in flight.
func NewAdaptive(minLimit, maxLimit int64) (Limit, error) {
	if minLimit < 1 || maxLimit < minLimit || maxLimit > MaxConcurrency {
		return Limit{}, ErrAdaptive
	}
	return Limit{algorithm: AdaptiveConcurrency, limit: maxLimit, burst: minLimit, interval: 1}, nil
}

// MinLimit returns the lower bound of an adaptive limit (Limit returns its
// upper bound).
func (l Limit) MinLimit() int64 {
	if l.algorithm == AdaptiveConcurrency {
		return l.burst
	}
	return l.limit
}

// At returns l limiting n requests in flight (clamped to 1..MaxConcurrency):
// the Concurrency transitions (Acquire, Claim) of an adaptive rule run on
// l.At(the learnt limit).
func (l Limit) At(n int64) Limit {
	l.limit = min(max(n, 1), MaxConcurrency)
	return l
}

// The estimator. Vegas (TCP Vegas, and Netflix's concurrency-limits) and
// Gradient2 compare the latency of recent requests with a latency "with no
// queue" and move the limit so that the difference, a queue at the
// upstream, stays small. Their weak point is that no-queue latency: a
// minimum over a window drifts up when the upstream is always busy (every
// sample includes the queue the limit allows), and Envoy's gradient
// controller re-measures it by pinning concurrency to a minimum for a
// while, refusing traffic (envoyproxy/envoy#8337, #18152, #38338).
//
// The Gauge works in rounds. A round gathers about Limit samples (latency
// from admission to the upstream's response headers) of requests admitted
// under the round's limit, counted by admission (see Sampler: the first
// answers of a round are its fastest), then decides once:
//
//   - Mean within (1+Tolerance) of Base (see tolerance: more for a round
//     of fewer than MinRound samples, less for a large one): no queue
//     worth the name. Grow: in
//     slow start (from cold, or after the upstream's own latency changed)
//     by half per round trip (with priority classes, also at once on a
//     fast class's word that the upstream had a free slot, see
//     calmWord), otherwise by max(1, Limit/16) per round
//     trip (a probe). Growth needs the round to have used its limit
//     (Saturated): an idle rule does not inflate it. Base follows the
//     round (see endRound; at once when clearly faster: the upstream got
//     faster).
//   - Mean above that: requests queue at the upstream (when the rise is
//     mild, under 2×Tolerance, only if the previous round showed it too:
//     the mean of a round is noisy). With S slots (or cores, or
//     connections) of service time b, latency at L > S requests in flight
//     is b·L/S, so Limit·Base/Mean estimates S: the limit drops to Backoff
//     of that, just under the knee (outside slow start, at most half
//     the limit: one round far over Base is more likely a stall than a
//     loss of half the upstream), and the next round measures Base
//     afresh (Measure). That is the re-measurement Vegas needs, at no
//     extra cost: the limit is being lowered anyway, and requests admitted
//     under it no longer queue at the upstream, so their latency is the
//     no-queue latency of the upstream as it is now. A measured mean
//     clearly over Base means the estimate was high (it came from a round
//     that ended soon after the limit grew, whose first answers had not
//     yet queued much): back off once more from this round, a steady
//     state, and measure again. Measured twice 1.5x the old Base, the
//     upstream itself slowed down (service time, not a queue; once could
//     be other Envoys' queue, whose backoff comes a round later; then
//     at half the limit, see slower): slow start again to fit it.
//   - A round at twice Base or more is a stall or a loss of half the
//     upstream, not a queue the last growth built: the limit halves, no
//     more, and if the next round finds the latency back at Base, slow
//     start finds the limit again (see backoff).
//   - After a backoff, the limit holds: ProbeAfter saturated round
//     trips without growth, where Base follows the means of rounds
//     without a rise both ways and only a clear rise in two rounds (a
//     lost share of the upstream's capacity) backs off (see held). Every
//     probe past the knee queues at the upstream, and what else the
//     upstream serves (requests no rule sees) waits behind it: the limit
//     probes for more only once in a while. A backoff decided on fewer
//     than MinRound samples is rough; the limit probes from it at once.
//
// Slow start grows by half, not TCP's doubling: the crossing of the knee
// then overshoots it by at most half, and the estimate from that round is
// closer. A round whose mean is far over (1+2×Tolerance) ends after half
// of its samples (not in slow start, whose rounds are a round trip
// already, nor while the limit holds), so an overshoot is short.
//
// Samples come in batches (a worker's samples since its last update);
// a batch of another round (the worker had not yet seen the round change) is
// dropped: its requests were admitted under an older limit.
type Gauge struct {
	_ [0]func() // not comparable: no equality function in the module
	// Limit is the learnt number of requests in flight (fractional;
	// admission uses Current).
	Limit float64
	// Base is the latency with no queue, Mean the mean latency of this
	// round's N samples (both saturate at MaxLatency).
	Base, Mean time.Duration
	N          int64
	// BaseN counts the samples behind Base (saturates at 31): a Base
	// from fewer than MinRound is as likely off as a small round.
	BaseN int64
	// Round identifies the round: its start (ms, modulo 2^19: 8.7
	// minutes; a batch is added within seconds of its round).
	Round uint32
	// Calm counts the saturated round trips since the last backoff
	// (saturates at 63): the limit holds until ProbeAfter. In slow
	// start it counts the growths on the fast classes' word since the
	// last round ended (see calmWord).
	Calm int64
	// SlowStart: grow by half per round trip. Measure: this round sets
	// Base.
	// Saturated: the round used its limit (a request was admitted at it,
	// or refused or queued for it).
	// Warned: the previous round's mean was mildly over Base.
	// Stalled: the last backoff was from a round at twice Base or more (see
	// backoff), or the round measuring after it read a Base from too few
	// samples off (see endRound): measured as after a stall.
	// Grown: slow start grew the limit to where it is from a round of
	// MinRound/2 samples or more that read calm (see backoff).
	// FastGrown: Grown, and the fast classes read calm in that round
	// (Fast was FastCalm: they were timed and none waited), for a rule
	// with classes: the limit it grew from had no queue in front of them
	// (see fastCrossing).
	SlowStart, Measure, Saturated, Warned, Stalled, Grown, FastGrown bool
	// Use is the share of Limit the round's requests held in flight, for
	// a rule whose priority classes keep part of the limit from lower
	// classes (0: not measured, a rule without classes: all of it). A
	// backoff estimates the upstream's capacity from the requests really
	// in flight: with only the lower classes sending, Limit × Use is what
	// the latency was measured at (see backoff). Only a Saturated round
	// (one that used the limit or a class's cap) says that: in any other,
	// a low Use is little demand, not the reserves' doing, and the round
	// does not back off at all.
	Use float64
	// Fast is what the round's samples of fast classes said, for a rule
	// with classes (see ClassBases.Fast): 0 (FastNone) none came back,
	// FastCalm none read a queue, FastOnce one did, FastQueue two or more
	// (see fastStep).
	Fast int64
}

// Constants of the adaptive estimator.
const (
	// Tolerance is the latency rise over Base read as a queue at the
	// upstream (10%: about twice the noise of a round's mean when service
	// times vary by a factor of two).
	Tolerance = 0.1
	// Backoff is the fraction of the estimated capacity a backoff keeps.
	Backoff = 0.95
	// InitialLimit is where a cold rule starts (within its bounds), in
	// slow start.
	InitialLimit = 4
	// MaxLatency is the longest latency the Gauge represents (24 bits of
	// microseconds); longer samples count as MaxLatency.
	MaxLatency = (1<<24 - 1) * time.Microsecond
	// MinRound is the fewest samples a round decides on: the mean of 16
	// latencies that vary by a factor of two is within 5% of theirs.
	MinRound = 16
	// ProbeAfter is how many saturated round trips the limit holds
	// after a backoff before it probes for more.
	ProbeAfter = 48
	// GaugeTTL is how long a Gauge nobody updates is kept (then the rule's
	// key starts cold again).
	GaugeTTL = 10 * time.Minute

	// roundMask: a round is identified by its start in ms modulo 2^19
	// (8.7 minutes: a batch is added within seconds of its round; the
	// 20th bit went to Gauge.Fast).
	roundMask = 1<<19 - 1
	useSteps  = 1<<6 - 1
	maxCalm   = 1<<6 - 1
	maxBaseN  = 1<<5 - 1
)

// Current returns the limit admission uses: the learnt limit, rounded
// down, at least 1.
func (g Gauge) Current() int64 { return max(int64(g.Limit), 1) }

// AtLimit reports whether a request admitted with inFlight requests in
// flight (itself included) used the limit: the round then may grow it.
func (g Gauge) AtLimit(inFlight int64) bool { return inFlight*8 >= g.Current()*7 }

// Gauge returns the learnt state in st for l (an adaptive limit): a cold
// st gives the initial gauge (InitialLimit within the bounds, slow start,
// round 0).
func (l Limit) Gauge(st State) Gauge {
	g := DecodeGauge(st)
	if g.Limit <= 0 {
		return Gauge{Limit: float64(min(max(InitialLimit, l.MinLimit()), l.limit)), SlowStart: true, Measure: true}
	}
	return g
}

// Learn adds the batch b to the Gauge in st at now and, when that ends the
// round, moves the limit (see Gauge). A batch of another round changes
// nothing.
func (l Limit) Learn(st State, now int64, b Samples) (State, Gauge) {
	g := l.Gauge(st)
	if !b.Pending() || b.Round != g.Round {
		return st, g
	}
	if b.Fast > 0 {
		g.Fast = min(max(g.Fast, FastCalm)+b.Queued, FastQueue)
	}
	// A batch of only the fast classes' word (see WordAtOnce) may also
	// say that the round used its limit: the worker's batch starts
	// afresh once added.
	g.Saturated = g.Saturated || b.Saturated
	switch {
	case g.fastCrossing():
		return nextRound(g.crossed(l.MinLimit()), now)
	case g.calmWord(b):
		return nextRound(g.grownOnWord(l.clamp), now)
	}
	if b.N <= 0 {
		return EncodeGauge(g), g
	}
	total := min(g.N+b.N, 1<<16-1)
	if b.Use > 0 {
		u := g.Use
		if u <= 0 {
			u = b.Use
		}
		g.Use = (u*float64(g.N) + b.Use*float64(b.N)) / float64(g.N+b.N)
	}
	if b.Exp > 0 {
		// A rule with classes: Base is this round's no-queue latency, its
		// samples' classes' (see ClassBases), so that the round's mean
		// over it is the samples' latency over their classes' bases.
		exp := int64(min(b.Exp, MaxLatency*time.Duration(b.N)))
		if g.N == 0 {
			g.Base = time.Duration(exp / b.N)
		} else {
			g.Base = time.Duration((int64(g.Base)*g.N + exp) / (g.N + b.N))
		}
	}
	g.Mean = time.Duration((int64(g.Mean)*g.N + int64(min(b.Sum, MaxLatency*time.Duration(b.N)))) / (g.N + b.N))
	g.N = total
	need := g.need()
	early := !g.Measure && !g.SlowStart && !g.holding() && g.N >= max(need/2, 4) && float64(g.Mean) > float64(g.Base)*(1+2*Tolerance)
	if g.N < need && !early {
		return EncodeGauge(g), g
	}
	g.Use = g.roundUse(now)
	return nextRound(l.endRound(g), now)
}

// nextRound starts the round after g's (decided) at now.
func nextRound(g Gauge, now int64) (State, Gauge) {
	g.N, g.Mean, g.Saturated, g.Use, g.Fast = 0, 0, false, 0, FastNone
	g.Round = msAt(now) & roundMask
	if g.Round == 0 {
		g.Round = 1 // 0 is a cold gauge's round
	}
	return EncodeGauge(g), g
}

// roundUse returns the share of the limit in flight while the round's
// requests were out, for a rule whose priority classes measure Use (0
// otherwise): the larger of Use, the mean share at their admissions, and
// what Little's law says of the round ending at now (its N requests,
// admitted from its start until about Mean before now, each out for Mean
// on average). Admissions come when a slot has just freed, and a queue's
// waiters are admitted in turns, so the share at admission is the low
// point of the requests in flight, not what the latency was measured at;
// taken for it, the backoff's estimate (see backoff) cuts the limit far
// under the knee. A round shorter than twice its mean says nothing.
func (g Gauge) roundUse(now int64) float64 {
	if g.Use <= 0 || g.Round == 0 || g.Mean <= 0 {
		return g.Use
	}
	span := time.Duration((msAt(now)-g.Round)&roundMask) * time.Millisecond
	if span < 2*g.Mean {
		return g.Use
	}
	little := float64(g.N) * float64(g.Mean) / float64(span-g.Mean/2) / g.Limit
	return min(max(g.Use, little), 1)
}

// Completes reports whether the batch b completes g's round (as g was
// last read: other workers' samples may complete it sooner): a worker adds
// such a batch at once, before it admits requests under the old limit.
func (g Gauge) Completes(b Samples) bool { return b.Round == g.Round && g.N+b.N >= g.need() }

// need returns how many samples the round decides on: about a round trip's
// worth (Limit), at least MinRound to see a rise of Tolerance through the
// noise, but fewer to measure Base or to grow in slow start (a coarse
// decision; under a small limit, MinRound samples span many round trips).
func (g Gauge) need() int64 {
	switch {
	case g.Measure && g.Base == 0:
		return max(g.Current(), MinRound/4) // cold: a round trip
	case g.Measure:
		return max(g.Current(), MinRound/2)
	case g.SlowStart:
		// About the requests the last growth admitted at once: a round
		// trip.
		return max(g.Current()/2, MinRound/4)
	}
	return max(g.Current(), MinRound)
}

// endRound decides a complete round (see Gauge).
func (l Limit) endRound(g Gauge) Gauge {
	clamp := l.clamp
	mean := max(g.Mean, time.Microsecond)
	tol := g.tolerance()
	rise := float64(mean) > float64(g.Base)*(1+tol)
	mild := float64(mean) <= float64(g.Base)*(1+2*tol)
	switch {
	case g.SlowStart && !g.Measure && g.Use > 0 && !g.Saturated:
		// A rule with classes waiting for demand in slow start (see
		// calm): a round that did not use the limit built no queue, and
		// its mean is the mix of a few requests (2-25 ms pages read 1.2x
		// by the mix alone). Taken as a mild rise, it left Warned set at
		// random, and the first round of a launch that read its noise
		// as a rise then ended slow start at 6-9 for the launch (a store
		// of 20 slots: 27% of its orders, one seed of 20 in the
		// store-wide model). It decides nothing.
		g.Warned = false
	case g.Measure && !g.Warned && !g.Stalled && g.Base > 0 && rise && !mild:
		// The limit it backed off to still queues: the round it backed
		// off from ended soon after the limit grew (slow start's), before
		// the queue the growth built reached all its requests. This
		// round's requests were admitted after the queue drained, a
		// steady state: back off from it, once, and measure again. At
		// 1.5x Base or more, the upstream itself may have slowed down
		// (see measured), or others queue at it too (other Envoys, each
		// learning on its own, back off from the same rise a round
		// later): measure once more at this limit before taking it as
		// the upstream's own latency. Over a rough Base, see measured.
		if mean*2 < g.Base*3 {
			if g.BaseN < MinRound {
				g.Stalled = true
				break
			}
			g = g.backoff(mean, clamp)
		}
		g.Warned = true
	case g.Measure:
		g = g.measuring(mean, clamp)
	case g.SlowStart && rise && (mild || g.N < MinRound/2):
		g = g.slowStartRise(mean, mild, clamp)
	case g.SlowStart && !rise && g.N >= MinRound/2 && float64(mean) > float64(g.Base)*(1+tol/2):
		g = g.slowStartEdge(mean, clamp)
	case g.Fast == FastQueue && g.Saturated && mild && !g.SlowStart:
		g = g.fastStep(clamp)
	case g.holding():
		g = g.held(mean, rise, mild, clamp)
	case rise && mild && !g.Warned:
		// A mild rise: noise, once in a while (a round's mean and Base
		// each vary by about 5%); a queue if the next round shows it
		// too.
		g.Warned = true
	case rise:
		g = g.backoff(mean, clamp)
	default:
		g = g.calm(mean, clamp)
	}
	if g.SlowStart {
		g.Calm = 0 // the growths on the fast classes' word since (see calmWord)
	}
	return g
}

// clamp bounds a learnt limit to l's bounds.
func (l Limit) clamp(x float64) float64 { return min(max(x, float64(l.MinLimit())), float64(l.limit)) }

// based counts the round's samples as behind Base.
func (g Gauge) based() Gauge {
	g.BaseN = min(g.BaseN+g.N, maxBaseN)
	return g
}

// tolerance returns the rise over Base a round of N samples reads as a
// queue: Tolerance for a round of MinRound samples, scaled as the noise
// of a mean (1/sqrt(N)): up to 1.5x for slow start's small rounds (4
// latencies that vary by a factor of two average within about 10%), down
// to half for rounds of 64 and more (on 128 workers, Tolerance is a queue
// of 13 that a round of 128 samples sees through its noise of 3%).
func (g Gauge) tolerance() float64 {
	return Tolerance * min(max(math.Sqrt(MinRound/float64(max(g.N, 1))), 0.5), 1.5)
}

// calm decides a round without a rise (see endRound). Base follows the
// round: at once when the upstream got clearly faster; in slow start a
// quarter of the way down, or halfway up (under the knee still, each round
// refines a Base measured on few samples); probing, an eighth of the way,
// from rounds within Tolerance/2 above it or anywhere under it. A Base
// that followed only down would drift under the mean (a round's mean is
// noisy, and every round under Base lowers it) and read noise as a queue;
// one that followed every round up would take in the queue each probe
// builds, and probe past the knee by a little more each time. A saturated
// round grows the limit.
func (g Gauge) calm(mean time.Duration, clamp func(float64) float64) Gauge {
	g.Warned = false
	switch {
	case mean*3/2 < g.Base:
		g.Base, g.BaseN = mean, 0
	case g.SlowStart && mean < g.Base:
		g.Base -= (g.Base - mean) / 4
	case g.SlowStart:
		g.Base = (g.Base + mean) / 2
	case float64(mean) <= float64(g.Base)*(1+Tolerance/2):
		g.Base += (mean - g.Base) / 8
	}
	g = g.based()
	switch {
	case !g.Saturated && g.Use > 0:
		// A rule with classes whose demand did not fill the limit: the
		// limit above the demand was never tested, and the knee it held
		// under may be long gone. When demand comes (a launch), it should
		// find the knee in a few round trips, not probe a sixteenth per
		// round trip: slow start, from where the limit is.
		g.SlowStart = true
	case !g.Saturated:
	case g.Fast == FastOnce && !g.SlowStart:
		// One sample of a fast class waited in the upstream's queue: the
		// limit may already let the lower classes fill the upstream (see
		// fastStep). No probe this round.
	case g.SlowStart:
		// Half again per round trip (see Gauge).
		g.Limit, g.Grown = clamp(g.Limit*3/2), g.N >= MinRound/2
		g.FastGrown = g.Grown && g.Fast == FastCalm
	default:
		// max(1, Limit/16) per round trip. At most a quarter at once,
		// though: a step of several round trips' growth overshoots the
		// knee by as much.
		step := min(max(1, g.Limit/16)*g.trips(), max(1, g.Limit/4))
		if g.Fast == FastCalm {
			// The fast classes' samples say whether the upstream queues
			// (see fastStep): one per round trip, the finest step a lower
			// class's cap can take (the demo's buys: 19 of the store's 20
			// slots at a limit of 22, 21 at 24; Limit/16 went from 22.8
			// to 24.2).
			step = min(step, g.trips())
		}
		g.Limit = clamp(g.Limit + step)
	}
	return g
}

// slowStartEdge decides a slow-start round of MinRound/2 samples or more
// whose mean is over Base by half the tolerance, not the whole: no rise,
// but the round is large enough for that to mean something (a round of 8
// latencies that vary by a factor of two is within 7%). Growing by half
// from a limit already a little over the knee would queue half the limit
// at the upstream (from 27 to 40 on 20 workers: a queue of 20 and more,
// in front of whatever else the upstream serves), and the round's first
// answers understate the queue the last growth built. So it holds the
// limit and decides on the next round; a second such round in a row is a
// small queue, and backs off from it.
func (g Gauge) slowStartEdge(mean time.Duration, clamp func(float64) float64) Gauge {
	if g.Warned {
		return g.backoff(mean, clamp)
	}
	g.Warned = true
	return g
}

// slowStartRise decides a slow-start round that rose mildly, or rose in
// a round too small to tell a rise from noise: hold, and stop growing by
// half if the next round shows it too (no knee measured: grow from here
// as a probe). A Base from fewer than MinRound samples is as likely off
// as this round: average them (a clean measurement follows any backoff);
// one from more stays (the rise is more likely a queue, of other Envoys
// or of the last growth, than noise in Base). A small
// round over (1+3×Tolerance) is not noise, though (the chance of that in
// a round of 4 latencies that vary by a factor of two is about 2%): it
// leaves Base alone, and a second one backs off. Averaging it in would
// take the queue into Base: where other Envoys already queue at the
// upstream, a rule starting cold would then hold that queue for good.
func (g Gauge) slowStartRise(mean time.Duration, mild bool, clamp func(float64) float64) Gauge {
	switch {
	case float64(mean) > float64(g.Base)*(1+3*Tolerance) && g.Warned:
		return g.backoff(mean, clamp)
	case float64(mean) > float64(g.Base)*(1+3*Tolerance):
		g.Warned = true
		return g
	}
	if g.Warned && (g.N >= MinRound/2 || !mild) {
		if g.Grown && g.Use > 0 {
			// The crossing of the knee, for a rule with classes (see
			// backoff): the queue the growth built read as a mild rise,
			// twice (the first answers of a round are its quickest; in
			// the demo, a worker's loop running late under the launch
			// hid the rest). Probing on from the top kept 27 of the
			// store's 20 slots' buys at the store for a second or more;
			// back off to the limit it grew from.
			return g.backoff(mean, clamp)
		}
		g.SlowStart, g.Calm, g.Grown, g.FastGrown = false, ProbeAfter, false, false
	}
	g.Warned = !g.Warned
	if g.BaseN < MinRound {
		g.Base = (g.Base + mean) / 2
		g = g.based()
	}
	return g
}

// held decides a round while the limit holds under the knee it backed off
// to (see ProbeAfter). There a queue shows only if the upstream lost
// capacity, and a loss that matters shows clearly: over 2×Tolerance in two
// rounds in a row (noise does not repeat: where latencies vary by ±50%,
// one round of 16 in tens reads a rise of 20%), or twice Base in one (a
// stall: halved, see backoff). One round between, even 1.5x Base, is not
// enough: the limit did not grow, so the rise is no queue the rule built,
// and on a busy machine it is most often Envoy's worker not scheduled for
// part of the round (the stalls it sees drop their samples, see the
// engine; the shorter ones, between two of its ticks, do not). A
// mild rise is noise, or a queue of one or two that the estimate left:
// Base does not follow it (it would take that queue for the upstream's
// latency and hold it for good). Base follows any other round an eighth
// of the way, both ways, and every round that does not back off counts
// towards the next probe.
func (g Gauge) held(mean time.Duration, rise, mild bool, clamp func(float64) float64) Gauge {
	switch {
	case !mild && (g.Warned || mean >= 2*g.Base):
		return g.backoff(mean, clamp)
	case !mild:
		g.Warned = true
	case rise:
		g.Warned = false
	case mean*3/2 < g.Base:
		g.Base, g.BaseN, g.Warned = mean, g.N, false // clearly faster: the upstream sped up
	default:
		g.Base += (mean - g.Base) / 8
		g.Warned = false
		g = g.based()
	}
	if !g.Saturated && g.Use > 0 && !rise {
		// A rule with classes whose demand did not fill the limit: there
		// is no knee to hold under, and a hold counted only in saturated
		// rounds would last for as long as the demand stays light (the
		// demo's store before its launch: 70 requests a second of 2-25
		// ms never fill a limit of 5). Eight such rounds end it; then
		// the limit waits for demand in slow start (see calm).
		g.Calm += ProbeAfter / 8
	}
	if g.Saturated {
		// Hold just under the knee: every probe past it queues at the
		// upstream, and what else the upstream serves waits behind the
		// probe. ProbeAfter counts round trips, twice as many while
		// lower priority classes alone hold the limit (Use): their probe
		// must lift the limit to the knee / Use, the reserve of the
		// classes above with it, to see the knee at all.
		trips := g.trips()
		if g.Use > 0 && g.Use < 0.9 && g.Calm < ProbeAfter-FastPause {
			// Not in the pause after a fast step (see fastStep): the
			// fast classes' word found the knee, and the step back
			// is no probe through a reserve. Halved, the pause
			// lasted the demo's launch (24 round trips of 300 ms at
			// a limit of 21, the buys' cap 18 of the store's 20
			// slots).
			trips /= 2
		}
		g.Calm += int64(max(1, trips))
		if g.Fast == FastCalm && g.Calm < ProbeAfter-FastPause {
			// The fast classes read calm (see fastStep): a probe past the
			// knee costs one step and a round trip, and they stop it. A
			// hold begun without their word (the crossing's, while Envoy
			// ran too late to time them: the demo's limit of 20, the buys'
			// cap 18, for the launch) ends here; the pause after a step
			// (ProbeAfter-FastPause and on) runs its course.
			g.Calm = ProbeAfter
		}
	}
	return g
}

// trips returns how many round trips a round of need() samples spans
// outside slow start: one, or several under a limit smaller than
// MinRound.
func (g Gauge) trips() float64 { return float64(max(g.Current(), MinRound)) / g.Limit }

// holding reports whether the limit holds where the last backoff put it
// (see ProbeAfter).
func (g Gauge) holding() bool { return !g.SlowStart && !g.Measure && g.Calm < ProbeAfter }

// backoff lowers the limit under the knee a round with the given mean
// shows: with S slots (or cores, or connections) of service time b,
// latency at L > S requests in flight is b·L/S, so Limit·Base/Mean
// estimates S, and the limit drops to Backoff of that. The next round
// measures Base afresh. It then holds there (see ProbeAfter) if the
// round had MinRound samples or more; an estimate from fewer is rough,
// and the limit grows from it as a probe.
func (g Gauge) backoff(mean time.Duration, clamp func(float64) float64) Gauge {
	cut := float64(g.Base) / float64(mean) * Backoff
	// A queue that the last growth built raises latency by about as much
	// (a sixteenth probing; a half in slow start, from a round within
	// Tolerance of Base: 1.65x at most): a round at twice Base or more is
	// a stall (the upstream, or the Envoy reading it, slowed down or
	// paused) or a loss of half the upstream or more. Either way the
	// limit halves, no more: a loss of over half shows again in the next
	// round, which backs off again; after a stall (or a loss of half
	// exactly, which the halved limit fits) slow start finds the limit
	// again (see measured), crossing the knee once, instead of probing
	// back up from a fraction of it, a quarter per round at most.
	stalled := mean >= 2*g.Base
	if g.Use > 0 && !g.Saturated {
		// A rule with classes whose round used neither its limit nor a
		// class's cap: little demand, the rise is no queue the limit
		// built (about one request in flight, latencies that vary by
		// endpoint 2-25 ms, a round of a few samples reads 2x Base by
		// the mix alone). Cutting would set the limit to the demand, not
		// the capacity, and every class's cap to 1: the reserves would
		// protect nothing. Base is measured afresh instead; a round that
		// uses the limit backs off if the queue is real.
		g.Measure, g.Warned, g.FastGrown = true, false, false
		return g
	}
	if !g.SlowStart || stalled {
		cut = max(cut, 0.5)
	}
	if g.Use > 0 {
		cut = g.classesCut(cut, stalled)
	}
	crossed := g.Grown && g.Use > 0 && !stalled && g.Fast != FastNone
	g.Limit = clamp(g.Limit * cut)
	g.Measure, g.SlowStart, g.Warned, g.Calm, g.Stalled, g.Grown, g.FastGrown = true, false, false, 0, stalled, false, false
	if g.N < MinRound || crossed {
		// A rough estimate: probe from it at once. Or the crossing, with
		// fast classes: the limit it keeps had no queue, and past it the
		// fast classes' samples show the upstream's queue at once (see
		// fastStep), so it probes on by one a round trip rather than
		// holding ProbeAfter round trips under a knee it has not
		// measured (in the demo's store, 20 where the buys' cap is 18:
		// the store's 19th and 20th slots idle for the launch).
		g.Calm = ProbeAfter
	}
	return g
}

// measured ends a round that measured Base: the mean of one round,
// averaged with the previous measurement unless the upstream's latency
// clearly moved; a Base 1.5x the old one, in the second round measuring
// it (see endRound) and then at half the limit (see slower), is the
// upstream slowed down: slow start again. After a stall, a round under 1.5x
// the old Base is no queue either (the limit had none before the stall):
// slow start again, from it. A cold rule's first round
// (saturated) also doubles the limit: it had no Base to compare with.
//
// A round measuring after a backoff decided against a Base of fewer than
// MinRound samples, clearly over it, is measured as after a stall too
// (see endRound; why in adaptive_slower.go, "A rough Base").
func (g Gauge) measured(mean time.Duration, clamp func(float64) float64) Gauge {
	old, stalled, oldN := g.Base, g.Stalled, g.BaseN
	g.Base, g.BaseN, g.Measure, g.Warned, g.Stalled, g.Grown, g.FastGrown = mean, g.N, false, false, false, false, false
	switch {
	case stalled && float64(mean) <= float64(old)*(1+Tolerance):
		// The stall is over: latency is back where it was. Grow as from
		// cold, from half the limit, rather than probe back up.
		g.SlowStart, g.Base, g.BaseN = true, old, oldN
		g = g.based()
	case stalled && mean*2 < old*3:
		// Back near it, at half a limit that had no queue before the
		// stall: this is the upstream's latency (the old Base, from slow
		// start's few samples, may be low).
		g.SlowStart, g.Base = true, (old+mean)/2
	case old == 0:
		if g.Saturated {
			g.Limit = clamp(g.Limit * 2) // a cold start: the first doubling
		}
	case mean > old*3/2:
		g = g.slower(clamp)
	case mean*3/2 > old:
		g.Base, g.BaseN = (old+mean)/2, oldN
		g = g.based()
	}
	return g
}
