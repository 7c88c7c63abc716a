package limit

import (
	"testing"
	"time"
)

// In slow start, a fast class's sample admitted at the limit that came
// back under FastRise times its base (Samples.Calm) grows the limit by
// half at once, a new round watching the growth (FastGrown); not when a
// fast sample of the round waited, nor while Base is measured or
// unknown, nor outside slow start, nor for a batch of another round.
func TestGaugeCalmWordGrows(t *testing.T) {
	lim, _ := NewAdaptive(1, 1000)
	ms := time.Millisecond
	now := int64(time.Second)
	start := Gauge{Limit: 6, Base: 120 * ms, BaseN: 31, SlowStart: true, Round: 900, N: 2, Mean: 130 * ms, Use: 0.9, Saturated: true}
	calm := Samples{Round: 900, Fast: 1, Calm: 1}
	_, g := lim.Learn(EncodeGauge(start), now, calm)
	if g.Limit != 9 || !g.SlowStart || g.Measure || !g.FastGrown || !g.Grown || g.Round == start.Round || g.N != 0 || !g.WordAtOnce() {
		t.Errorf("a calm word in slow start: %+v, want a new round at 9, FastGrown, slow start on", g)
	}
	// Each calm word in its own round: 6 -> 9 -> 13.5 -> 20.25 -> 30.4,
	// then no more until a round of the slower samples ends (WordGrowths:
	// an upstream that serves its fast classes apart keeps them calm
	// whatever the others' queue).
	for i := range 4 {
		calm.Round = g.Round
		_, g = lim.Learn(EncodeGauge(g), now+int64(i+1)*int64(ms), calm)
	}
	if g.Current() != 30 || g.Calm != WordGrowths {
		t.Errorf("four more calm words: limit %.2f, %d growths on the word, want 30, %d", g.Limit, g.Calm, WordGrowths)
	}
	calm.Round = g.Round
	if _, h := lim.Learn(EncodeGauge(g), now+int64(10*ms), calm); h.Limit != g.Limit || h.Round != g.Round {
		t.Errorf("a fifth calm word: %+v, want the round going on at %.2f", h, g.Limit)
	}
	// The slower samples' round ends: 2x Base, a stall, and no growth;
	// a calm one grows and starts the count again.
	g.N, g.Mean, g.Saturated, g.Use = 10, 2*g.Base, true, 0.9
	if r := lim.endRound(g); r.Limit >= g.Limit || r.SlowStart {
		t.Errorf("a round at twice Base after the words: %+v, want slow start over, the limit down", r)
	}
	g.Mean = g.Base
	if r := lim.endRound(g); r.Current() != 45 || !r.SlowStart || r.Calm != 0 {
		t.Errorf("a calm round after the words: %+v, want 45, slow start, the count at 0", r)
	}
	waited := start
	waited.Fast = FastOnce
	measuring := start
	measuring.Measure = true
	cold := start
	cold.Base = 0
	probing := start
	probing.SlowStart, probing.Calm = false, ProbeAfter
	for _, c := range []struct {
		name string
		g    Gauge
		b    Samples
	}{
		{"a fast sample of the round waited", waited, calm},
		{"the calm word and one that waited in one batch", start, Samples{Round: 900, Fast: 2, Queued: 1, Calm: 1}},
		{"measuring", measuring, calm},
		{"no Base yet", cold, calm},
		{"probing", probing, calm},
		{"a word of another round", start, Samples{Round: 901, Fast: 1, Calm: 1}},
		{"a fast sample that is not calm", start, Samples{Round: 900, Fast: 1}},
	} {
		c.b.Round = c.b.Round - 900 + c.g.Round
		if _, g := lim.Learn(EncodeGauge(c.g), now, c.b); g.Limit != 6 || g.Round != 900 {
			t.Errorf("%s: %+v, want the round going on at 6", c.name, g)
		}
	}
}

// A fast class's sample is Calm only in a round of slow start's growth
// (its word given at once), admitted at the limit, under FastRise times
// its class's base, in a window not given up on.
func TestSamplerCalmWord(t *testing.T) {
	ms := time.Millisecond
	growing := Gauge{Limit: 9, SlowStart: true, Round: 3}
	var p Sampler
	for _, c := range []struct {
		name    string
		g       Gauge
		latency time.Duration
		sat     bool
		want    int64
	}{
		{"calm, at the limit", growing, 9 * ms, true, 1},
		{"calm, under the limit", growing, 9 * ms, false, 0},
		{"2x its base", growing, 10 * ms, true, 0},
		{"probing (word with its window)", Gauge{Limit: 9, Round: 3, Calm: ProbeAfter}, 6 * ms, true, 0},
	} {
		p.ResetTo(c.g, 0)
		buy := p.Admit(0, ms)
		login := p.Admit(0, ms)
		p.DoneFast(login, c.latency, 5*ms, c.sat)
		if p.Ready.Calm != c.want {
			t.Errorf("%s: ready %+v, want Calm %d", c.name, p.Ready, c.want)
		}
		p.DoneBase(buy, 150*ms, 150*ms, true, true)
	}
	p.ResetTo(growing, 0)
	p.Admit(0, ms)
	login := p.Admit(0, ms)
	p.Late(int64(ms), int64(2*ms))
	p.DoneFast(login, 6*ms, 5*ms, true)
	if p.Ready.Calm != 0 || p.Ready.Pending() {
		t.Errorf("a calm login of a window given up on: ready %+v, want no word", p.Ready)
	}
}
