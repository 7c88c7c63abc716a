package limit

import (
	"math/rand"
	"testing"
	"time"
)

// A class's base is the mean of its first samples, then each sample is
// compared with it: the batch's Exp sums the bases, and a round's Base is
// Exp/N, so that its Mean over Base is the latencies over their classes'
// bases. Logins of 4 ms and buys of 150 ms in one round read as no rise at
// all, where one Base (the logins') would read the buys as a stall; a
// queue of 15 ms at the upstream raises every class by 15 ms and reads as
// (the service times + 15 ms each) over the service times.
func TestClassBasesNormalize(t *testing.T) {
	var cb ClassBases
	for range firstSamples {
		cb.Expect(0, 4*time.Millisecond)
		cb.Expect(1, 150*time.Millisecond)
	}
	if cb.Base(0) != 4*time.Millisecond || cb.Base(1) != 150*time.Millisecond {
		t.Fatalf("bases %v %v, want 4ms 150ms", cb.Base(0), cb.Base(1))
	}
	lim, _ := NewAdaptive(1, 1000)
	g := Gauge{Limit: 40, Base: 10 * time.Millisecond, BaseN: 64, Round: 7, Calm: ProbeAfter}
	for _, queue := range []time.Duration{0, 15 * time.Millisecond} {
		b := Samples{Round: 7}
		for range 3 {
			b.AddBase(4*time.Millisecond+queue, cb.Expect(0, 4*time.Millisecond+queue), true)
		}
		b.AddBase(150*time.Millisecond+queue, cb.Expect(1, 150*time.Millisecond+queue), true)
		_, out := lim.Learn(EncodeGauge(g), int64(time.Hour), b)
		rise := float64(out.Mean) / float64(out.Base)
		want := float64(3*4+150+4*queue.Milliseconds()) / (3*4 + 150)
		if out.Base != (3*4+150)*time.Millisecond/4 || rise < want-0.001 || rise > want+0.001 {
			t.Errorf("queue %v: round Base %v, mean over Base %.3f; want %v and %.3f", queue, out.Base, rise, (3*4+150)*time.Millisecond/4, want)
		}
	}
}

// A class's base follows its samples in rounds the Gauge did not back off
// from, both ways, without drifting under its mean (a class of two
// endpoints, 5-10 and 15-25 ms, in rounds of a few samples); a round the
// Gauge backed off from moves nothing.
func TestClassBasesFollow(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var cb ClassBases
	ms := time.Millisecond
	draw := func() time.Duration {
		if rng.Intn(3) == 0 {
			return (5 + time.Duration(rng.Intn(6))) * ms
		}
		return (15 + time.Duration(rng.Intn(11))) * ms
	}
	g := Gauge{Limit: 10}
	for range 2000 {
		for range 1 + rng.Intn(4) {
			cb.Expect(2, draw())
		}
		cb.RoundEnded(g, g)
	}
	mean := (7500*time.Microsecond + 2*20*ms) / 3
	if b := cb.Base(2); b < mean*9/10 || b > mean*11/10 {
		t.Errorf("base %v after 2,000 rounds, want within 10%% of the mean %v", b, mean)
	}
	before := cb.Base(2)
	cb.Expect(2, 100*ms)
	cb.RoundEnded(g, Gauge{Limit: 5})
	if cb.Base(2) != before {
		t.Errorf("a backoff's round moved the base %v -> %v", before, cb.Base(2))
	}
	for range 3 {
		cb.Expect(2, 60*ms)
		cb.RoundEnded(g, g)
	}
	if cb.Base(2) <= before {
		t.Errorf("three rounds at 60ms left the base at %v (was %v)", cb.Base(2), before)
	}
}

// While a class admitted has no base yet, the Sampler waits as for a cold
// rule: the first buys after an hour of logins are not given up on at
// three times the logins' latency (they would read as a stall).
func TestClassBasesTiming(t *testing.T) {
	var cb ClassBases
	cb.Admitted(0)
	for range firstSamples {
		cb.Expect(0, 4*time.Millisecond)
	}
	if _, wait := cb.Timing(); wait != 12*time.Millisecond {
		t.Errorf("wait %v with logins of 4ms known, want 12ms", wait)
	}
	cb.Admitted(3)
	if _, wait := cb.Timing(); wait < time.Second {
		t.Errorf("wait %v with a class admitted and no base, want 1s or more", wait)
	}
	for range firstSamples {
		cb.Expect(3, 150*time.Millisecond)
	}
	if span, wait := cb.Timing(); wait != 450*time.Millisecond || span != 150*time.Millisecond/8 {
		t.Errorf("span %v wait %v, want 18.75ms and 450ms (from the slowest class)", span, wait)
	}
}

// A rule with classes whose demand does not fill its limit waits for
// demand in slow start: an unsaturated calm round after the hold puts it
// there, and eight unsaturated rounds end a hold. Rules without classes
// (Use 0) are as before.
func TestGaugeWaitsForDemandInSlowStart(t *testing.T) {
	lim, _ := NewAdaptive(1, 1000)
	clamp := func(x float64) float64 { return min(max(x, 1), 1000) }
	ms := time.Millisecond
	g := Gauge{Limit: 6, Base: 10 * ms, BaseN: 64, Calm: 0, Use: 0.2, N: 16}
	for i := range 8 {
		if !g.holding() {
			t.Fatalf("hold over after %d light rounds, want 8", i)
		}
		g = g.held(10*ms, false, true, clamp)
	}
	if g.holding() {
		t.Errorf("still holding after 8 light rounds (calm %d)", g.Calm)
	}
	g = lim.endRound(g)
	if !g.SlowStart || g.Limit != 6 {
		t.Errorf("light round after the hold: slow start %v, limit %.1f; want slow start at 6", g.SlowStart, g.Limit)
	}
	g.Saturated = true
	if g = lim.endRound(g); g.Limit != 9 {
		t.Errorf("first saturated round: limit %.1f, want 9 (half again)", g.Limit)
	}
	// Without classes: a light round neither ends the hold nor starts
	// slow start.
	h := Gauge{Limit: 6, Base: 10 * ms, BaseN: 64, N: 16, Mean: 10 * ms}
	if h = lim.endRound(h); h.Calm != 0 || h.SlowStart {
		t.Errorf("rule without classes: calm %d slow start %v, want 0 false", h.Calm, h.SlowStart)
	}
	h.Calm = ProbeAfter
	if h = lim.endRound(h); h.SlowStart {
		t.Errorf("rule without classes after its hold: slow start on a light round")
	}
}

// A new class's first samples are neutral: a launch's first buys (100-200
// ms) come back quickest first, and compared with the mean of the quicker
// ones before them they read a rise where nothing queued (about 1.2x for
// latencies spread evenly, quickest first: slow start held at the
// launch's first round, or ended there). Each of a class's first
// firstSamples is its own base; the class's base is their mean.
func TestClassBasesNewClassIsNeutral(t *testing.T) {
	var cb ClassBases
	var lat, exp time.Duration
	for i := range firstSamples {
		l := time.Duration(100+100*i/(firstSamples-1)) * time.Millisecond // quickest first
		lat += l
		exp += cb.Expect(3, l)
	}
	if r := float64(lat) / float64(exp); r < 0.999 || r > 1.001 {
		t.Errorf("a new class's first %d samples, quickest first, read %.3f of their bases, want 1 (neutral)", firstSamples, r)
	}
	if b := cb.Base(3); b < 149*time.Millisecond || b > 151*time.Millisecond {
		t.Errorf("base %v after the first samples, want their mean 150ms", b)
	}
	if got := cb.Expect(3, 180*time.Millisecond); got != cb.Base(3) {
		t.Errorf("a known class's sample compared with %v, want its base %v", got, cb.Base(3))
	}
}

// A rule with classes waiting for demand in slow start decides nothing on
// a round that did not use the limit: its mean is a few requests' mix,
// no queue. Read as a mild rise, it left Warned set, and the launch's
// first saturated round with a mild rise (noise, or a new class's first
// samples) ended slow start at the pre-launch limit (6-9 for a store of
// 20 slots: 27% of its orders in one seed of the store-wide model).
func TestGaugeLightRoundsLeaveSlowStartAlone(t *testing.T) {
	lim, _ := NewAdaptive(1, 1000)
	ms := time.Millisecond
	g := Gauge{Limit: 6, Base: 10 * ms, BaseN: 64, SlowStart: true, Use: 0.2, N: 8, Mean: 11500 * time.Microsecond}
	for i := range 3 {
		if g = lim.endRound(g); g.Warned || !g.SlowStart || g.Limit != 6 {
			t.Fatalf("light round %d with a mild rise: warned %v slow start %v limit %.1f, want false true 6", i, g.Warned, g.SlowStart, g.Limit)
		}
		g.N, g.Mean = 8, 11500*time.Microsecond
	}
	g.Saturated, g.Use = true, 0.9
	if g = lim.endRound(g); !g.SlowStart || g.Limit != 6 || !g.Warned {
		t.Errorf("first saturated round with a mild rise: slow start %v limit %.1f warned %v, want slow start held at 6, warned", g.SlowStart, g.Limit, g.Warned)
	}
	g.N, g.Mean = 8, 10*ms
	if g = lim.endRound(g); !g.SlowStart || g.Limit != 9 {
		t.Errorf("then a calm saturated round: slow start %v limit %.1f, want slow start, 9", g.SlowStart, g.Limit)
	}
}

// Slow start's crossing of the knee, for a rule with classes: the backoff
// keeps at least the limit slow start grew from when that growth was
// decided on a round of MinRound/2 samples or more that read calm (it had
// no queue, with the same mix). The demo's launch: 20 read calm, 30 read
// 1.42x with 93% of it in flight; the estimate alone gives 18.7 (the buys'
// cap 16), the limit keeps 20. A growth decided on a few samples, or a
// stall (2x), keeps the estimate, as before.
func TestGaugeCrossingKeepsTheCalmLimit(t *testing.T) {
	lim, _ := NewAdaptive(1, 1000)
	ms := time.Millisecond
	cross := func(n int64, rise float64) Gauge {
		g := Gauge{Limit: 20, Base: 130 * ms, BaseN: 63, SlowStart: true, Saturated: true, Use: 0.9, N: n, Mean: 130 * ms}
		if g = lim.endRound(g); g.Limit != 30 || !g.SlowStart {
			t.Fatalf("calm saturated round at 20: limit %.1f slow start %v, want 30 and slow start", g.Limit, g.SlowStart)
		}
		g.N, g.Mean, g.Saturated, g.Use = 18, time.Duration(rise*float64(130*ms)), true, 0.93
		return lim.endRound(g)
	}
	if g := cross(10, 1.42); g.Limit < 20 || g.Limit > 20.01 || !g.Measure {
		t.Errorf("crossing after a growth on 10 samples: limit %.2f (measure %v), want 20 (the calm limit) and a measuring round", g.Limit, g.Measure)
	}
	want := 30 / 1.42 * Backoff * 0.93
	if g := cross(4, 1.42); g.Limit < want-0.05 || g.Limit > want+0.05 {
		t.Errorf("crossing after a growth on 4 samples: limit %.2f, want the estimate %.2f", g.Limit, want)
	}
	if g := cross(10, 2.2); g.Limit != 15 || !g.Stalled {
		t.Errorf("a stall after a growth on 10 samples: limit %.2f stalled %v, want 15 (halved)", g.Limit, g.Stalled)
	}
}

// A class's samples count while its base is at least LagTimes x the
// worker's loop lag; a new class's always do (they are neutral).
func TestClassBasesTimed(t *testing.T) {
	var b ClassBases
	if !b.Timed(1, time.Second) {
		t.Error("a new class under a lag of 1 s: not timed")
	}
	for range firstSamples {
		b.Expect(1, 5*time.Millisecond)
	}
	for _, c := range []struct {
		lag  time.Duration
		want bool
	}{{0, true}, {time.Millisecond, true}, {1250 * time.Microsecond, true}, {1300 * time.Microsecond, false}, {20 * time.Millisecond, false}} {
		if got := b.Timed(1, c.lag); got != c.want {
			t.Errorf("base 5 ms, loop lag %v: timed %v, want %v", c.lag, got, c.want)
		}
	}
}
