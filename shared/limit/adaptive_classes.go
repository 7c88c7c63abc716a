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

// KeptFree is the share of the limit that a round's requests left free
// (1 - Use) from which a backoff keeps the capacity estimate whole: the
// reserves of the classes that did not fill it are margin enough (see
// classesCut).
const KeptFree = 0.2

// FastRise is the latency over its class's base at which a sample of a
// fast class waited in the upstream's queue (see ClassBases.Fast).
const FastRise = 2

// CrossRise is FastRise for the word that ends slow start's growth at once
// (see WordAtOnce): a queue the growth built is 10-20x a 4 ms login's base
// (the demo's store, 20 to 30 on its 20 slots: 7 buys of 150 ms ahead);
// a store slowed by a few ms, every class alike, reads 2-3x.
const CrossRise = 2 * FastRise

// addFastWord counts the word of a sample of a fast class whose
// no-queue latency is base (see ClassBases.Fast): Fast, and Queued if it
// waited.
func (s *Samples) addFastWord(latency, base time.Duration, rise int64) {
	s.Fast++
	if latency >= time.Duration(rise)*base {
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
		use := g.Use
		if use <= 1-KeptFree {
			// The reserves kept a fifth of the limit or more free of the
			// classes that filled their caps: that share is the margin
			// under the knee (the classes above fill it only together, a
			// login at a time), and the Backoff margin on top of it held
			// the capacity estimate a slot lower: on 8 slots with a
			// quarter reserved, 7 instead of 8, the buys' cap 5 of the 8
			// slots instead of 6 (TestClassesAdaptiveInEnvoy sold 53-62%
			// of the slots' buys). A thinner reserve (the demo's store:
			// a tenth for logins and the home page) keeps the margin.
			use /= Backoff
		}
		cut = max(cut*use, min(cut, 0.5))
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

// WordAtOnce reports whether g's round is one of slow start's growth
// (not measuring Base): the fast classes' word then reaches the Gauge as
// soon as each of their samples is back (see Sampler.ResetTo), to end the
// growth on a queue (see fastCrossing) or to grow again on a free slot
// (see calmWord). In other rounds it comes with their windows, as the
// round's other samples do: a round's word is then that of the same
// requests as its mean (a store slowed down, every class a few ms
// slower, reads to a 4 ms login as a queue does; counted at once, more
// of its samples made more rounds of such a store step down, see
// fastStep).
func (g Gauge) WordAtOnce() bool { return g.SlowStart && !g.Measure }

// fastCrossing reports whether the round's fast classes say that slow
// start's last growth crossed the knee: two of them, admitted after a
// growth from a saturated round where they read calm (FastGrown: the
// limit it grew from had no queue in front of them), waited CrossRise
// times their base or more. Their word comes as soon as they are back
// (see WordAtOnce): a 4 ms login behind the crossing's queue of buys is
// back 100-200 ms before the round's buys are, and every buy that ends
// meanwhile is replaced by a press at the grown limit, so the store's
// queue lasts until the limit comes down. Without the calm round before
// (a store slowed by its own CPU from the launch's first round on reads
// 2x to a login with no queue at all), ending slow start on the word
// took the limit back to 6 in such launches (a median of 78% of the
// orders, the 10th percentile 43%, in the store-wide model).
func (g Gauge) fastCrossing() bool {
	return g.WordAtOnce() && g.FastGrown && g.Fast == FastQueue
}

// calmWord reports whether a batch with Calm samples (see Samples.Calm)
// grows g's slow start at once: a request of a fast class admitted with
// the limit used (7/8 of it in flight or more) found the upstream with a
// free slot, and no fast sample of the round waited. A queue at the
// upstream would have kept it waiting for one of the slowest class's
// requests to end (see ClassBases.Fast), so the limit it was admitted
// under had no queue, whatever the round's slower samples still out will
// say. Slow start's rounds are a round trip of the slowest class (the
// demo's buys, 150 ms: four rounds from the quiet store's 6 to its 20
// slots, most of the launch's first second at a fraction of the store);
// the logins and the home page come back in a few ms, and take the limit
// there in tens of ms. The growth is FastGrown: the word that ends it is
// theirs too (see fastCrossing).
//
// At most WordGrowths in a row (Calm counts them in slow start), then a
// round of the slower samples must end first: an upstream that serves
// its fast classes apart (another pool of workers) keeps them calm
// whatever queue the others have, and growths on their word alone, each
// starting a new round, would never let the others' rise be read.
func (g Gauge) calmWord(b Samples) bool {
	return b.Calm > 0 && g.WordAtOnce() && g.Fast == FastCalm && g.Base > 0 && g.Calm < WordGrowths
}

// WordGrowths bounds the growths on the fast classes' word between two
// rounds that end in slow start (see calmWord): 1.5^4, about 5x, takes
// the demo's quiet store from 6 past its 20 slots to 30, where the
// crossing's word ends the growth. With three, the round that had to end
// at 20 read its few buys' noise as a rise in 2 seeds of 40 of the
// store-wide model, and backed off to 10-14 (67% and 82% of the orders).
const WordGrowths = 4

// grownOnWord grows g by half on the fast classes' word (see calmWord).
func (g Gauge) grownOnWord(clamp func(float64) float64) Gauge {
	g.Limit, g.Grown, g.FastGrown, g.Warned = clamp(g.Limit*3/2), true, true, false
	g.Calm++
	return g
}

// crossed decides a round ended on the fast classes' word that slow
// start crossed the knee (see fastCrossing): the limit it grew from (it
// had no queue; at least lo), measured in the next round, then probing
// at once (see backoff). The measuring round does not back off once more
// on a rise (Warned, see endRound): that limit had no queue, and this
// round starts while the growth's queue drains, the lower classes over
// their caps, its first samples the higher classes' (in a store slowed
// as the crossing came, 2x their bases: it backed off from 20 to 14, a
// seed of the store-wide model sold 58% where the crossing decided at the
// round's end sold 80%).
func (g Gauge) crossed(lo int64) Gauge {
	g.Limit = max(g.Limit*2/3, float64(lo))
	g.Measure, g.SlowStart, g.Warned, g.Calm, g.Stalled, g.Grown, g.FastGrown = true, false, true, ProbeAfter, false, false, false
	return g
}
