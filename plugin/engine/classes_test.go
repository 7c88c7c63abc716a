package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/plugin/engine/flight"
	"github.com/sluicehq/sluice/shared/limit"
)

const classDoc = `{"rules":[{"name":"store","algorithm":"concurrency","limit":4,"key":[]%s,
 "classes":[{"name":"login","match":{"path_prefix":"/login"},"reserve":0.25},{"name":"home","match":{"path_exact":"/"},"reserve":0.25}]}]}`

func classEngines(t *testing.T, extra string, n int) []*Engine {
	t.Helper()
	cfg := mustConfig(t, strings.Replace(classDoc, "%s", extra, 1))
	store := newMemStore()
	var es []*Engine
	for i := 0; i < n; i++ {
		es = append(es, New(cfg, store, 5, wallClock))
	}
	return es
}

// TestClassCaps: limit 4, login reserve 0.25 and home 0.25 above the
// default class: the default class holds at most 2 (floor(4 x 0.5)), home
// and default together 3, and login may use the last slot; across workers,
// from any client.
func TestClassCaps(t *testing.T) {
	es := classEngines(t, "", 2)
	var held []Verdict
	try := func(i int, path string) bool {
		v := es[i%2].Decide(req(path, "GET", "10.0.0."+string(rune('1'+i%9))+":1"), t0)
		if v.Outcome == Allow {
			held = append(held, v)
		}
		return v.Outcome == Allow
	}
	for i := 0; i < 2; i++ {
		if !try(i, "/buy") {
			t.Fatalf("buy %d refused under the default class's cap 2", i)
		}
	}
	if try(2, "/buy") {
		t.Fatal("a third buy admitted: the default class's cap is 2")
	}
	if !try(3, "/") {
		t.Fatal("home refused: home and default together may hold 3")
	}
	if try(4, "/") {
		t.Fatal("a second home admitted: home and default together hold at most 3")
	}
	if !try(5, "/login") {
		t.Fatal("login refused: the highest class may use the whole limit")
	}
	if try(6, "/login") {
		t.Fatal("a fifth request admitted over the limit 4")
	}
	v := es[0].Decide(req("/buy", "GET", "10.0.0.1:1"), t0)
	if v.Outcome != Reject || v.Class != "default" || es[0].ClassRefused(0, 2) == 0 {
		t.Fatalf("refused buy: %+v, refused %d", v, es[0].ClassRefused(0, 2))
	}
	if held[0].Class != "default" || held[2].Class != "home" || held[3].Class != "login" {
		t.Errorf("classes: %q %q %q", held[0].Class, held[2].Class, held[3].Class)
	}
	// A buy's slot freed: a buy may take it again, a login still has its.
	es[1].Release(held[0].Slots, t0+1)
	if !try(7, "/buy") {
		t.Fatal("a freed buy slot not given to a buy")
	}
	if try(8, "/buy") {
		t.Fatal("a buy over the cap after a release")
	}
}

// TestClassQueuePriority: with max_delay, a freed slot goes to the highest
// class waiting, on any worker, though a lower class waited longer; within
// a class, arrival order.
func TestClassQueuePriority(t *testing.T) {
	es := classEngines(t, `,"max_delay":"5s"`, 2)
	now := t0 + int64(time.Second)
	sr := func(id uint32, path string) streamReq {
		return streamReq{req(path, "GET", "10.0.0.9:1"), id}
	}
	var held []Verdict
	for i, p := range []string{"/buy", "/buy", "/", "/login"} {
		v := es[i%2].Decide(sr(uint32(100+i), p), now)
		if v.Outcome != Allow {
			t.Fatalf("request %d (%s): %v", i, p, v.Outcome)
		}
		held = append(held, v)
	}
	// Waiting, in arrival order: a buy and a home on worker 0, two logins
	// on worker 1.
	if es[0].Decide(sr(1, "/buy"), now).Outcome != Queue || es[0].Decide(sr(2, "/"), now+1).Outcome != Queue ||
		es[1].Decide(sr(3, "/login"), now+2).Outcome != Queue || es[1].Decide(sr(4, "/login"), now+3).Outcome != Queue {
		t.Fatal("requests over the limit do not queue")
	}
	order := []uint32{}
	poll := func(at int64) {
		for _, e := range es {
			for _, ev := range e.Poll(at, nil) {
				if ev.Verdict.Outcome != Allow {
					t.Fatalf("waiter %d: %v", ev.ID, ev.Verdict.Outcome)
				}
				order = append(order, ev.ID)
				held = append(held, ev.Verdict)
			}
		}
	}
	// Free the slots one by one (a buy's first: the logins take it).
	for k, at := 0, now+int64(time.Millisecond); k < 4; k, at = k+1, at+int64(time.Millisecond) {
		es[k%2].Release(held[k].Slots, at)
		poll(at)
		poll(at + 1)
	}
	want := []uint32{3, 4, 2, 1}
	if len(order) != 4 || order[0] != 3 || order[1] != 4 || order[2] != 2 || order[3] != 1 {
		t.Fatalf("admitted from the queues in order %v, want %v (logins, home, buy)", order, want)
	}
}

// TestClassSlotsLeaseDrop: the slots of a worker that vanishes are dropped
// within 2 epochs in every class; a live worker's are renewed.
func TestClassSlotsLeaseDrop(t *testing.T) {
	es := classEngines(t, "", 3)
	for _, p := range []string{"/buy", "/buy", "/", "/login"} {
		if es[0].Decide(req(p, "GET", "10.0.0.1:1"), t0).Outcome != Allow {
			t.Fatal(p)
		}
	}
	if es[1].Decide(req("/login", "GET", "10.0.0.2:1"), t0).Outcome == Allow {
		t.Fatal("over the limit")
	}
	// Worker 0 vanishes (no tick, no release). Worker 1 keeps ticking.
	at := t0
	for k := 0; k < 25; k++ {
		at += int64(100 * time.Millisecond)
		es[1].Poll(at, nil)
	}
	var got []Verdict
	for _, p := range []string{"/buy", "/buy", "/", "/login"} {
		v := es[1].Decide(req(p, "GET", "10.0.0.2:1"), at)
		if v.Outcome != Allow {
			t.Fatalf("%s after a vanished worker's 2.5 s: %v", p, v.Outcome)
		}
		got = append(got, v)
	}
	// Worker 1 lives on: its slots are renewed, nothing is over the caps.
	for k := 0; k < 30; k++ {
		at += int64(100 * time.Millisecond)
		es[1].Poll(at, nil)
	}
	// (Worker 0 stays away: a worker that comes back re-registers what it
	// holds.) A third worker sees the live worker's slots.
	if es[2].Decide(req("/login", "GET", "10.0.0.1:1"), at).Outcome == Allow {
		t.Fatal("a live worker's slots lapsed")
	}
	for i := 0; i < 4; i++ {
		if in, _, _ := es[1].ClassSlots(0, []int{2, 2, 1, 0}[i]); in == 0 {
			t.Errorf("class of request %d shows nothing in flight", i)
		}
	}
	es[1].Release(got[3].Slots, at)
	if es[2].Decide(req("/login", "GET", "10.0.0.1:1"), at).Outcome != Allow {
		t.Fatal("a released login slot not free")
	}
}

// An adaptive rule with classes: an admission that fills its class's cap
// under the learnt limit marks the round saturated (the reserves, not the
// demand, held the class back: the Gauge may take the round's share of
// the limit in flight for the capacity estimate); admissions under the cap
// do not (little demand says nothing of the capacity).
func TestAdaptiveClassCapSaturatesTheRound(t *testing.T) {
	doc := strings.Replace(strings.Replace(classDoc, `"concurrency","limit":4`, `"adaptive_concurrency"`, 1), "%s", "", 1)
	e := New(mustConfig(t, doc), newMemStore(), 1, wallClock)
	// Cold: limit 4, the default class's cap 2.
	v := e.Decide(req("/buy", "POST", "10.0.0.1:1"), t0)
	if v.Outcome != Allow {
		t.Fatalf("first buy: %+v", v)
	}
	l, ok := e.flight.View(0, v.Slots[0].FP)
	if !ok || l.Gauge.Current() != 4 || l.Ready.Saturated || l.UseN != 1 {
		t.Fatalf("learner after one buy under the cap: %+v", l)
	}
	if w := e.Decide(req("/buy", "POST", "10.0.0.2:1"), t0); w.Outcome != Allow || w.Slots[0].Saturated {
		t.Fatalf("second buy: %+v", w)
	}
	if !learnt(e, 0, v.Slots[0].FP).Ready.Saturated {
		t.Error("a buy that filled the default class's cap (2 of 4) left the round unsaturated")
	}
}

// An adaptive rule with classes on a worker whose loop runs late: a class
// whose no-queue latency is under LagTimes x the loop's lag gives no
// sample (a 5 ms login read 20 ms late is the lag's noise; in `make
// demo`'s launch, rounds of such logins read 2-5x their base and halved
// the limit), while a slower class, or a new one, still does. Without
// the lag the login counts.
func TestAdaptiveClassUntimedUnderLoopLag(t *testing.T) {
	doc := strings.Replace(strings.Replace(classDoc, `"concurrency","limit":4`, `"adaptive_concurrency"`, 1), "%s", "", 1)
	const period = 20 * time.Millisecond
	// counted reports whether one request of path, answered after lat
	// and read late later, reached the learner's batch, after 16 logins of
	// 5 ms answered with the loop on time, then 20 ticks late late.
	counted := func(late time.Duration, path string, lat time.Duration) bool {
		e := New(mustConfig(t, doc), newMemStore(), 1, wallClock)
		now := t0
		done, lag := now, time.Duration(0) // the last tick's end, the ticks' lateness
		tick := func(until int64) {
			for done+int64(period+lag) <= until {
				done += int64(period + lag)
				e.Ticked(done, period)
				e.TickDone(done)
			}
		}
		// one answers a request of path after lat and reports whether
		// its sample reached the Gauge or the batch (the samples before
		// it added at once).
		one := func(path string, lat time.Duration) bool {
			var before, after flight.LearnerView
			before, after, _, now = answerOne(t, e, path, now, lat, tick)
			return after.Gauge.Round != before.Gauge.Round || after.Gauge.N+after.Ready.N > before.Gauge.N+before.Ready.N
		}
		e.Ticked(now, period)
		e.TickDone(now)
		for range 16 {
			if !one("/login", 5*time.Millisecond) {
				t.Fatal("a login of 5 ms on time: not counted")
			}
		}
		tick(now)
		lag = late
		tick(now + 20*int64(period+late))
		now = done + int64(time.Millisecond)
		return one(path, lat+late)
	}
	if !counted(0, "/login", 5*time.Millisecond) {
		t.Error("a login of 5 ms, the loop on time: not counted")
	}
	if counted(20*time.Millisecond, "/login", 5*time.Millisecond) {
		t.Error("a login of 5 ms read 20 ms late (the loop's usual lag): counted")
	}
	if !counted(20*time.Millisecond, "/buy", 150*time.Millisecond) {
		t.Error("a buy (a new class) read 20 ms late: not counted")
	}
}

// An adaptive rule with classes: a stall of the worker's loop drops the
// sample windows of the requests out during it only if it is longer than
// they bear, an eighth of their class's base (limit.Sampler.AdmitBearing):
// a buy of 150 ms out during a stall of 5 ms still counts, a login of 5
// ms does not. Dropping every window with a request out (as for a rule
// without classes) dropped nearly every buy while Envoy ran late in
// `make demo`'s launch, and no round ended.
func TestAdaptiveClassWindowsBearStalls(t *testing.T) {
	doc := strings.Replace(strings.Replace(classDoc, `"concurrency","limit":4`, `"adaptive_concurrency"`, 1), "%s", "", 1)
	const period = 20 * time.Millisecond
	e := New(mustConfig(t, doc), newMemStore(), 1, wallClock)
	now, done := t0, t0
	e.Ticked(done, period)
	e.TickDone(done)
	// tick runs the ticks due until until, the first one late by late.
	tick := func(until int64, late time.Duration) {
		for done+int64(period+late) <= until {
			done += int64(period + late)
			late = 0
			e.Ticked(done, period)
			e.TickDone(done)
		}
	}
	// one answers a request of path after lat, a tick late by stall
	// while it is out, and reports whether its window was dropped.
	one := func(path string, lat, stall time.Duration) bool {
		dropped := e.Stats.LateWindows
		e.Learn(now)
		v := e.Decide(req(path, "POST", "10.0.0.1:1"), now)
		if v.Outcome != Allow {
			t.Fatalf("%s: %v", path, v.Outcome)
		}
		tick(now+int64(lat), stall)
		e.Sample(v.Slots, now, now+int64(lat), SampleResponse)
		e.Release(v.Slots, now+int64(lat))
		now += int64(lat)
		now += int64(50 * time.Millisecond) // the window closes, its samples are added
		tick(now, 0)
		e.Learn(now)
		now = done + int64(time.Millisecond)
		return e.Stats.LateWindows > dropped
	}
	for range 16 {
		if one("/buy", 150*time.Millisecond, 0) {
			t.Fatal("a buy on time: its window dropped")
		}
	}
	for range 16 {
		if one("/login", 5*time.Millisecond, 0) {
			t.Fatal("a login on time: its window dropped")
		}
	}
	if one("/buy", 150*time.Millisecond, 5*time.Millisecond) {
		t.Error("a buy of 150 ms out during a stall of 5 ms: its window dropped")
	}
	if !one("/login", 30*time.Millisecond, 5*time.Millisecond) {
		t.Error("a login of 5 ms out during a stall of 5 ms: its window counted")
	}
}

// An adaptive rule with classes: a sample of a fast class (its base at
// most an eighth of the slowest class's, limit.ClassBases.Fast) reaches
// the Gauge's batch as the fast classes' word on the upstream's queue
// (limit.Samples.Fast, and Queued when it waited), a buy's does not; before the buys' base is known, the logins are no fast class.
func TestAdaptiveFastClassSamples(t *testing.T) {
	doc := strings.Replace(strings.Replace(classDoc, `"concurrency","limit":4`, `"adaptive_concurrency"`, 1), "%s", "", 1)
	e := New(mustConfig(t, doc), newMemStore(), 1, wallClock)
	now := t0
	// one answers a request of path after lat and returns the fast and
	// queued samples it added to the batch.
	one := func(path string, lat time.Duration) (fast, queued int64) {
		var before, after flight.LearnerView
		before, after, _, now = answerOne(t, e, path, now, lat, nil)
		if after.Gauge.Round != before.Gauge.Round {
			t.Fatalf("%s: the round ended on this sample", path)
		}
		return after.Ready.Fast - before.Ready.Fast, after.Ready.Queued - before.Ready.Queued
	}
	for range 16 {
		one("/login", 5*time.Millisecond)
	}
	if f, _ := one("/login", 5*time.Millisecond); f != 0 {
		t.Errorf("a login with no slower class known: %d fast samples, want none", f)
	}
	for range 16 {
		one("/buy", 150*time.Millisecond)
	}
	if f, q := one("/login", 5*time.Millisecond); f != 1 || q != 0 {
		t.Errorf("a login of 5 ms (base 5 ms, buys 150 ms): fast %d queued %d, want 1, 0", f, q)
	}
	// The rule is in slow start: the word comes at once (it may reach
	// the Gauge with this sample), a wait at limit.CrossRise times the
	// base (see limit.Gauge.WordAtOnce).
	word := func(lat time.Duration) int64 {
		_, after, _, next := answerOne(t, e, "/login", now, lat, nil)
		now = next
		g := after.Gauge
		if b := after.Ready; b.Fast > 0 {
			g.Fast = min(max(g.Fast, limit.FastCalm)+b.Queued, limit.FastQueue)
		}
		return g.Fast
	}
	if f := word(12 * time.Millisecond); f != limit.FastCalm {
		t.Errorf("a login of 12 ms (base 5 ms) in slow start: the round's word %d, want %d (calm)", f, limit.FastCalm)
	}
	if f := word(25 * time.Millisecond); f != limit.FastOnce {
		t.Errorf("a login of 25 ms (base 5 ms) in slow start: the round's word %d, want %d (one waited)", f, limit.FastOnce)
	}
	if f, _ := one("/buy", 150*time.Millisecond); f != 0 {
		t.Errorf("a buy: %d fast samples, want none", f)
	}
}

// answerOne decides a request of path at now on rule 0 of e, answers it
// after lat (wait, if not nil, runs first with the answer's time: ticks up
// to it) and returns its learner's view before and after the sample, the
// learner's key and the time LearnEvery after the answer.
func answerOne(t *testing.T, e *Engine, path string, now int64, lat time.Duration, wait func(int64)) (before, after flight.LearnerView, fp uint64, next int64) {
	t.Helper()
	e.Learn(now)
	v := e.Decide(req(path, "POST", "10.0.0.1:1"), now)
	if v.Outcome != Allow {
		t.Fatalf("%s: %v", path, v.Outcome)
	}
	fp = v.Slots[0].FP
	before = learnt(e, 0, fp)
	if wait != nil {
		wait(now + int64(lat))
	}
	e.Sample(v.Slots, now, now+int64(lat), SampleResponse)
	e.Release(v.Slots, now+int64(lat))
	now += int64(lat)
	e.flight.CloseWindow(0, fp, now, 0)
	return before, learnt(e, 0, fp), fp, now + int64(LearnEvery)
}
