package engine

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/plugin/engine/flight"
)

const adaptiveDoc = `{"rules":[{"name":"a","algorithm":"adaptive_concurrency","key":["path"]}]}`

// round admits as many requests as e allows at now, answers them after
// latency with kind, and returns how many were admitted.
func adaptiveRound(e *Engine, now int64, latency time.Duration, kind SampleKind) int {
	var held [][]SlotRef
	for i := 0; i < 64; i++ {
		v := e.Decide(req("/buy", "POST", "10.0.0.1:1"), now)
		if v.Outcome != Allow {
			break
		}
		held = append(held, v.Slots)
	}
	end := now + int64(latency)
	for _, s := range held {
		e.Sample(s, now, end, kind)
		e.Release(s, end)
	}
	e.Learn(end + int64(LearnEvery))
	return len(held)
}

// Two workers share one Gauge: what one learns the other admits by, and
// failures answered fast, or streams that end early, teach nothing, while
// slow ones count as slow.
func TestAdaptiveSamplesAndSharing(t *testing.T) {
	store := newMemStore()
	cfg := mustConfig(t, adaptiveDoc)
	a, b := New(cfg, store, 1, wallClock), New(cfg, store, 1, wallClock)
	now := t0
	// Fast 503s and early ends before any learning: no sample at all.
	for i := 0; i < 20; i++ {
		now += int64(50 * time.Millisecond)
		if n := adaptiveRound(a, now, time.Millisecond, SampleFailure); n != 4 {
			t.Fatalf("cold rule admitted %d, want 4", n)
		}
		adaptiveRound(a, now, time.Millisecond, SampleEnded)
	}
	if g := a.LearntGauge(0); g.Base != 0 {
		t.Fatalf("fast failures taught a base latency: %+v", g)
	}
	// Upstream responses of 10 ms, saturated rounds: the limit grows, and
	// the other worker admits by it.
	for i := 0; i < 30; i++ {
		now += int64(50 * time.Millisecond)
		adaptiveRound(a, now, 10*time.Millisecond, SampleResponse)
	}
	g := a.LearntGauge(0)
	if g.Current() <= 8 || g.Base < 9*time.Millisecond || g.Base > 11*time.Millisecond {
		t.Fatalf("after fast responses: %+v", g)
	}
	now += int64(time.Second) // b refreshes its view on its tick
	b.Learn(now)
	if n := adaptiveRound(b, now, 10*time.Millisecond, SampleResponse); int64(n) < min(g.Current(), 64) {
		t.Errorf("the other worker admitted %d, the shared limit is %d", n, g.Current())
	}
	// Slow 504s (an upstream timing out) count: the limit comes down.
	before := a.LearntGauge(0).Current()
	for i := 0; i < 10; i++ {
		now += int64(time.Second)
		adaptiveRound(a, now, time.Second, SampleFailure)
	}
	if after := a.LearntGauge(0).Current(); after >= before {
		t.Errorf("slow failures left the limit at %d (was %d)", after, before)
	}
}

// A request refused for an adaptive rule marks its round saturated (the
// round used its limit), even when none of the round's samples was
// admitted at the limit; admissions under it do not.
func TestAdaptiveRefusalSaturatesTheRound(t *testing.T) {
	e := New(mustConfig(t, adaptiveDoc), newMemStore(), 1, wallClock)
	now := t0
	v := e.Decide(req("/buy", "POST", "10.0.0.1:1"), now)
	if v.Outcome != Allow || v.Slots[0].Saturated {
		t.Fatalf("first request: %+v", v)
	}
	l, ok := e.flight.View(0, v.Slots[0].FP)
	if !ok || l.Ready.Saturated {
		t.Fatalf("learner after one admission under the limit: %+v", l)
	}
	var held [][]SlotRef
	for {
		w := e.Decide(req("/buy", "POST", "10.0.0.1:1"), now)
		if w.Outcome != Allow {
			break
		}
		held = append(held, w.Slots)
	}
	if l = learnt(e, 0, v.Slots[0].FP); !l.Ready.Saturated {
		t.Fatalf("a refusal at the limit (%d held) left the round unsaturated", len(held)+1)
	}
	for _, s := range append(held, v.Slots) {
		e.Release(s, now)
	}
}

// The in-flight gauge of a worker follows its releases too: once the
// rule's requests are answered it reads 0, not the count of its last
// admission (an idle rule showing its last burst as in flight).
func TestInFlightGaugeFollowsReleases(t *testing.T) {
	e := New(mustConfig(t, adaptiveDoc), newMemStore(), 1, wallClock)
	var held [][]SlotRef
	for i := 0; i < 3; i++ {
		v := e.Decide(req("/buy", "POST", "10.0.0.1:1"), t0)
		if v.Outcome != Allow {
			t.Fatalf("request %d: %v", i, v.Outcome)
		}
		held = append(held, v.Slots)
	}
	if n, _ := e.LastSlots(0, t0); n != 3 {
		t.Fatalf("in flight after 3 admissions: %d", n)
	}
	for i, s := range held {
		e.Release(s, t0+int64(time.Millisecond))
		if n, _ := e.LastSlots(0, t0+int64(time.Millisecond)); n != int64(2-i) {
			t.Fatalf("in flight after %d releases: %d, want %d", i+1, n, 2-i)
		}
	}
}

// A worker whose event loop runs late reads every response late: that
// delay, sampled by how late its tick fires, is taken out of the latency
// the rule learns from, so an idle upstream behind a swamped Envoy is not
// taken for a slow one. Without the lag, the same samples teach Base 40 ms.
func TestAdaptiveTakesOutTheLoopLag(t *testing.T) {
	const period = 100 * time.Millisecond
	learn := func(late time.Duration) (time.Duration, time.Duration) {
		e := New(mustConfig(t, adaptiveDoc), newMemStore(), 1, wallClock)
		now := t0
		for i := 0; i < 20; i++ {
			now += int64(period + late)
			e.Ticked(now, period)
			now += int64(5 * time.Millisecond) // the tick's own work: not lag
			e.TickDone(now)
		}
		for i := 0; i < 30; i++ {
			now += int64(50 * time.Millisecond)
			adaptiveRound(e, now, 40*time.Millisecond, SampleResponse)
		}
		return e.LearntGauge(0).Base, e.LoopLag()
	}
	if base, lag := learn(0); lag != 0 || base < 38*time.Millisecond || base > 42*time.Millisecond {
		t.Errorf("ticks on time: loop lag %v, Base %v, want 0 and 40 ms", lag, base)
	}
	if base, lag := learn(30 * time.Millisecond); lag < 29*time.Millisecond || lag > 30*time.Millisecond || base < 9*time.Millisecond || base > 11*time.Millisecond {
		t.Errorf("ticks 30 ms late: loop lag %v, Base %v, want 30 ms and 10 ms (40 ms responses read 30 ms late)", lag, base)
	}
	// A lag longer than the latency leaves a quarter of it.
	if base, _ := learn(100 * time.Millisecond); base < 9*time.Millisecond || base > 11*time.Millisecond {
		t.Errorf("ticks 100 ms late: Base %v, want a quarter of the 40 ms latency", base)
	}
	// A stall that is over is not taken out: a tick on time after ticks
	// 30 ms late leaves the mean at 22 ms, but responses read on time then
	// teach the 40 ms they took.
	e := New(mustConfig(t, adaptiveDoc), newMemStore(), 1, wallClock)
	now := t0
	for i := 0; i < 20; i++ {
		now += int64(130 * time.Millisecond)
		e.Ticked(now, period)
		e.TickDone(now)
	}
	now += int64(period)
	e.Ticked(now, period)
	e.TickDone(now)
	if lag := e.LoopLag(); lag != 0 {
		t.Errorf("a tick on time after 20 ticks 30 ms late: loop lag taken out %v, want 0", lag)
	}
	for i := 0; i < 30; i++ {
		now += int64(50 * time.Millisecond)
		adaptiveRound(e, now, 40*time.Millisecond, SampleResponse)
	}
	if base := e.LearntGauge(0).Base; base < 38*time.Millisecond || base > 42*time.Millisecond {
		t.Errorf("after the ticks caught up: Base %v, want 40 ms", base)
	}
	// A stall (a paused process) counts as MaxLoopLag at most.
	e = New(mustConfig(t, adaptiveDoc), newMemStore(), 1, wallClock)
	e.Ticked(t0, period)
	e.TickDone(t0)
	e.Ticked(t0+int64(time.Hour), period)
	if lag := e.LoopLag(); lag > MaxLoopLag/4 {
		t.Errorf("one tick an hour late: loop lag %v", lag)
	}
}

// A worker whose loop stalls (not scheduled on a busy machine) reads the
// answers of the requests out late, all of them by the stall. The first
// answer it reads after it finds the tick overdue by more than an eighth
// of Base over the loop's usual lateness: the windows of the requests out
// count for nothing, and the rule neither learns the stall as the
// upstream's latency nor halves its limit for it. Without the drop (the
// mutation lateWindows returning at once), the round read 190 ms late
// halves the limit.
func TestAdaptiveDropsTheWindowsOfAStall(t *testing.T) {
	const period = 100 * time.Millisecond
	e := New(mustConfig(t, adaptiveDoc), newMemStore(), 1, wallClock)
	now := t0
	e.Ticked(now, period)
	e.TickDone(now)
	nextTick := now + int64(period)
	tick := func(until int64) { // the ticks due by until, each at its time, or at until if overdue
		for nextTick <= until {
			at := nextTick
			e.Ticked(at, period)
			e.TickDone(at)
			e.Learn(at)
			nextTick = at + int64(period)
		}
	}
	run := func(rounds int, stallAt int) {
		for i := 0; i < rounds; i++ {
			now += int64(10 * time.Millisecond)
			tick(now)
			read := now + int64(40*time.Millisecond)
			var held [][]SlotRef
			for j := 0; j < 64; j++ {
				v := e.Decide(req("/buy", "POST", "10.0.0.1:1"), now)
				if v.Outcome != Allow {
					break
				}
				held = append(held, v.Slots)
			}
			if i == stallAt {
				read += int64(150 * time.Millisecond) // the loop stalls from now+10ms
				tick(now + int64(10*time.Millisecond))
			} else {
				tick(read - 1)
			}
			for _, s := range held {
				e.Sample(s, now, read, SampleResponse)
				e.Release(s, read)
			}
			now = read
			if nextTick <= now { // overdue: it fires after the answers
				e.Ticked(now, period)
				e.TickDone(now)
				e.Learn(now)
				nextTick = now + int64(period)
			}
		}
	}
	run(40, -1)
	before := e.LearntGauge(0)
	if before.Base < 38*time.Millisecond || before.Base > 42*time.Millisecond || before.Current() < 16 {
		t.Fatalf("before the stall: %+v, want Base 40 ms and a limit grown past 16", before)
	}
	run(3, 0)
	after := e.LearntGauge(0)
	if e.Stats.LateWindows == 0 {
		t.Errorf("no window dropped after a stall of 150 ms")
	}
	if after.Current()*4 < before.Current()*3 || after.Base > 42*time.Millisecond {
		t.Errorf("after a stall of 150 ms: %+v, before it %+v: want the limit and Base kept", after, before)
	}
}

// A request whose stream ends without a sample (another filter answered
// it, or it never reached the upstream) is done for its Sampler window at
// its release: the window's other samples still count. A request sampled
// is not counted twice at its release.
func TestAdaptiveReleaseCompletesTheWindow(t *testing.T) {
	e := New(mustConfig(t, adaptiveDoc), newMemStore(), 1, wallClock)
	now := t0
	var held [][]SlotRef
	for range 4 {
		v := e.Decide(req("/buy", "POST", "10.0.0.1:1"), now)
		if v.Outcome != Allow || v.Slots[0].Ticket == 0 {
			t.Fatalf("admission: %+v", v)
		}
		held = append(held, v.Slots)
	}
	fp := held[0][0].FP
	end := now + int64(20*time.Millisecond)
	for _, s := range held[:3] {
		e.Sample(s, now, end, SampleResponse)
		if s[0].Ticket != 0 {
			t.Fatal("Sample did not use up the slot's ticket")
		}
		e.Release(s, end)
	}
	e.flight.CloseWindow(0, fp, end, time.Millisecond)
	e.Learn(end + int64(LearnEvery))
	if l := learnt(e, 0, fp); l.Ready.N != 0 || e.LearntGauge(0).N != 0 {
		t.Fatalf("a window with a request out counted: %+v, %+v", l.Ready, e.LearntGauge(0))
	}
	e.Release(held[3], end) // no sample: answered by another filter
	e.Learn(end + 2*int64(LearnEvery))
	if g := e.LearntGauge(0); g.N != 3 || g.Mean != 20*time.Millisecond {
		t.Fatalf("the complete window gave the Gauge %+v, want its 3 samples of 20ms", g)
	}
}

// A request that takes an adaptive slot and is then held by a rate rule
// (or waits in a later rule's queue, or for a global rule's call) has not
// reached the upstream: it gives no sample. Its window would otherwise
// wait for it, and count it at its age (three times Base or more) once
// it gave up on it; and its client leaving before the hold ends would
// void the window of the requests answered beside it.
func TestAdaptiveHeldRequestGivesNoSample(t *testing.T) {
	doc := `{"rules":[
	  {"name":"pace","match":{"path_prefix":"/slow"},"key":["client_ip"],"limit":1,"window":"1s","burst":1,"max_delay":"10s"},
	  {"name":"a","algorithm":"adaptive_concurrency","key":["method"]}]}`
	e := New(mustConfig(t, doc), newMemStore(), 1, wallClock)
	now := t0
	for range 30 { // Base 10 ms
		now += int64(50 * time.Millisecond)
		adaptiveRound(e, now, 10*time.Millisecond, SampleResponse)
	}
	now += int64(time.Second)
	e.Learn(now)
	first := e.Decide(req("/slow", "POST", "10.0.0.9:1"), now)
	held := e.Decide(req("/slow", "POST", "10.0.0.9:1"), now) // held about 1 s
	if first.Outcome != Allow || first.Slots[0].Ticket == 0 || held.Outcome != Delay || held.Slots[0].Ticket != 0 {
		t.Fatalf("first %v %+v, held %v %+v: want a ticket for the one forwarded only", first.Outcome, first.Slots, held.Outcome, held.Slots)
	}
	fp := first.Slots[0].FP
	end := now + int64(10*time.Millisecond)
	e.Sample(first.Slots, now, end, SampleResponse)
	e.Release(first.Slots, end)
	// The held client leaves before its hold ends (sent is in the future).
	e.Sample(held.Slots, now+int64(held.Delay), end+int64(time.Millisecond), SampleEnded)
	e.Release(held.Slots, end+int64(time.Millisecond))
	for tick := end; tick <= end+int64(100*time.Millisecond); tick += int64(10 * time.Millisecond) {
		e.Learn(tick)
	}
	if l := learnt(e, 1, fp); l.Ready.N != 0 || e.LearntGauge(1).Mean > 12*time.Millisecond {
		t.Fatalf("ready %+v, gauge %+v: want the 10ms sample added, none of the held request", l.Ready, e.LearntGauge(1))
	}
}

// learnt returns this worker's view of the Gauge of rule i for key fp (the
// zero view when it has none).
func learnt(e *Engine, i int, fp uint64) flight.LearnerView {
	l, _ := e.flight.View(i, fp)
	return l
}
