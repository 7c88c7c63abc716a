package wasmtest

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

// The life cycle of concurrency slots and queue tickets
// (acquire, Poll, resume, Abandon, Release), alone and mixed with rate
// rules that throttle.

// openH is open with extra request headers.
func openH(t *testing.T, vm *wasmhost.VM, path, client string, headers ...[2]string) *wasmhost.Stream {
	t.Helper()
	s, err := vm.NewStream(wasmhost.Properties{"source.address": client})
	if err != nil {
		t.Fatal(err)
	}
	r := wasmhost.HTTPRequest("POST", "shop.example", path, headers...)
	if _, err := s.SendRequestHeaders(r.Headers, true); err != nil {
		t.Fatal(err)
	}
	return s
}

// idle checks the process-wide gauges once every request ended (after a
// flush).
func idle(t *testing.T, h *wasmhost.Host) {
	t.Helper()
	h.AdvanceClock(1100 * time.Millisecond)
	for _, g := range []string{"sluice.concurrency.waiting", "sluice.concurrency.slots_held", "sluice.held_requests"} {
		if v := h.Metrics().Gauge(g); v != 0 {
			t.Errorf("%s %d after every request ended, want 0", g, v)
		}
	}
}

func wantState(t *testing.T, what string, s *wasmhost.Stream, want wasmhost.StreamState) {
	t.Helper()
	if got := state(s); got != want {
		t.Fatalf("%s: %v, want %v", what, got, want)
	}
}

// TestQueueNotOvertakenAfterLongHold: a request that waited
// more than a second in the queue (the slot holder is slow, which is what
// concurrency limits are for) still goes before a newcomer that arrives
// when the slot frees: a queue whose Head could not move (no slot free) is
// not a vanished worker's, whose tickets are skipped after limit.Stall.
func TestQueueNotOvertakenAfterLongHold(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, `{"rules":[{"name":"store","algorithm":"concurrency","limit":1,"key":["path"],"max_delay":"5s"}]}`)
	a := open(t, vms[0], "/buy", "10.0.0.1:1")
	w := open(t, vms[1], "/buy", "10.0.0.2:1")
	wantState(t, "holder", a, wasmhost.StreamUpstream)
	wantState(t, "waiter", w, wasmhost.StreamPaused)
	h.AdvanceClock(1500 * time.Millisecond)
	wantState(t, "waiter after 1.5s", w, wasmhost.StreamPaused)
	// The slot frees on vms[0] (no waiter there: no hand-off) and a
	// newcomer arrives on vms[0] before vms[1]'s next tick.
	respond(t, a)
	n := open(t, vms[0], "/buy", "10.0.0.3:1")
	if state(n) == wasmhost.StreamUpstream {
		t.Errorf("a newcomer took the freed slot ahead of a request waiting for 1.5s (FIFO broken)")
	}
	h.AdvanceClock(20 * time.Millisecond)
	if state(w) != wasmhost.StreamUpstream {
		t.Errorf("the waiter after the slot freed: %v, want upstream", state(w))
	}
	for _, s := range []*wasmhost.Stream{w, n} {
		if state(s) == wasmhost.StreamUpstream {
			respond(t, s)
		}
	}
	h.AdvanceClock(20 * time.Millisecond)
	for _, s := range []*wasmhost.Stream{w, n} {
		if state(s) == wasmhost.StreamUpstream {
			respond(t, s)
		}
	}
	idle(t, h)
	healthy(t, vms...)
}

// TestQueueRefundsWholeCost: a request charged a cost of 8 by a rate
// rule, then not served by a concurrency rule (answered 429 at the end of
// its wait, or its client gone), gets its 8 units back ("a request
// rejected by a concurrency rule is refunded by the rate rules"; cost.md:
// "A request refused by another rule gets its cost back"), not one.
func TestQueueRefundsWholeCost(t *testing.T) {
	for _, c := range []struct {
		name string
		end  func(t *testing.T, h *wasmhost.Host, waiter *wasmhost.Stream)
	}{
		{"timed out", func(t *testing.T, h *wasmhost.Host, waiter *wasmhost.Stream) {
			h.AdvanceClock(2100 * time.Millisecond)
			if r := waiter.Result(); r.Status != 429 {
				t.Fatalf("waiter past max_delay: %v %d, want 429", state(waiter), r.Status)
			}
		}},
		{"abandoned", func(t *testing.T, h *wasmhost.Host, waiter *wasmhost.Stream) {
			if err := waiter.Close(); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHost(t)
			vms := workers(t, h, 1, `{"rules":[
				{"name":"budget","limit":10,"window":"1h","key":["path"],"cost":{"request_header":"x-cost"}},
				{"name":"store","algorithm":"concurrency","limit":1,"key":["path"],"max_delay":"2s"}]}`)
			a := openH(t, vms[0], "/buy", "10.0.0.1:1", [2]string{"x-cost", "1"})
			b := openH(t, vms[0], "/buy", "10.0.0.2:1", [2]string{"x-cost", "8"})
			wantState(t, "holder", a, wasmhost.StreamUpstream)
			wantState(t, "waiter", b, wasmhost.StreamPaused)
			c.end(t, h, b)
			respond(t, a)
			// 10 - 1 (a) = 9 units left if b got its 8 back; 1 if it got 1.
			n := openH(t, vms[0], "/buy", "10.0.0.3:1", [2]string{"x-cost", "8"})
			if state(n) != wasmhost.StreamUpstream {
				r := n.Result()
				t.Errorf("a request costing 8 with 9 units left: %v %d, want upstream (the waiter's cost not refunded)", state(n), r.Status)
			} else {
				respond(t, n)
			}
			idle(t, h)
			healthy(t, vms...)
		})
	}
}

// TestQueueRateCountersForQueuedRequests: a request admitted by a
// rate rule that then waited for a concurrency slot and went upstream is
// counted by the rate rule as allowed, as one that did not wait.
func TestQueueRateCountersForQueuedRequests(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 1, `{"rules":[
		{"name":"rate","limit":100,"window":"1s","key":["path"]},
		{"name":"store","algorithm":"concurrency","limit":1,"key":["path"],"max_delay":"2s"}]}`)
	a := open(t, vms[0], "/buy", "10.0.0.1:1")
	b := open(t, vms[0], "/buy", "10.0.0.2:1")
	wantState(t, "waiter", b, wasmhost.StreamPaused)
	h.AdvanceClock(10 * time.Millisecond)
	respond(t, a)
	h.AdvanceClock(10 * time.Millisecond)
	wantState(t, "waiter after the slot freed", b, wasmhost.StreamUpstream)
	respond(t, b)
	idle(t, h)
	m := h.Metrics()
	if got := m.Counter("sluice.rule.rate.allowed"); got != 2 {
		t.Errorf("rate.allowed %d, want 2 (both requests passed the rate rule)", got)
	}
	if got := m.Counter("sluice.rule.store.allowed") + m.Counter("sluice.rule.store.delayed"); got != 2 {
		t.Errorf("store allowed+delayed %d, want 2", got)
	}
	healthy(t, vms...)
}

// stacked is two concurrency rules that a /buy request passes in turn:
// "buy" (key path) then "shop" (key method, every request).
const stacked = `{"rules":[
	{"name":"buy","match":{"path_prefix":"/buy"},"algorithm":"concurrency","limit":1,"key":["path"],"max_delay":"2s"},
	{"name":"shop","algorithm":"concurrency","limit":1,"key":["method"],"max_delay":"2s"}]}`

// secondQueue leaves a /buy request on vms[0] holding buy's slot and
// waiting in shop's queue behind other (a /home request on vms[1] holding
// shop's slot).
func secondQueue(t *testing.T, h *wasmhost.Host, vms []*wasmhost.VM) (second, other *wasmhost.Stream) {
	t.Helper()
	first := open(t, vms[0], "/buy", "10.0.0.1:1")
	second = open(t, vms[0], "/buy", "10.0.0.2:1")
	wantState(t, "first", first, wasmhost.StreamUpstream)
	wantState(t, "second", second, wasmhost.StreamPaused)
	respond(t, first) // second gets buy's slot at the next tick
	other = open(t, vms[1], "/home", "10.0.0.3:1")
	h.AdvanceClock(20 * time.Millisecond)
	wantState(t, "other", other, wasmhost.StreamUpstream)
	wantState(t, "second waiting for shop", second, wasmhost.StreamPaused)
	return second, other
}

// TestQueueStackedLeaveOnSecondQueue: a client that goes away
// while waiting in the second rule's queue gives back the first rule's
// slot and its ticket; gauges and counters are exact.
func TestQueueStackedLeaveOnSecondQueue(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, stacked)
	second, other := secondQueue(t, h, vms)
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	respond(t, other)
	// Both rules' slots and queues are free: two requests in a row on the
	// other worker, the first admitted at once, the second queued.
	n := open(t, vms[1], "/buy", "10.0.0.4:1")
	wantState(t, "a /buy after the waiter left", n, wasmhost.StreamUpstream)
	m := open(t, vms[1], "/buy", "10.0.0.5:1")
	wantState(t, "a second /buy", m, wasmhost.StreamPaused)
	respond(t, n)
	h.AdvanceClock(10 * time.Millisecond)
	wantState(t, "the queued /buy", m, wasmhost.StreamUpstream)
	respond(t, m)
	idle(t, h)
	if got := h.Metrics().Counter("sluice.rule.shop.rejected"); got != 0 {
		t.Errorf("shop.rejected %d, want 0 (nobody was answered 429)", got)
	}
	healthy(t, vms...)
}

// TestQueueStackedTimeoutOnSecondQueue: a waiter whose deadline
// passes in the second queue is answered 429 in the second rule's name
// (Retry-After, RateLimit headers) and gives back the first slot.
func TestQueueStackedTimeoutOnSecondQueue(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, stacked)
	second, other := secondQueue(t, h, vms)
	h.AdvanceClock(2100 * time.Millisecond)
	r := second.Result()
	if r.Status != 429 || r.Headers.Value("retry-after") == "" || r.Headers.Value("x-ratelimit-limit") != "1" ||
		r.Headers.Value("ratelimit-policy") != `"shop";q=1;qu="concurrent-requests"` {
		t.Fatalf("waiter past max_delay in shop's queue: %v %d %v", state(second), r.Status, r.Headers)
	}
	// buy's slot is free again (the waiter gave it back): a /buy gets it
	// and then waits for shop's.
	n := open(t, vms[1], "/buy", "10.0.0.4:1")
	wantState(t, "a /buy with shop's slot held", n, wasmhost.StreamPaused)
	respond(t, other)
	h.AdvanceClock(10 * time.Millisecond)
	wantState(t, "the /buy after shop's slot freed", n, wasmhost.StreamUpstream)
	respond(t, n)
	idle(t, h)
	if got := h.Metrics().Counter("sluice.rule.shop.rejected"); got != 1 {
		t.Errorf("shop.rejected %d, want 1", got)
	}
	healthy(t, vms...)
}

// TestQueueRateDelayThenSecondQueue: a request that a rate rule
// delays 1 s, and that waits for two concurrency rules' slots in turn
// meanwhile, is released when its rate delay is over (1 s after arrival):
// the time it waited in the first queue counts too (it is held for the
// rate delay less all its waits).
func TestQueueRateDelayThenSecondQueue(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, `{"rules":[
		{"name":"pace","match":{"path_prefix":"/buy"},"limit":1,"window":"1s","burst":1,"key":["path"],"max_delay":"2s"},
		{"name":"buy","match":{"path_prefix":"/buy"},"algorithm":"concurrency","limit":1,"key":["path"],"max_delay":"5s"},
		{"name":"shop","algorithm":"concurrency","limit":1,"key":["method"],"max_delay":"5s"}]}`)
	a := open(t, vms[0], "/buy", "10.0.0.1:1")
	b := open(t, vms[1], "/buy", "10.0.0.2:1") // pace: 1s; buy: queued
	wantState(t, "a", a, wasmhost.StreamUpstream)
	wantState(t, "b", b, wasmhost.StreamPaused)
	h.AdvanceClock(400 * time.Millisecond)
	respond(t, a)
	o := open(t, vms[0], "/home", "10.0.0.3:1") // takes shop's slot first
	wantState(t, "o", o, wasmhost.StreamUpstream)
	h.AdvanceClock(10 * time.Millisecond) // b gets buy's slot, waits for shop's
	wantState(t, "b in shop's queue", b, wasmhost.StreamPaused)
	h.AdvanceClock(90 * time.Millisecond)
	respond(t, o)
	h.AdvanceClock(10 * time.Millisecond) // b gets shop's slot at 0.51s: 0.49s of pace's delay left
	wantState(t, "b held for pace", b, wasmhost.StreamPaused)
	h.AdvanceClock(540 * time.Millisecond) // 1.05s after arrival
	if state(b) != wasmhost.StreamUpstream {
		t.Errorf("b 1.05s after arrival (rate delay 1s, both slots since 0.51s): %v, want upstream", state(b))
	}
	h.AdvanceClock(500 * time.Millisecond)
	wantState(t, "b 1.55s after arrival", b, wasmhost.StreamUpstream)
	respond(t, b)
	idle(t, h)
	healthy(t, vms...)
}

// TestQueueRateDelayThenQueue: the same with one concurrency
// rule: released 1 s after arrival; a client that goes away while held for
// the rate after its wait gives its slot back.
func TestQueueRateDelayThenQueue(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, `{"rules":[
		{"name":"pace","limit":1,"window":"1s","burst":1,"key":["path"],"max_delay":"3s"},
		{"name":"store","algorithm":"concurrency","limit":1,"key":["path"],"max_delay":"5s"}]}`)
	a := open(t, vms[0], "/buy", "10.0.0.1:1")
	b := open(t, vms[1], "/buy", "10.0.0.2:1") // pace: 1s; store: queued
	c := open(t, vms[1], "/buy", "10.0.0.3:1") // pace: 2s; store: queued behind b
	wantState(t, "b", b, wasmhost.StreamPaused)
	wantState(t, "c", c, wasmhost.StreamPaused)
	h.AdvanceClock(400 * time.Millisecond)
	respond(t, a)
	h.AdvanceClock(10 * time.Millisecond)
	wantState(t, "b held for pace", b, wasmhost.StreamPaused)
	h.AdvanceClock(600 * time.Millisecond)
	wantState(t, "b 1.01s after arrival", b, wasmhost.StreamUpstream)
	// c waits for b's slot; b's client goes away mid-flight.
	wantState(t, "c", c, wasmhost.StreamPaused)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	wantState(t, "c held for pace after b left", c, wasmhost.StreamPaused)
	// c now holds the slot, held for pace until 2s; its client leaves.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	d := open(t, vms[0], "/other", "10.0.0.4:1")
	wantState(t, "another path", d, wasmhost.StreamUpstream)
	respond(t, d)
	h.AdvanceClock(3 * time.Second)
	e := open(t, vms[0], "/buy", "10.0.0.5:1")
	wantState(t, "a /buy after everyone left", e, wasmhost.StreamUpstream)
	respond(t, e)
	idle(t, h)
	healthy(t, vms...)
}

// TestQueueAdaptiveTimeoutReportsLearntLimit: an
// adaptive_concurrency waiter answered 429 at max_delay reports the learnt
// limit (X-RateLimit-Limit, RateLimit-Policy q), as an admitted response
// and an immediate rejection do (adaptive-concurrency.md: "The response
// headers report the learnt limit"), not max_limit.
func TestQueueAdaptiveTimeoutReportsLearntLimit(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 1, `{"rules":[{"name":"store","algorithm":"adaptive_concurrency","key":["path"],"max_limit":500,"max_delay":"300ms"}]}`)
	var held []*wasmhost.Stream
	var w *wasmhost.Stream
	for i := 0; i < 600 && w == nil; i++ {
		s := open(t, vms[0], "/buy", "10.0.0.1:1")
		switch state(s) {
		case wasmhost.StreamUpstream:
			held = append(held, s)
		case wasmhost.StreamPaused:
			w = s
		default:
			t.Fatalf("request %d: %v", i, state(s))
		}
	}
	if w == nil {
		t.Fatalf("no request queued")
	}
	learnt := len(held)
	h.AdvanceClock(350 * time.Millisecond)
	r := w.Result()
	if r.Status != 429 {
		t.Fatalf("waiter past max_delay: %v %d", state(w), r.Status)
	}
	want := map[string]string{"x-ratelimit-limit": itoa(learnt), "ratelimit-policy": `"store";q=` + itoa(learnt) + `;qu="concurrent-requests"`}
	for k, v := range want {
		if got := r.Headers.Value(k); got != v {
			t.Errorf("timed-out waiter's %s: %q, want %q (the learnt limit, %d admitted)", k, got, v, learnt)
		}
	}
	// An immediate rejection says the learnt limit (the control).
	vmz := workers(t, h, 1, `{"rules":[{"name":"store","algorithm":"adaptive_concurrency","key":["path"],"max_limit":500}]}`)
	if r := open(t, vmz[0], "/buy", "10.0.0.1:2").Result(); r.Status != 429 || r.Headers.Value("x-ratelimit-limit") != itoa(learnt) {
		t.Errorf("an immediate rejection: %d %v", r.Status, r.Headers)
	}
	for _, s := range held {
		respond(t, s)
	}
	idle(t, h)
	healthy(t, append(vms, vmz...)...)
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestQueueShadowMixedWithQueue: a shadow concurrency rule before
// and after an enforcing one with a queue: the shadow rule never queues
// or rejects, its slots are given back, the counters are exact.
func TestQueueShadowMixedWithQueue(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, `{"rules":[
		{"name":"watch1","algorithm":"concurrency","limit":1,"key":["path"],"shadow":true},
		{"name":"store","algorithm":"concurrency","limit":1,"key":["path"],"max_delay":"2s"},
		{"name":"watch2","algorithm":"concurrency","limit":1,"key":["method"],"shadow":true}]}`)
	a := open(t, vms[0], "/buy", "10.0.0.1:1")
	b := open(t, vms[1], "/buy", "10.0.0.2:1")
	o := open(t, vms[1], "/home", "10.0.0.3:1") // holds watch2's slot
	wantState(t, "a", a, wasmhost.StreamUpstream)
	wantState(t, "b", b, wasmhost.StreamPaused)
	wantState(t, "o", o, wasmhost.StreamUpstream)
	respond(t, a)
	h.AdvanceClock(10 * time.Millisecond)
	wantState(t, "b after a", b, wasmhost.StreamUpstream) // watch2 full: shadow only
	c := open(t, vms[0], "/buy", "10.0.0.4:1")
	wantState(t, "c", c, wasmhost.StreamPaused)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	respond(t, b)
	respond(t, o)
	d := open(t, vms[0], "/buy", "10.0.0.5:1")
	wantState(t, "d", d, wasmhost.StreamUpstream)
	if r := respond(t, d); r.Headers.Has("x-ratelimit-shadow") || r.Status != 200 {
		t.Logf("d: %d %v", r.Status, r.Headers)
	}
	idle(t, h)
	m := h.Metrics()
	for name, want := range map[string]uint64{
		"sluice.rule.store.delayed": 1, "sluice.rule.store.rejected": 0,
		"sluice.rule.watch2.shadow_rejected": 1, // o (a held it; b got it after a)
		"sluice.rule.watch1.shadow_rejected": 1, // b while a held it
	} {
		if got := m.Counter(name); got != want {
			t.Errorf("%s %d, want %d", name, got, want)
		}
	}
	healthy(t, vms...)
}

// TestQueueSecondRuleRejectsAfterWait: a request that waited for
// the first rule's slot and finds the second's (no max_delay) held is
// answered 429 in the second rule's name and gives its first slot back.
func TestQueueSecondRuleRejectsAfterWait(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, `{"rules":[
		{"name":"client","algorithm":"concurrency","limit":1,"key":["client_ip"],"max_delay":"2s"},
		{"name":"store","algorithm":"concurrency","limit":1,"key":["method"]}]}`)
	a := open(t, vms[0], "/buy", "10.0.0.1:1")
	b := open(t, vms[0], "/buy", "10.0.0.1:2")
	wantState(t, "b", b, wasmhost.StreamPaused)
	respond(t, a)
	o := open(t, vms[1], "/buy", "10.0.0.2:1") // takes store's slot
	wantState(t, "o", o, wasmhost.StreamUpstream)
	h.AdvanceClock(10 * time.Millisecond)
	r := b.Result()
	if r.Status != 429 || r.Headers.Value("retry-after") == "" ||
		r.Headers.Value("ratelimit-policy") != `"store";q=1;qu="concurrent-requests"` {
		t.Fatalf("b after waiting for client's slot, store's held: %v %d %v", state(b), r.Status, r.Headers)
	}
	// client's slot for 10.0.0.1 is free again.
	respond(t, o)
	c := open(t, vms[1], "/buy", "10.0.0.1:3")
	wantState(t, "c", c, wasmhost.StreamUpstream)
	respond(t, c)
	idle(t, h)
	if got := h.Metrics().Counter("sluice.rule.store.rejected"); got != 1 {
		t.Errorf("store.rejected %d, want 1", got)
	}
	healthy(t, vms...)
}

// TestQueueKilledWorkerWithWaiters: a worker that vanishes with
// requests waiting in a queue (and a slot held) blocks the live waiters
// behind its tickets for at most the stall bound (1 s) once a slot is
// free, and its slot comes back within 2 s.
func TestQueueKilledWorkerWithWaiters(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 3, `{"rules":[{"name":"store","algorithm":"concurrency","limit":2,"key":["path"],"max_delay":"10s"}]}`)
	a := open(t, vms[0], "/buy", "10.0.0.1:1")
	dead := open(t, vms[1], "/buy", "10.0.0.1:2") // admitted, on the worker that dies
	for i := 0; i < 2; i++ {                      // waiting on the worker that dies
		wantState(t, "a waiter on the worker that dies", open(t, vms[1], "/buy", "10.0.0.1:3"), wasmhost.StreamPaused)
	}
	l := open(t, vms[2], "/buy", "10.0.0.1:4")
	wantState(t, "a", a, wasmhost.StreamUpstream)
	wantState(t, "dead", dead, wasmhost.StreamUpstream)
	wantState(t, "l", l, wasmhost.StreamPaused)
	h.AdvanceClock(200 * time.Millisecond)
	if err := vms[1].Kill(); err != nil {
		t.Fatal(err)
	}
	respond(t, a)
	var at time.Duration
	for step := 10 * time.Millisecond; step <= 4*time.Second; step += 10 * time.Millisecond {
		h.AdvanceClock(10 * time.Millisecond)
		if state(l) == wasmhost.StreamUpstream {
			at = step
			break
		}
	}
	if at == 0 || at > 1100*time.Millisecond {
		t.Errorf("the live waiter behind a dead worker's tickets let in after %v, want within 1.1s (stall)", at)
	}
	t.Logf("live waiter admitted %v after the slot freed", at)
	// The dead worker's slot comes back too: two in flight again.
	h.AdvanceClock(2 * time.Second)
	m := open(t, vms[0], "/buy", "10.0.0.1:5")
	wantState(t, "m (the dead worker's slot came back)", m, wasmhost.StreamUpstream)
	respond(t, m)
	respond(t, l)
	healthy(t, vms[0], vms[2])
}

// TestQueueFirstSlotKeptDuringLongSecondWait: the first rule's
// slot, held by a request waiting seconds in the second rule's queue, is
// renewed meanwhile: it does not lapse and let another request in.
func TestQueueFirstSlotKeptDuringLongSecondWait(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, `{"rules":[
		{"name":"buy","match":{"path_prefix":"/buy"},"algorithm":"concurrency","limit":1,"key":["path"],"max_delay":"10s"},
		{"name":"shop","algorithm":"concurrency","limit":1,"key":["method"],"max_delay":"10s"}]}`)
	second, other := secondQueue(t, h, vms)
	h.AdvanceClock(4 * time.Second)
	wantState(t, "second after 4s", second, wasmhost.StreamPaused)
	n := open(t, vms[1], "/buy", "10.0.0.4:1") // waits for buy's slot (second holds it)
	wantState(t, "n", n, wasmhost.StreamPaused)
	respond(t, other)
	h.AdvanceClock(10 * time.Millisecond)
	wantState(t, "second after shop's slot freed", second, wasmhost.StreamUpstream)
	wantState(t, "n while second holds buy's slot", n, wasmhost.StreamPaused)
	respond(t, second)
	h.AdvanceClock(10 * time.Millisecond)
	wantState(t, "n after second", n, wasmhost.StreamUpstream)
	respond(t, n)
	idle(t, h)
	healthy(t, vms...)
}

// TestQueueReconfigWhileWaiting: a new configuration (new VMs
// with a rule added in front; the concurrency rule unchanged) shares the
// old VMs' slots and queue: the old VM's waiter goes first, then the new
// VM's, and every slot comes back.
func TestQueueReconfigWhileWaiting(t *testing.T) {
	h := newHost(t)
	old := workers(t, h, 1, `{"rules":[{"name":"store","algorithm":"concurrency","limit":1,"key":["path"],"max_delay":"5s"}]}`)
	a := open(t, old[0], "/buy", "10.0.0.1:1")
	w := open(t, old[0], "/buy", "10.0.0.1:2")
	wantState(t, "w", w, wasmhost.StreamPaused)
	h.AdvanceClock(100 * time.Millisecond)
	nu := workers(t, h, 1, `{"rules":[
		{"name":"rate","limit":100,"window":"1s"},
		{"name":"store","algorithm":"concurrency","limit":1,"key":["path"],"max_delay":"5s"}]}`)
	n := open(t, nu[0], "/buy", "10.0.0.1:3")
	wantState(t, "n on the new VM", n, wasmhost.StreamPaused)
	respond(t, a)
	h.AdvanceClock(10 * time.Millisecond)
	wantState(t, "w (older ticket)", w, wasmhost.StreamUpstream)
	wantState(t, "n (younger)", n, wasmhost.StreamPaused)
	respond(t, w)
	h.AdvanceClock(10 * time.Millisecond)
	wantState(t, "n after w", n, wasmhost.StreamUpstream)
	respond(t, n)
	idle(t, h)
	healthy(t, append(old, nu...)...)
}

// TestQueueAdaptiveStackedLeave: adaptive_concurrency with a
// queue in front of a concurrency rule: a request that waited for the
// adaptive slot, then waits in the second queue, and whose client leaves,
// gives both back.
func TestQueueAdaptiveStackedLeave(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, `{"rules":[
		{"name":"buy","match":{"path_prefix":"/buy"},"algorithm":"adaptive_concurrency","min_limit":1,"max_limit":1,"key":["path"],"max_delay":"2s"},
		{"name":"shop","algorithm":"concurrency","limit":1,"key":["method"],"max_delay":"2s"}]}`)
	second, other := secondQueue(t, h, vms)
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	respond(t, other)
	n := open(t, vms[1], "/buy", "10.0.0.4:1")
	wantState(t, "a /buy after the waiter left", n, wasmhost.StreamUpstream)
	respond(t, n)
	idle(t, h)
	healthy(t, vms...)
}

// TestQueuedThenHeldQueueFull: a request delayed by a rate
// rule that waits for a concurrency slot, and gets it while the worker
// already holds maxHeld (4096) requests, is answered 429 as a request
// decided then would be: not let through before its rate delay is over.
func TestQueuedThenHeldQueueFull(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 1, `{"rules":[
		{"name":"pace","limit":100,"window":"1s","burst":1,"max_delay":"60s"},
		{"name":"store","match":{"path_prefix":"/buy"},"algorithm":"concurrency","limit":1,"key":["path"],"max_delay":"60s"}]}`)
	a := open(t, vms[0], "/buy", "10.0.0.2:1")
	wantState(t, "a", a, wasmhost.StreamUpstream)
	var fill []*wasmhost.Stream
	for i := 0; i < 4096; i++ {
		if i == 4095 {
			// b queues while the worker can still hold one more.
			b := open(t, vms[0], "/buy", "10.0.0.2:1") // pace: 40.96s; store: queued
			wantState(t, "b", b, wasmhost.StreamPaused)
			fill = append(fill, b)
		}
		s := open(t, vms[0], "/fill", "10.0.0.2:1") // held by pace
		if state(s) != wasmhost.StreamPaused {
			t.Fatalf("filler %d: %v", i, state(s))
		}
		fill = append(fill, s)
	}
	b := fill[4095]
	if r := open(t, vms[0], "/fill", "10.0.0.2:1").Result(); r.Status != 429 {
		t.Fatalf("a request delayed with the held queue full: %d, want 429 (control)", r.Status)
	}
	respond(t, a)
	h.AdvanceClock(5 * time.Millisecond) // the tick: b gets the slot, 40.96s of pace's delay left; no filler due yet
	if r := b.Result(); state(b) == wasmhost.StreamUpstream || r.Status != 429 {
		t.Errorf("b, given its slot with the held queue full: %v %d, want 429 (not let through 41s before its rate delay is over)", state(b), r.Status)
	}
	for _, s := range fill {
		s.Close()
	}
	idle(t, h)
	healthy(t, vms...)
}
