package limit

import (
	"math/rand"
	"testing"
	"time"
)

// A class's base is the mean of its first samples, then each sample is
// compared with it: the batch's Exp sums the bases, and the Gauge learns
// Sum/Exp on the scale of its Base. Logins of 4 ms and buys of 150 ms in
// one batch read as no rise at all, where one Base (the logins') would
// read the buys as a stall.
func TestClassBasesNormalize(t *testing.T) {
	var cb ClassBases
	for range firstSamples {
		cb.Expect(0, 4*time.Millisecond)
		cb.Expect(1, 150*time.Millisecond)
	}
	if cb.Base(0) != 4*time.Millisecond || cb.Base(1) != 150*time.Millisecond {
		t.Fatalf("bases %v %v, want 4ms 150ms", cb.Base(0), cb.Base(1))
	}
	var b Samples
	for range 3 {
		b.AddBase(4*time.Millisecond, cb.Expect(0, 4*time.Millisecond), true)
	}
	b.AddBase(150*time.Millisecond, cb.Expect(1, 150*time.Millisecond), true)
	if got := b.normalized(10*time.Millisecond) / time.Duration(b.N); got != 10*time.Millisecond {
		t.Errorf("a batch at its classes' bases reads %v on a Base of 10ms, want 10ms", got)
	}
	// A queue of 15 ms at the upstream raises every class by 15 ms: the
	// ratio is (sum of service + 4 x 15) / sum of service.
	b = Samples{}
	for range 3 {
		b.AddBase(19*time.Millisecond, cb.Base(0), true)
	}
	b.AddBase(165*time.Millisecond, cb.Base(1), true)
	want := 10 * time.Millisecond * (3*19 + 165) / (3*4 + 150)
	if got := b.normalized(10*time.Millisecond) / time.Duration(b.N); got < want-time.Microsecond || got > want+time.Microsecond {
		t.Errorf("a queue of 15ms reads %v, want %v", got, want)
	}
	// Without classes (Exp 0), and on a cold Gauge, the latencies as they are.
	if b.normalized(0) != b.Sum {
		t.Errorf("cold Gauge: %v, want the sum %v", b.normalized(0), b.Sum)
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
