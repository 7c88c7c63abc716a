package limit

import (
	"testing"
	"time"
)

// A probing round whose fast classes' samples read a queue (two or more
// at FastRise times their base) steps the limit down by one and pauses the
// probe FastPause round trips, even where the round's ratio read calm;
// the same round without the fast classes' word grows the limit as a
// probe, as before. A round where they read calm grows it by one.
func TestGaugeFastClassesStepDown(t *testing.T) {
	lim, _ := NewAdaptive(1, 1000)
	ms := time.Millisecond
	probe := Gauge{Limit: 23.2, Base: 120 * ms, BaseN: 31, Calm: ProbeAfter, Saturated: true, Use: 0.9, N: 25, Mean: 121 * ms}
	g := probe
	g.Fast = FastQueue
	if g = lim.endRound(g); g.Limit < 22.19 || g.Limit > 22.21 || g.Calm != ProbeAfter-FastPause || !g.holding() {
		t.Errorf("probe at 23.2, fast classes queued: limit %.2f calm %d, want 22.2 and a pause of %d round trips", g.Limit, g.Calm, FastPause)
	}
	if g = lim.endRound(probe); g.Limit <= 24.2 {
		t.Errorf("probe at 23.2, no fast class: limit %.2f, want the probe's max(1, L/16) = %.2f", g.Limit, 23.2+23.2/16)
	}
	g = probe
	g.Fast = FastCalm
	if g = lim.endRound(g); g.Limit < 24.19 || g.Limit > 24.21 {
		t.Errorf("probe at 23.2, fast classes calm: limit %.2f, want 24.2 (one more)", g.Limit)
	}
	g = probe
	g.Fast = FastOnce
	if g = lim.endRound(g); g.Limit != 23.2 {
		t.Errorf("probe at 23.2, one fast sample queued: limit %.2f, want 23.2 (no probe)", g.Limit)
	}
	held := probe
	held.Calm, held.Fast = 10, FastQueue
	if g = lim.endRound(held); g.Limit < 22.19 || g.Limit > 22.21 {
		t.Errorf("holding at 23.2, fast classes queued: limit %.2f, want 22.2", g.Limit)
	}
	for _, c := range []struct {
		name string
		g    Gauge
	}{
		{"a round that did not use the limit", Gauge{Limit: 23.2, Base: 120 * ms, BaseN: 31, Calm: ProbeAfter, Use: 0.4, N: 25, Mean: 121 * ms, Fast: FastQueue}},
		{"slow start", Gauge{Limit: 20, Base: 120 * ms, BaseN: 31, SlowStart: true, Saturated: true, Use: 0.9, N: 12, Mean: 121 * ms, Fast: FastQueue}},
		{"a clear rise", Gauge{Limit: 23.2, Base: 120 * ms, BaseN: 31, Calm: ProbeAfter, Saturated: true, Use: 0.9, N: 25, Mean: 180 * ms, Fast: FastQueue}},
	} {
		want := lim.endRound(withFast(c.g, FastNone))
		if got := lim.endRound(c.g); got.Limit != want.Limit || got.SlowStart != want.SlowStart {
			t.Errorf("%s: the fast classes' queue moved the limit to %.2f, want %.2f as without", c.name, got.Limit, want.Limit)
		}
	}
}

func withFast(g Gauge, f int64) Gauge {
	g.Fast = f
	return g
}

// Learn gathers the fast classes' word over a round's batches (a batch
// with fast samples: calm; each queued sample adds one, up to FastQueue)
// and starts each round without it.
func TestGaugeLearnsFastWord(t *testing.T) {
	lim, _ := NewAdaptive(1, 1000)
	ms := time.Millisecond
	g := Gauge{Limit: 40, Base: 120 * ms, BaseN: 31, Calm: 10, Round: 7}
	st := EncodeGauge(g)
	now := int64(time.Second)
	batch := func(fast, queued int64) {
		st, g = lim.Learn(st, now, Samples{Round: g.Round, N: 2, Sum: 240 * ms, Exp: 240 * ms, Use: 0.9, Saturated: true, Fast: fast, Queued: queued})
	}
	for _, step := range []struct {
		name         string
		fast, queued int64
		want         int64
	}{
		{"no fast sample", 0, 0, FastNone},
		{"a calm fast sample", 1, 0, FastCalm},
		{"then a queued one", 1, 1, FastOnce},
		{"then two more", 2, 2, FastQueue},
	} {
		if batch(step.fast, step.queued); g.Fast != step.want {
			t.Fatalf("%s: Fast %d, want %d", step.name, g.Fast, step.want)
		}
	}
	for g.Round == 7 {
		now += int64(10 * ms)
		batch(0, 0)
	}
	if g.Fast != FastNone {
		t.Errorf("the next round starts with Fast %d, want none", g.Fast)
	}
}

// The crossing of the knee with fast classes probes from the limit it
// keeps at once (the fast classes stop it, see fastStep); without their
// word it holds there, as before.
func TestGaugeCrossingProbesWithFastClasses(t *testing.T) {
	lim, _ := NewAdaptive(1, 1000)
	ms := time.Millisecond
	cross := Gauge{Limit: 30, Base: 130 * ms, BaseN: 31, SlowStart: true, Grown: true, Saturated: true, Use: 0.93, N: 18, Mean: 185 * ms}
	if g := lim.endRound(cross); g.Limit != 20 || g.Calm != 0 {
		t.Fatalf("crossing without the fast classes' word: limit %.2f calm %d, want 20 and a hold", g.Limit, g.Calm)
	}
	for _, f := range []int64{FastCalm, FastOnce, FastQueue} {
		if g := lim.endRound(withFast(cross, f)); g.Limit != 20 || g.Calm != ProbeAfter || !g.Measure {
			t.Errorf("crossing, Fast %d: limit %.2f calm %d measure %v, want 20, calm %d (probe once measured)", f, g.Limit, g.Calm, g.Measure, ProbeAfter)
		}
	}
}

// A class is fast once its base is known and at most an eighth of the
// slowest class's.
func TestClassBasesFast(t *testing.T) {
	var b ClassBases
	for range firstSamples {
		b.Expect(0, 5*time.Millisecond)
		b.Expect(1, 20*time.Millisecond)
	}
	if b.Fast(0) || b.Fast(1) {
		t.Errorf("5 and 20 ms classes, nothing slower: fast %v %v, want neither", b.Fast(0), b.Fast(1))
	}
	b.Expect(2, 150*time.Millisecond)
	if !b.Fast(0) || b.Fast(1) || b.Fast(2) {
		t.Errorf("5, 20 and 150 ms: fast %v %v %v, want only the 5 ms class", b.Fast(0), b.Fast(1), b.Fast(2))
	}
	if b.Fast(-1) || b.Fast(maxClassBases) || b.Fast(5) {
		t.Error("a class out of range or never seen is fast")
	}
}

// A fast class's samples that waited in the upstream's queue while the
// limit was in use do not move its base (they are the Gauge's word on
// that queue); in a round that did not use the limit they do, as any
// sample.
func TestClassBasesLeaveQueuedFastSamples(t *testing.T) {
	ms := time.Millisecond
	run := func(saturated bool) time.Duration {
		var b ClassBases
		for range firstSamples {
			b.Expect(0, 5*ms)
			b.Expect(1, 150*ms)
		}
		b.RoundEnded(Gauge{}, Gauge{})
		g := Gauge{Limit: 22, Saturated: saturated}
		for range 4 {
			for range 6 {
				b.Expect(0, 15*ms) // waited 10 ms for a buy to end
			}
			b.Expect(0, 5*ms)
			b.Expect(1, 150*ms)
			b.RoundEnded(g, g)
		}
		return b.Base(0)
	}
	if got := run(true); got != 5*ms {
		t.Errorf("logins at 3x while the limit was used: base %v, want 5ms", got)
	}
	if got := run(false); got < 7*ms {
		t.Errorf("logins at 3x in rounds that did not use the limit: base %v, want it to follow (over 7ms)", got)
	}
}

// In a saturated round, a fast class's samples from 1.3x its base
// (QueuedTenths) leave its base alone too, not only those at the word's
// 2x: a 20 ms login waiting 0-25 ms for one of eight 200 ms buys to end.
// A round measuring after a backoff where every one of them read 1.3x or
// more, at a mean under 2x, takes them (the class got slower); at a mean
// of 2x or more it does not (a queue draining).
func TestClassBasesLeaveWaitsUnder2x(t *testing.T) {
	ms := time.Millisecond
	run := func(prev, next Gauge, lats ...time.Duration) time.Duration {
		var b ClassBases
		for range firstSamples {
			b.Expect(0, 20*ms)
			b.Expect(1, 200*ms)
		}
		b.RoundEnded(Gauge{}, Gauge{})
		for range 8 {
			for _, l := range lats {
				b.Expect(0, l)
			}
			b.Expect(1, 200*ms)
			b.RoundEnded(prev, next)
		}
		return b.Base(0)
	}
	held := Gauge{Limit: 11, Saturated: true}
	measuring := Gauge{Limit: 11, Saturated: true, Measure: true}
	for _, c := range []struct {
		name   string
		prev   Gauge
		lats   []time.Duration
		lo, hi time.Duration
	}{
		{"held, waits of 1.4-1.9x", held, []time.Duration{28 * ms, 38 * ms, 20 * ms}, 20 * ms, 20 * ms},
		{"held, 1.2x", held, []time.Duration{24 * ms, 24 * ms, 24 * ms, 24 * ms}, 21 * ms, 24 * ms},
		{"measuring, all at 1.6x", measuring, []time.Duration{32 * ms, 32 * ms, 32 * ms, 32 * ms}, 31 * ms, 32 * ms},
		{"measuring, 1.6x and a quick one", measuring, []time.Duration{32 * ms, 32 * ms, 32 * ms, 20 * ms}, 20 * ms, 20 * ms},
		{"measuring, all at 3x", measuring, []time.Duration{60 * ms, 60 * ms, 60 * ms, 60 * ms}, 20 * ms, 20 * ms},
	} {
		if got := run(c.prev, held, c.lats...); got < c.lo || got > c.hi {
			t.Errorf("%s: the logins' base %v, want %v-%v", c.name, got, c.lo, c.hi)
		}
	}
}

// DoneFast counts a fast class's sample in Samples.Fast, and in Queued
// when it took FastRise times its base.
func TestSamplerDoneFast(t *testing.T) {
	ms := time.Millisecond
	var p Sampler
	p.Reset(3, 0)
	a := p.Admit(0, ms)
	b := p.Admit(0, ms)
	c := p.Admit(0, ms)
	p.DoneFast(a, 4*ms, 5*ms, true)
	p.DoneFast(b, 12*ms, 5*ms, true)
	p.DoneBase(c, 150*ms, 150*ms, true, true)
	p.Close(int64(2*ms), ms)
	if r := p.Ready; r.N != 3 || r.Fast != 2 || r.Queued != 1 || r.Exp != 160*ms {
		t.Errorf("ready %+v, want 3 samples, 2 fast, 1 queued, Exp 160ms", r)
	}
}

// Slow start's crossing, for a rule with classes, read as a mild rise
// twice after a growth from a calm round (Grown): it backs off to the
// limit it grew from, rather than ending slow start at the top and
// probing on from there (a rule without classes, or a growth from a
// round of few samples, still does).
func TestGaugeCrossingMildTwiceBacksOff(t *testing.T) {
	lim, _ := NewAdaptive(1, 1000)
	ms := time.Millisecond
	mild := func(g Gauge) Gauge {
		for range 2 {
			g.N, g.Mean, g.Saturated = 15, 172*ms, true
			g = lim.endRound(g)
		}
		return g
	}
	grown := Gauge{Limit: 30, Base: 150 * ms, BaseN: 31, SlowStart: true, Grown: true, Use: 0.9}
	want := 30 * 150.0 / 172 * Backoff * 0.9 // the estimate, over the floor of 20
	if g := mild(grown); g.SlowStart || g.Limit < want-0.01 || g.Limit > want+0.01 || !g.Measure {
		t.Errorf("with classes, grown from 20: limit %.2f slow start %v measure %v, want %.2f (backed off, measuring)", g.Limit, g.SlowStart, g.Measure, want)
	}
	grown.Use = 0.5
	if g := mild(grown); g.Limit != 20 {
		t.Errorf("with classes, grown from 20, Use 0.5: limit %.2f, want 20 (the limit it grew from)", g.Limit)
	}
	for _, c := range []struct {
		name string
		g    Gauge
	}{
		{"without classes", Gauge{Limit: 30, Base: 150 * ms, BaseN: 31, SlowStart: true, Grown: true}},
		{"grown on few samples", Gauge{Limit: 30, Base: 150 * ms, BaseN: 31, SlowStart: true, Use: 0.9}},
	} {
		if g := mild(c.g); g.SlowStart || g.Limit != 30 || g.Calm != ProbeAfter {
			t.Errorf("%s: limit %.2f slow start %v calm %d, want slow start ended at 30, probing", c.name, g.Limit, g.SlowStart, g.Calm)
		}
	}
}

// A hold begun without the fast classes' word ends at the first saturated
// round where they read calm (the limit probes next); the pause after a
// fast step runs its course; a hold whose rounds have no word holds as
// before.
func TestGaugeFastCalmEndsHold(t *testing.T) {
	lim, _ := NewAdaptive(1, 1000)
	ms := time.Millisecond
	hold := Gauge{Limit: 20, Base: 120 * ms, BaseN: 31, Calm: 3, Saturated: true, Use: 0.9, N: 22, Mean: 121 * ms}
	if g := lim.endRound(withFast(hold, FastCalm)); g.Calm != ProbeAfter || g.Limit != 20 {
		t.Errorf("holding at 20, the fast classes calm: calm %d limit %.1f, want the hold over (calm %d), the limit as it was", g.Calm, g.Limit, ProbeAfter)
	}
	if g := lim.endRound(hold); g.Calm >= ProbeAfter-FastPause {
		t.Errorf("holding at 20, no fast word: calm %d, want the hold going on", g.Calm)
	}
	pause := withFast(hold, FastCalm)
	pause.Calm = ProbeAfter - FastPause
	if g := lim.endRound(pause); g.Calm >= ProbeAfter {
		t.Errorf("in the pause after a fast step, the fast classes calm: calm %d, want the pause going on", g.Calm)
	}
}

// After slow start's growth from a saturated round where the fast classes
// read calm (FastGrown), their word comes before their samples' windows
// complete: two samples that waited CrossRise times their base end the
// round at once, back at the limit it grew from (measured next, without
// a second backoff, then probing); one does not, nor two after a growth
// from a round where they did not read calm, nor outside slow start.
func TestGaugeFastCrossing(t *testing.T) {
	lim, _ := NewAdaptive(1, 1000)
	ms := time.Millisecond
	now := int64(time.Second)
	start := Gauge{Limit: 30, Base: 130 * ms, BaseN: 31, SlowStart: true, Grown: true, FastGrown: true, Round: 900, N: 3, Mean: 130 * ms, Use: 0.9}
	word := func(g Gauge, queued int64) Gauge {
		_, g = lim.Learn(EncodeGauge(g), now, Samples{Round: g.Round, Fast: queued, Queued: queued})
		return g
	}
	g := word(start, 2)
	if g.Limit != 20 || g.SlowStart || !g.Measure || g.Calm != ProbeAfter || g.Round == start.Round || g.N != 0 || g.Grown || g.FastGrown {
		t.Errorf("two fast samples waited after the growth: %+v, want a new round at 20, measuring, then probing", g)
	}
	m := g
	m.N, m.Mean, m.Base, m.Saturated, m.Use = 24, 120*ms, 100*ms, true, 0.9
	if m = lim.endRound(m); m.Limit != 20 || m.Measure {
		t.Errorf("its measuring round 1.2x its base: %+v, want 20 measured (that limit had no queue), no second backoff", m)
	}
	if g = word(start, 1); g.Limit != 30 || !g.SlowStart || g.Fast != FastOnce || g.N != 3 || g.Round != start.Round {
		t.Errorf("one waited: %+v, want the round going on at 30, Fast one", g)
	}
	if _, g = lim.Learn(EncodeGauge(start), now, Samples{Round: start.Round, Fast: 1, Saturated: true}); !g.Saturated || g.N != 3 {
		t.Errorf("a batch of only the word, saturated: %+v, want the round saturated (the worker's batch starts afresh)", g)
	}
	notCalm := start
	notCalm.FastGrown = false
	probing := start
	probing.SlowStart, probing.Grown, probing.FastGrown, probing.Calm = false, false, false, ProbeAfter
	for _, c := range []struct {
		name string
		g    Gauge
	}{
		{"a growth from a round where the fast classes did not read calm", notCalm},
		{"probing", probing},
	} {
		if g := word(c.g, 2); g.Limit != 30 || g.Round != 900 || g.Fast != FastQueue {
			t.Errorf("%s, two waited: %+v, want the round going on at 30 with the word kept", c.name, g)
		}
	}
	if _, g := lim.Learn(EncodeGauge(start), now, Samples{Round: start.Round + 1, Fast: 2, Queued: 2}); g.Limit != 30 {
		t.Errorf("a word of another round: limit %.1f, want 30", g.Limit)
	}
}

// Slow start's growth is FastGrown from a saturated round of MinRound/2
// samples or more where the fast classes read calm, not where one waited
// or none came back; its next round takes their word at once either way
// (Gauge.WordAtOnce); every way out of slow start clears both.
func TestGaugeFastGrown(t *testing.T) {
	lim, _ := NewAdaptive(1, 1000)
	ms := time.Millisecond
	round := Gauge{Limit: 20, Base: 130 * ms, BaseN: 31, SlowStart: true, Saturated: true, N: 10, Mean: 131 * ms, Use: 0.9}
	for _, c := range []struct {
		fast int64
		n    int64
		want bool
	}{{FastCalm, 10, true}, {FastOnce, 10, false}, {FastNone, 10, false}, {FastCalm, MinRound/2 - 1, false}} {
		r := withFast(round, c.fast)
		r.N = c.n
		if g := lim.endRound(r); g.Limit != 30 || g.FastGrown != c.want || !g.WordAtOnce() {
			t.Errorf("fast %d, %d samples: limit %.1f FastGrown %v, want 30, %v", c.fast, c.n, g.Limit, g.FastGrown, c.want)
		}
	}
	grown := Gauge{Limit: 30, Base: 130 * ms, BaseN: 31, SlowStart: true, Saturated: true, Grown: true, FastGrown: true, N: 20, Use: 0.9}
	for _, mean := range []time.Duration{200 * ms, 150 * ms} { // a clear rise: backoff; a mild one, twice
		g := grown
		g.Mean, g.Warned = mean, true
		if g = lim.endRound(g); g.SlowStart || g.FastGrown || g.WordAtOnce() {
			t.Errorf("mean %v after the growth: %+v, want slow start over, FastGrown cleared", mean, g)
		}
	}
}

// In a round of slow start's growth (Gauge.WordAtOnce), a fast class's
// word reaches the Sampler's batch as soon as its sample is back (its
// latency when its window completes), waited at CrossRise times its base,
// unless its window was given up on; in any other round it comes with the
// window, waited at FastRise.
func TestSamplerFastWordAtOnce(t *testing.T) {
	ms := time.Millisecond
	watch := Gauge{Limit: 30, SlowStart: true, Grown: true, FastGrown: true, Round: 3}
	var p Sampler
	p.ResetTo(watch, 0)
	buy := p.Admit(0, ms)
	login := p.Admit(0, ms)
	calm := p.Admit(0, ms)
	p.DoneFast(login, 25*ms, 5*ms, true)
	p.DoneFast(calm, 12*ms, 5*ms, true)
	if r := p.Ready; r.N != 0 || r.Fast != 2 || r.Queued != 1 || !r.Pending() {
		t.Errorf("logins of 25 and 12 ms (base 5 ms) back before their window's buy: ready %+v, want their word (2 fast, 1 queued), no sample yet", r)
	}
	p.DoneBase(buy, 150*ms, 150*ms, true, true)
	p.Close(int64(2*ms), ms)
	if r := p.Ready; r.N != 3 || r.Fast != 2 || r.Queued != 1 {
		t.Errorf("the window complete: ready %+v, want 3 samples, the word once", r)
	}
	p.ResetTo(watch, 0)
	buy = p.Admit(0, ms)
	login = p.Admit(0, ms)
	p.Late(int64(ms), int64(2*ms))
	p.DoneFast(login, 25*ms, 5*ms, true)
	if r := p.Ready; r.Fast != 0 || r.Pending() {
		t.Errorf("a login of a window given up on: ready %+v, want no word", r)
	}
	_ = buy
	other := watch
	other.SlowStart, other.FastGrown = false, false
	p.ResetTo(other, 0)
	buy = p.Admit(0, ms)
	login = p.Admit(0, ms)
	p.DoneFast(login, 12*ms, 5*ms, true)
	if r := p.Ready; r.Fast != 0 || r.Pending() {
		t.Errorf("a round that does not watch a growth: ready %+v, want no word before the window completes", r)
	}
	p.DoneBase(buy, 150*ms, 150*ms, true, true)
	p.Close(int64(2*ms), ms)
	if r := p.Ready; r.N != 2 || r.Fast != 1 || r.Queued != 1 {
		t.Errorf("its window complete: ready %+v, want 2 samples, the word (a login of 12 ms on 5 waited)", r)
	}
}
