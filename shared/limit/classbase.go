package limit

import "time"

// ClassBases is one worker's no-queue latency per priority class of an
// adaptive rule with classes. One Base for a whole store cannot tell a
// queue from a change in the mix of requests: with logins of 4 ms, product
// pages of 20 ms and buys of 150 ms under one rule, a round of buys reads
// as a stall against a Base learnt from the logins, and one of logins as
// an upstream that got faster. So each sample is compared with its own
// class's base, and the Gauge learns from the ratio: a batch's latencies
// over the sum of their classes' bases (Samples.Exp), a mean ratio
// weighted by each sample's base. A queue of W at the upstream then reads
// as (mean service + W) / mean service, as one Base reads it for one class
// (a mean of per-sample ratios would read a queue of one buy, 7 ms, as
// three times a 4 ms login's base: a stall).
//
// A class's base is learnt from its first samples (their mean), then
// follows the mean of its samples in each round the Gauge did not back
// off from, weighted by their number (a memory of followMemory samples,
// each taken at most at twice the base); at once when clearly faster,
// and in the round that measures after a backoff (see RoundEnded). Each
// worker keeps its own: they are the upstream's service
// times, which every worker sees alike, and they need no compare-and-swap.
// Endpoints of very different service times should be in different
// classes: a class's base is one latency, and a change in its mix (a
// class whose 20 ms requests give way to 150 ms ones) reads as a queue.
//
// The zero ClassBases knows no class.
type ClassBases struct {
	_    [0]func() // not comparable: no equality function in the module
	base [maxClassBases]time.Duration
	n    [maxClassBases]uint8 // samples behind base (saturates at firstSamples)
	// sum and cnt gather this worker's samples of the current round, per
	// class, with exp the sum of their bases.
	sum [maxClassBases]time.Duration
	cnt [maxClassBases]int32
	// qsum and qcnt: those of a fast class's samples that waited in the
	// upstream's queue (QueuedTenths times its base or more, see Fast).
	qsum [maxClassBases]time.Duration
	qcnt [maxClassBases]int32
	// seen marks the classes admitted (see Admitted).
	seen uint8
}

// Admitted notes a request of class c admitted: until the class's first
// samples are back, its latency is unknown (see Timing).
func (b *ClassBases) Admitted(c int) {
	b.seen |= 1 << uint(min(max(c, 0), maxClassBases-1))
}

// maxClassBases is the most classes of a rule (config.MaxClasses).
const maxClassBases = 8

// firstSamples is how many samples a class's first base averages: a
// base from a few samples of latencies that vary by a factor of two is
// off by 10% and more, and every round would read that as a rise.
const firstSamples = MinRound

// Base returns class c's no-queue latency (0: not known yet).
func (b *ClassBases) Base(c int) time.Duration {
	if c < 0 || c >= maxClassBases {
		return 0
	}
	return b.base[c]
}

// Expect counts a sample of class c with latency lat and returns the base
// it is compared with: the class's, or while the class is new, lat itself
// (a neutral ratio: its first samples are what its base is learnt from).
// Not the mean of its samples so far: they arrive quickest first (of the
// first buys of a launch, 100-200 ms, the 100 ms ones are back first), so
// each sample would be compared with a mean of quicker ones, and the
// class's first rounds read a rise of 10-20% where nothing queued (slow
// start held, or ended, at the launch's first round).
func (b *ClassBases) Expect(c int, lat time.Duration) time.Duration {
	c = min(max(c, 0), maxClassBases-1)
	lat = min(max(lat, time.Microsecond), MaxLatency)
	b.sum[c] += lat
	b.cnt[c]++
	if 10*lat >= QueuedTenths*b.base[c] && b.Fast(c) {
		b.qsum[c] += lat
		b.qcnt[c]++
	}
	if b.n[c] < firstSamples {
		b.n[c]++
		b.base[c] += (lat - b.base[c]) / time.Duration(b.n[c])
		return lat
	}
	return b.base[c]
}

// Timed reports whether a sample of class c, read by a worker whose event
// loop runs lag late (the engine's estimate, taken out of the sample),
// can say anything about the upstream: not when the class's base is
// under LagTimes times that lag. The wait for the loop varies from
// answer to answer by about as much as its mean, and a correction never
// leaves a latency under its floor: the samples of a class whose
// latency is a few times smaller than the lag read as the lag's noise.
// In `make demo`'s launch, Envoy fell behind the presses for a second
// (its loop 10-50 ms late); the buys' windows were dropped in its stalls
// (see the engine's loop lag) and the rounds were made of the logins
// alone (the other pages refused under the limit of a quiet store), 4-5
// ms read as 10-25: 2-5x a stall, and the limit halved before any buy
// was timed. A new class (no base yet) counts: its samples are neutral.
func (b *ClassBases) Timed(c int, lag time.Duration) bool {
	base := b.Base(c)
	return base == 0 || base >= LagTimes*lag
}

// Bears returns the longest stall of a worker's loop that a sample of
// class c bears (see Sampler.AdmitBearing): an eighth of its base (a
// rise of Tolerance in a round is a queue), or for a class with no base
// yet, of the slowest class's (its samples are neutral: the stall would
// only be in the base they teach). 0: no class has a base.
func (b *ClassBases) Bears(c int) time.Duration {
	if x := b.Base(c); x > 0 {
		return x / 8
	}
	slow := time.Duration(0)
	for _, x := range b.base {
		slow = max(slow, x)
	}
	return slow / 8
}

// Fast reports whether class c is fast: its base is known (its first
// samples are in) and at most an eighth of the slowest class's
// (FastClass). A queue of one of the slowest class's requests at the
// upstream (the wait for one of its slots to free) is then a large part
// of such a class's latency: the demo's logins and home page (3-6 ms)
// waiting for one of twenty 150 ms buys to end read 2-3x their base. The
// Gauge reads its samples' word on the queue apart (Samples.Fast, see
// Gauge.Fast).
func (b *ClassBases) Fast(c int) bool {
	if c < 0 || c >= maxClassBases || b.n[c] < firstSamples {
		return false
	}
	slow := time.Duration(0)
	for _, x := range b.base {
		slow = max(slow, x)
	}
	return b.base[c]*FastClass <= slow
}

// FastClass: see ClassBases.Fast.
const FastClass = 8

// LagTimes: see ClassBases.Timed.
const LagTimes = 4

// RoundEnded moves the bases at the end of a round of the Gauge, which
// went from prev to next (as this worker saw them), and starts gathering
// the next round's samples.
//
// A round the Gauge backed off from moves nothing (its samples hold the
// queue it backed off from), unless a class was clearly faster. The round
// after a backoff measures the no-queue latency, as it does for a rule
// without classes (see Gauge.measured): when the Gauge takes that
// measurement (it ends measuring; a round at 1.5x it measures once more
// before taking it, and a base moved in the first would leave the second
// nothing to see: no slow start), each class's base takes its samples'
// mean there, at once if it moved by half or more. Without
// that, a base learnt while the upstream (or the Envoy timing it) was
// fast moved back up only a step per round, and every round meanwhile
// read a rise: the limit backed off again and again (a median of 5 for 8
// slots in TestClassBasesShift).
//
// Any other round: each class follows its mean, weighted by its samples
// (a memory of followMemory samples, each clipped to twice the base). Not
// gated on the round's own ratio: a class's few samples move that ratio,
// and following only the rounds that read low drifts the base under the
// class's mean (in a model of the demo's store, by a fifth: every round
// then read a rise).
func (b *ClassBases) RoundEnded(prev, next Gauge) {
	calm, measured := next.Limit >= prev.Limit, prev.Measure && !next.Measure
	for c := range b.cnt {
		if b.cnt[c] == 0 || b.n[c] < firstSamples {
			continue
		}
		m, n := b.sum[c]/time.Duration(b.cnt[c]), time.Duration(b.cnt[c])
		switch {
		case m*3/2 < b.base[c] && n >= firstSamples:
			// Clearly faster, in more than a sample or two (one of a
			// class's quick endpoints is not the class getting faster).
			b.base[c] = m
		case !calm:
		case prev.Saturated && b.qcnt[c] > 0 && (b.cnt[c] > b.qcnt[c] || !measured || m >= 2*b.base[c]):
			// A fast class's samples that waited in the upstream's queue
			// while the limit was in use are left out: that queue is the
			// limit's, the Gauge reads it from them (see Fast), and the
			// round's ratio hardly moves. Taken in, they took the
			// demo's logins from 5 to 16 ms at the launch (the round
			// measuring after the crossing found them behind its
			// buys), and the fast classes then read no queue at all.
			// Left out from 1.3x (QueuedTenths), not only from the
			// word's 2x: a login waiting for one of eight 200 ms buys to
			// end reads 1-2x its 20 ms, and taken in, those moved its
			// base up by the wait, after which the fast class read calm
			// on a standing queue.
			if b.cnt[c] > b.qcnt[c] {
				n = time.Duration(b.cnt[c] - b.qcnt[c])
				b.base[c] = b.follow(c, (b.sum[c]-b.qsum[c])/n, n, measured)
			}
		default:
			// Here too: a round measuring after a backoff in which every
			// sample of a fast class read 1.3x its base or more, at a
			// mean under 2x. None came back quick: the class got slower.
			b.base[c] = b.follow(c, m, n, measured)
		}
	}
	b.sum, b.cnt = [maxClassBases]time.Duration{}, [maxClassBases]int32{}
	b.qsum, b.qcnt = [maxClassBases]time.Duration{}, [maxClassBases]int32{}
}

// follow returns class c's base after a round that did not back off
// found n samples at a mean m: measured (the round after a backoff, see
// measuredBase) or followed with a memory of followMemory samples.
func (b *ClassBases) follow(c int, m, n time.Duration, measured bool) time.Duration {
	if measured {
		return measuredBase(b.base[c], m, n)
	}
	m = min(max(m, b.base[c]/2), 2*b.base[c])
	return b.base[c] + (m-b.base[c])*n/(n+followMemory)
}

// followMemory is how many samples a class's base remembers when it
// follows a round (see RoundEnded). Every round that does not back off is
// followed, a held limit's mild rises too: with a memory of firstSamples
// (16), a queue of one or two, taken in at a third of the way per round
// at a limit of 8, raised the bases by the queue, the next probe queued
// more, and the limit drifted to 2-4x the knee in a model of the e2e test
// whose upstream's latency moved by a third (shared/limit
// TestClassBasesShift). Real changes are taken by the round that measures
// after a backoff, and by a clearly faster round, at once.
const followMemory = 4 * firstSamples

// measuredBase returns a class's base b after a round that measured the
// no-queue latency (see RoundEnded) found n samples of the class at a mean
// m: m if it moved by half or more in a few samples (the upstream, or the
// machine timing it, changed: what the Gauge's own Base does), else a
// step towards it weighted by the samples (a memory of MinRound/4: a
// round of a few samples is as likely off as the base).
func measuredBase(b, m, n time.Duration) time.Duration {
	if n >= MinRound/4 && (m > b*3/2 || m*3/2 < b) {
		return m
	}
	return b + (m-b)*n/(n+MinRound/4)
}

// Timing returns how long a Sampler's windows stay open and how long it
// waits for a window's last requests (see Gauge.SamplerTiming) for a rule
// with classes: from the slowest class's base, whose requests make the
// round trip. While a class admitted has no base yet, it waits as for a
// cold rule: the first buys of a launch, after an hour of 5 ms logins,
// take 150 ms, and given up on at three times the logins' latency they
// would read as a stall.
func (b *ClassBases) Timing() (span, wait time.Duration) {
	slow := time.Duration(0)
	for c, x := range b.base {
		slow = max(slow, x)
		if x == 0 && b.seen&(1<<uint(c)) != 0 {
			span, _ = Gauge{Base: slow}.SamplerTiming()
			return span, max(time.Second, 3*slow)
		}
	}
	return Gauge{Base: slow}.SamplerTiming()
}

// QueuedTenths is, in tenths, the latency over its class's base from
// which a sample of a fast class does not move the base in a saturated
// round (see RoundEnded): 1.3x.
const QueuedTenths = 13
