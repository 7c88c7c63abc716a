package limit

import (
	"testing"
	"time"
)

const smpMs = int64(time.Millisecond)

// A window's samples count once all its requests are done, and not
// before: the first answers alone would be the quick ones.
func TestSamplerCountsWholeWindows(t *testing.T) {
	var p Sampler
	p.Reset(7, 0)
	span := 10 * time.Millisecond
	var tickets []uint32
	for range 4 {
		tickets = append(tickets, p.Admit(0, span))
	}
	for i, lat := range []time.Duration{20, 30, 40} {
		if !p.Done(tickets[i], lat*time.Millisecond, true, false) {
			t.Fatalf("request %d not counted", i)
		}
	}
	p.Close(10*smpMs, span)
	if p.Ready.N != 0 {
		t.Fatalf("a window with a request out gave %+v", p.Ready)
	}
	p.Done(tickets[3], 110*time.Millisecond, true, true)
	if p.Ready.N != 4 || p.Ready.Sum != 200*time.Millisecond || !p.Ready.Saturated || p.Ready.Round != 7 {
		t.Fatalf("the complete window gave %+v, want 4 samples of 200ms in all, saturated, round 7", p.Ready)
	}
	// The open window never counts: it may admit more.
	tk := p.Admit(12*smpMs, span)
	p.Done(tk, 5*time.Millisecond, true, false)
	if p.Ready.N != 4 {
		t.Fatalf("the open window counted: %+v", p.Ready)
	}
	p.Close(25*smpMs, span)
	if p.Ready.N != 5 {
		t.Fatalf("closed and complete, the window did not count: %+v", p.Ready)
	}
}

// The defect the Sampler fixes: 16 requests admitted 1 ms apart, half of
// them answering in 25 ms and half in 75 ms. A round of the first 8
// answers reads 25 ms; the Sampler's complete windows read the upstream's
// 50 ms (its windows are decided by admission, whatever their latencies).
func TestSamplerIsNotBiasedByLatency(t *testing.T) {
	var p Sampler
	p.Reset(1, 0)
	span := 5 * time.Millisecond
	type req struct {
		ticket         uint32
		admitted, done int64
	}
	var out []req
	for i := range int64(16) {
		lat := 25 * smpMs
		if i%2 == 1 {
			lat = 75 * smpMs
		}
		out = append(out, req{p.Admit(i*smpMs, span), i * smpMs, i*smpMs + lat})
	}
	var first, ready Samples // the first 8 answers; the Sampler's first 8 or more
	for now := int64(0); now <= 100*smpMs && ready.N == 0; now += smpMs {
		p.Close(now, span)
		for _, r := range out {
			if r.done != now {
				continue
			}
			if first.N < 8 {
				first.Add(time.Duration(now-r.admitted), false)
			}
			p.Done(r.ticket, time.Duration(now-r.admitted), true, false)
		}
		if p.Ready.N >= 8 {
			ready = p.Ready
		}
	}
	if first.N != 8 || first.Sum/8 != 25*time.Millisecond {
		t.Fatalf("the first 8 answers: %+v", first)
	}
	if ready.N < 8 || ready.Sum/time.Duration(ready.N) != 50*time.Millisecond {
		t.Fatalf("the Sampler's first 8 or more: %+v, want a mean of 50ms", ready)
	}
}

// After a Reset (a new round), the requests admitted before do not count,
// and their tickets never match a new window.
func TestSamplerResetDropsTheOldRound(t *testing.T) {
	var p Sampler
	p.Reset(1, 0)
	old := p.Admit(0, time.Millisecond)
	p.Reset(2, 5*smpMs)
	tk := p.Admit(5*smpMs, time.Millisecond)
	if p.Done(old, time.Millisecond, true, false) {
		t.Fatal("a request of the old round counted")
	}
	if tk == old || !p.Done(tk, time.Millisecond, true, false) {
		t.Fatalf("tickets %d, %d", old, tk)
	}
	p.Close(10*smpMs, time.Millisecond)
	if p.Ready.N != 1 || p.Ready.Round != 2 {
		t.Fatalf("ready %+v, want 1 sample of round 2", p.Ready)
	}
}

// A request that never answers does not hold the window for good: wait
// after the window closed, it counts at its age then, and its late answer
// counts no more.
func TestSamplerExpiresStragglers(t *testing.T) {
	var p Sampler
	p.Reset(1, 0)
	span, wait := 10*time.Millisecond, 100*time.Millisecond
	a, b := p.Admit(0, span), p.Admit(2*smpMs, span)
	p.Done(a, 30*time.Millisecond, true, false)
	p.Close(10*smpMs, span)
	p.Expire(109*smpMs, wait)
	if p.Ready.N != 0 {
		t.Fatalf("expired early: %+v", p.Ready)
	}
	p.Expire(150*smpMs, wait)
	if p.Ready.N != 2 || p.Ready.Sum != 170*time.Millisecond {
		t.Fatalf("ready %+v, want 30ms and the straggler at 140ms", p.Ready)
	}
	if p.Done(b, 500*time.Millisecond, true, false) {
		t.Fatal("the straggler counted twice")
	}
}

// With every window in use the open one stays open: no request is lost,
// and the windows count in order once the oldest is complete.
func TestSamplerFullWindows(t *testing.T) {
	var p Sampler
	p.Reset(1, 0)
	span := time.Millisecond
	var tickets []uint32
	for i := range int64(20) {
		tickets = append(tickets, p.Admit(i*2*smpMs, span))
	}
	for i := len(tickets) - 1; i >= 1; i-- {
		p.Done(tickets[i], time.Millisecond, true, false)
	}
	if p.Ready.N != 0 {
		t.Fatalf("counted past the oldest window, still out: %+v", p.Ready)
	}
	p.Done(tickets[0], time.Millisecond, true, false)
	p.Close(100*smpMs, span)
	if p.Ready.N != 20 {
		t.Fatalf("ready %+v, want all 20", p.Ready)
	}
}

// A batch completes the round once the round's samples reach its need.
func TestGaugeCompletes(t *testing.T) {
	g := Gauge{Limit: 20, Base: 50 * time.Millisecond, Round: 3, N: 10, Calm: ProbeAfter}
	if g.Completes(Samples{Round: 3, N: 9}) || !g.Completes(Samples{Round: 3, N: 10}) || g.Completes(Samples{Round: 4, N: 30}) {
		t.Fatalf("Completes of a round of %d needing %d", g.N, g.need())
	}
}

// A request cut short (its client gone before the answer, early) leaves
// its window with the quick answers only: the window counts for nothing.
func TestSamplerCutWindowCountsForNothing(t *testing.T) {
	var p Sampler
	p.Reset(1, 0)
	span := 10 * time.Millisecond
	a, b := p.Admit(0, span), p.Admit(0, span)
	p.Done(a, 20*time.Millisecond, true, false)
	if !p.Cut(b) || p.Cut(b) {
		t.Fatal("Cut: the request was not counted once")
	}
	c := p.Admit(12*smpMs, span)
	p.Done(c, 30*time.Millisecond, true, false)
	p.Close(30*smpMs, span)
	if p.Ready.N != 1 || p.Ready.Sum != 30*time.Millisecond {
		t.Fatalf("ready %+v, want the second window's one sample only", p.Ready)
	}
}

// A worker that was late (its loop stalled from since on) drops the
// windows of the requests out then: their latencies hold the stall. The
// windows complete before it, and those opened after it, count; the open
// window dropped, the admissions that follow go to a new one.
func TestSamplerLateDropsTheWindowsOut(t *testing.T) {
	var p Sampler
	p.Reset(1, 0)
	span := 10 * time.Millisecond
	a := p.Admit(0, span) // window 1, done before the stall
	p.Done(a, 5*time.Millisecond, true, false)
	b := p.Admit(12*smpMs, span) // window 2, out during the stall
	c := p.Admit(15*smpMs, span)
	if n := p.Late(20*smpMs, 150*smpMs); n != 1 {
		t.Fatalf("Late dropped %d windows, want 1", n)
	}
	if n := p.Late(20*smpMs, 151*smpMs); n != 0 {
		t.Fatalf("Late again dropped %d windows, want none more", n)
	}
	d := p.Admit(151*smpMs, span) // after the stall: a new window
	p.Done(b, 140*time.Millisecond, true, false)
	p.Done(c, 135*time.Millisecond, true, false)
	p.Done(d, 30*time.Millisecond, true, false)
	p.Close(200*smpMs, span)
	if p.Ready.N != 2 || p.Ready.Sum != 35*time.Millisecond {
		t.Fatalf("ready %+v, want the samples of the windows before and after the stall (5 ms and 30 ms)", p.Ready)
	}
}

// Counts: a request's sample counts while its window does; not once the
// window was dropped in a stall (Late) or the request is done.
func TestSamplerCounts(t *testing.T) {
	var p Sampler
	p.Reset(1, 0)
	a := p.Admit(0, time.Millisecond)
	b := p.Admit(int64(2*time.Millisecond), time.Millisecond)
	if !p.Counts(a) || !p.Counts(b) {
		t.Fatalf("fresh windows: counts %v %v, want true true", p.Counts(a), p.Counts(b))
	}
	p.Late(int64(time.Millisecond), int64(5*time.Millisecond))
	if p.Counts(a) || !p.Counts(b) {
		t.Errorf("after a stall from 1ms: counts %v %v, want false (out during it) true (opened after)", p.Counts(a), p.Counts(b))
	}
	p.Done(b, time.Millisecond, true, false)
	if p.Counts(b) {
		t.Error("a request done still counts")
	}
}

// A stall drops the windows of the requests out during it only when it
// is longer than all of them bear (AdmitBearing): a window of buys
// (bearing 18 ms) counts through a stall of 5 ms, one with a login
// (bearing 2 ms) does not; Late drops them all.
func TestSamplerLateBy(t *testing.T) {
	const ms = int64(time.Millisecond)
	run := func(late func(p *Sampler) int) (dropped int, n int64) {
		var p Sampler
		p.Reset(1, 0)
		buy := p.AdmitBearing(0, time.Millisecond, 18*time.Millisecond)
		login := p.AdmitBearing(2*ms, time.Millisecond, 2*time.Millisecond)
		buy2 := p.AdmitBearing(2*ms, time.Millisecond, 18*time.Millisecond)
		dropped = late(&p)
		p.Done(buy, 150*time.Millisecond, true, false)
		p.Done(login, 10*time.Millisecond, true, false)
		p.Done(buy2, 150*time.Millisecond, true, false)
		p.Close(200*ms, time.Millisecond)
		return dropped, p.Ready.N
	}
	if d, n := run(func(p *Sampler) int { return p.LateBy(3*ms, 100*ms, 5*time.Millisecond) }); d != 1 || n != 1 {
		t.Errorf("a stall of 5 ms: %d windows dropped, %d samples counted; want the login's window dropped, the first buy's counted", d, n)
	}
	if d, n := run(func(p *Sampler) int { return p.LateBy(3*ms, 100*ms, 20*time.Millisecond) }); d != 2 || n != 0 {
		t.Errorf("a stall of 20 ms: %d windows dropped, %d samples counted; want both dropped", d, n)
	}
	if d, n := run(func(p *Sampler) int { return p.Late(3*ms, 100*ms) }); d != 2 || n != 0 {
		t.Errorf("Late: %d windows dropped, %d samples counted; want both dropped", d, n)
	}
}

// A class bears a stall of an eighth of its base; a class with no base
// yet, an eighth of the slowest class's.
func TestClassBasesBears(t *testing.T) {
	var b ClassBases
	if x := b.Bears(0); x != 0 {
		t.Errorf("no base: bears %v", x)
	}
	for range firstSamples {
		b.Expect(0, 8*time.Millisecond)
		b.Expect(1, 160*time.Millisecond)
	}
	if x := b.Bears(0); x != time.Millisecond {
		t.Errorf("base 8 ms: bears %v, want 1 ms", x)
	}
	if x := b.Bears(3); x != 20*time.Millisecond {
		t.Errorf("a new class beside one of 160 ms: bears %v, want 20 ms", x)
	}
}
