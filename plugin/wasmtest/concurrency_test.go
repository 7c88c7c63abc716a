package wasmtest

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

// open starts a request on vm and leaves it in flight (upstream, no response
// yet) if the plugin forwards it.
func open(t *testing.T, vm *wasmhost.VM, path, client string) *wasmhost.Stream {
	t.Helper()
	s, err := vm.NewStream(wasmhost.Properties{"source.address": client})
	if err != nil {
		t.Fatal(err)
	}
	r := wasmhost.HTTPRequest("POST", "shop.example", path)
	if _, err := s.SendRequestHeaders(r.Headers, true); err != nil {
		t.Fatal(err)
	}
	return s
}

// respond completes an in-flight stream with 200, headers only (its slots
// given back at the response's headers, without the hand-off to waiters a
// stream's end makes), and returns what the client got.
func respond(t *testing.T, s *wasmhost.Stream) *wasmhost.Result {
	t.Helper()
	if _, err := s.SendResponse(wasmhost.Response{Status: 200}); err != nil {
		t.Fatal(err)
	}
	return s.Result()
}

func state(s *wasmhost.Stream) wasmhost.StreamState { return s.State() }

// TestConcurrencyLimitAcrossWorkers: slots are counted across workers,
// released when the response is done or the client goes away, and the
// headers say how many slots are free.
func TestConcurrencyLimitAcrossWorkers(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 3, `{"rules":[{"name":"store","algorithm":"concurrency","limit":3,"key":["path"]}]}`)
	var inflight []*wasmhost.Stream
	for i := 0; i < 3; i++ {
		s := open(t, vms[i], "/buy", "10.0.0.1:1")
		if state(s) != wasmhost.StreamUpstream {
			t.Fatalf("request %d: %v, want upstream", i, state(s))
		}
		inflight = append(inflight, s)
	}
	// The fourth, on any worker and from any client, is rejected at once.
	rej := open(t, vms[1], "/buy", "10.0.0.2:1").Result()
	if rej.Status != 429 || rej.Headers.Value("retry-after") != "1" || rej.Headers.Value("x-ratelimit-remaining") != "0" ||
		rej.Headers.Value("x-ratelimit-limit") != "3" || rej.Headers.Value("ratelimit-policy") != `"store";q=3;qu="concurrent-requests"` {
		t.Fatalf("fourth request: %d %v", rej.Status, rej.Headers)
	}
	// A response done frees a slot: its headers say none is left (it was
	// admitted as the third).
	res := respond(t, inflight[2])
	if res.Status != 200 || res.Headers.Value("x-ratelimit-remaining") != "0" {
		t.Fatalf("third response: %d %v", res.Status, res.Headers)
	}
	s := open(t, vms[2], "/buy", "10.0.0.3:1")
	if state(s) != wasmhost.StreamUpstream {
		t.Fatalf("after a response, a new request: %v", state(s))
	}
	// A client that goes away mid-flight frees its slot too.
	if err := inflight[0].Close(); err != nil {
		t.Fatal(err)
	}
	s2 := open(t, vms[0], "/buy", "10.0.0.4:1")
	if state(s2) != wasmhost.StreamUpstream {
		t.Fatalf("after a reset, a new request: %v", state(s2))
	}
	if r := open(t, vms[0], "/buy", "10.0.0.5:1").Result(); r.Status != 429 {
		t.Fatalf("over the limit again: %d", r.Status)
	}
	// Other paths have their own slots (key ["path"]).
	if s := open(t, vms[0], "/other", "10.0.0.5:1"); state(s) != wasmhost.StreamUpstream {
		t.Fatalf("another path: %v", state(s))
	}
	for _, x := range []*wasmhost.Stream{inflight[1], s, s2} {
		respond(t, x)
	}
	h.AdvanceClock(1100 * time.Millisecond)
	if g := h.Metrics().Gauge("sluice.concurrency.slots_held"); g != 1 {
		t.Errorf("slots_held gauge %d, want 1 (the /other request)", g)
	}
}

// killedSlotsComeBack kills vms[0], which holds slots of rule "store" on
// /buy, checks that vms[1] is refused right after, then steps the clock
// 100 ms at a time until vms[1] is admitted again, which must happen within
// 2 s (the leak bound). It returns that time and the admitted stream.
func killedSlotsComeBack(t *testing.T, h *wasmhost.Host, vms []*wasmhost.VM) (time.Duration, *wasmhost.Stream) {
	t.Helper()
	if err := vms[0].Kill(); err != nil {
		t.Fatal(err)
	}
	if r := open(t, vms[1], "/buy", "10.0.0.2:1").Result(); r.Status != 429 {
		t.Fatalf("right after the kill the slots are still held: got %d", r.Status)
	}
	for step := 100 * time.Millisecond; step <= 5*time.Second; step += 100 * time.Millisecond {
		h.AdvanceClock(100 * time.Millisecond)
		if s := open(t, vms[1], "/buy", "10.0.0.2:1"); state(s) == wasmhost.StreamUpstream {
			if step > 2*time.Second+100*time.Millisecond {
				t.Fatalf("the killed worker's slots came back after %v, want within 2s", step)
			}
			return step, s
		}
	}
	t.Fatalf("the killed worker's slots did not come back within 5s, want within 2s")
	return 0, nil
}

// TestConcurrencyKilledWorkerSlotsComeBack: a worker that vanishes with
// slots held (no stream end, no tick ever again) leaks them for at most 2
// epochs (2 s): a live worker holding its slots keeps them.
func TestConcurrencyKilledWorkerSlotsComeBack(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, `{"rules":[{"name":"store","algorithm":"concurrency","limit":4,"key":["path"]}]}`)
	live := open(t, vms[1], "/buy", "10.0.0.9:1") // held for the whole test by a live worker
	for i := 0; i < 3; i++ {
		if s := open(t, vms[0], "/buy", "10.0.0.1:1"); state(s) != wasmhost.StreamUpstream {
			t.Fatalf("request %d not admitted", i)
		}
	}
	back, s := killedSlotsComeBack(t, h, vms)
	respond(t, s)
	t.Logf("killed worker's slots back after %v", back)
	// Exactly the 3 leaked slots came back; the live worker's is still held
	// (it renewed it every second).
	h.AdvanceClock(3 * time.Second)
	var ss []*wasmhost.Stream
	for i := 0; i < 4; i++ {
		s := open(t, vms[1], "/buy", "10.0.0.3:1")
		if state(s) == wasmhost.StreamUpstream {
			ss = append(ss, s)
		}
	}
	if len(ss) != 3 {
		t.Fatalf("%d admitted with the live worker's slot held, want 3", len(ss))
	}
	respond(t, live)
	if s := open(t, vms[1], "/buy", "10.0.0.3:1"); state(s) != wasmhost.StreamUpstream {
		t.Fatal("the live worker's slot was not released")
	}
}

// TestConcurrencyQueueFIFOAcrossWorkers: with max_delay, requests over the
// limit wait and are let in, in arrival order, whichever worker holds them,
// as slots free.
func TestConcurrencyQueueFIFOAcrossWorkers(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 3, `{"rules":[{"name":"store","algorithm":"concurrency","limit":2,"key":["path"],"max_delay":"5s"}]}`)
	a := open(t, vms[0], "/buy", "10.0.0.1:1")
	b := open(t, vms[1], "/buy", "10.0.0.1:2")
	var waiting []*wasmhost.Stream
	for i := 0; i < 6; i++ {
		s := open(t, vms[(i+2)%3], "/buy", "10.0.0.1:3")
		if state(s) != wasmhost.StreamPaused {
			t.Fatalf("waiter %d: %v, want paused", i, state(s))
		}
		waiting = append(waiting, s)
	}
	h.AdvanceClock(50 * time.Millisecond)
	for i, s := range waiting {
		if state(s) != wasmhost.StreamPaused {
			t.Fatalf("waiter %d let in with no slot free", i)
		}
	}
	inflight := []*wasmhost.Stream{a, b}
	for next := 0; next < len(waiting); next++ {
		// Free one slot: exactly the next waiter in arrival order gets it
		// within a tick or two.
		respond(t, inflight[0])
		inflight = inflight[1:]
		h.AdvanceClock(20 * time.Millisecond)
		for i, s := range waiting {
			want := wasmhost.StreamPaused
			if i <= next {
				want = wasmhost.StreamUpstream
			}
			if i < next {
				continue
			}
			if state(s) != want {
				t.Fatalf("after %d slot(s) freed, waiter %d is %v, want %v", next+1, i, state(s), want)
			}
		}
		inflight = append(inflight, waiting[next])
	}
	for _, s := range inflight {
		respond(t, s)
	}
	h.AdvanceClock(time.Second)
	if got := h.Metrics().Counter("sluice.rule.store.delayed"); got != 6 {
		t.Errorf("delayed counter %d, want 6", got)
	}
	if got := h.Metrics().Counter("sluice.rule.store.wait_ms"); got < 6*50 {
		t.Errorf("wait_ms counter %d, want at least 300 (each waited 50ms or more)", got)
	}
	// Each held its slot 20 ms (one AdvanceClock step) or 50+20 ms.
	if got := h.Metrics().Gauge("sluice.rule.store.hold_ms"); got < 20 || got > 80 {
		t.Errorf("hold_ms gauge %d, want 20..80", got)
	}
}

// TestConcurrencyQueueTimeoutAndAbandon: a waiter that cannot start within
// max_delay is rejected; one whose client leaves is forgotten; neither
// blocks those behind it.
func TestConcurrencyQueueTimeoutAndAbandon(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, `{"rules":[{"name":"store","algorithm":"concurrency","limit":1,"key":["path"],"max_delay":"300ms"}]}`)
	a := open(t, vms[0], "/buy", "10.0.0.1:1")
	gone := open(t, vms[1], "/buy", "10.0.0.1:2")
	late := open(t, vms[0], "/buy", "10.0.0.1:3")
	if state(gone) != wasmhost.StreamPaused || state(late) != wasmhost.StreamPaused {
		t.Fatal("not queued")
	}
	gone.Close()
	h.AdvanceClock(350 * time.Millisecond)
	r := late.Result()
	if r.Status != 429 || r.Headers.Value("retry-after") == "" {
		t.Fatalf("waiter past max_delay: %v %d", state(late), r.Status)
	}
	// The queue is empty again: when the slot frees, a newcomer gets it.
	next := open(t, vms[1], "/buy", "10.0.0.1:4")
	if state(next) != wasmhost.StreamPaused {
		t.Fatalf("newcomer with the slot held: %v", state(next))
	}
	respond(t, a)
	h.AdvanceClock(20 * time.Millisecond)
	if state(next) != wasmhost.StreamUpstream {
		t.Fatalf("newcomer after the slot freed: %v", state(next))
	}
	respond(t, next)
	h.AdvanceClock(time.Second)
	if g := h.Metrics().Gauge("sluice.concurrency.waiting"); g != 0 {
		t.Errorf("waiting gauge %d", g)
	}
	if g := h.Metrics().Gauge("sluice.concurrency.slots_held"); g != 0 {
		t.Errorf("slots_held gauge %d", g)
	}
	for _, vm := range vms {
		if err := vm.Failed(); err != nil {
			t.Fatal(err)
		}
		for _, w := range vm.Warnings() {
			t.Errorf("host warning: %s", w)
		}
	}
}

// TestConcurrencyReleaseAtResponseEnd: a slot is given back as soon as a
// response without a body is complete, before the stream ends; a response
// with a body gives it back at the stream's end (the module exports no
// body callback); each only once: the stream's end does not release a
// slot a second time.
func TestConcurrencyReleaseAtResponseEnd(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, `{"rules":[{"name":"store","algorithm":"concurrency","limit":2,"key":["path"]}]}`)
	a := open(t, vms[0], "/buy", "10.0.0.1:1")
	b := open(t, vms[1], "/buy", "10.0.0.1:2")
	if state(a) != wasmhost.StreamUpstream || state(b) != wasmhost.StreamUpstream {
		t.Fatal("not admitted")
	}
	// a's response is complete (headers only) and b's with a body; neither
	// stream has ended.
	if _, err := a.SendResponse(wasmhost.Response{Status: 200, KeepOpen: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.SendResponse(wasmhost.Response{Status: 200, Body: []byte("ok"), KeepOpen: true}); err != nil {
		t.Fatal(err)
	}
	if state(a) == wasmhost.StreamClosed || state(b) == wasmhost.StreamClosed {
		t.Fatal("the host ended a kept-open stream")
	}
	// a's slot is free before its stream ends, b's not yet.
	c := open(t, vms[0], "/buy", "10.0.0.1:3")
	if state(c) != wasmhost.StreamUpstream {
		t.Fatalf("after a complete response without a body: %v, want upstream", state(c))
	}
	if r := open(t, vms[1], "/buy", "10.0.0.1:9").Result(); r.Status != 429 {
		t.Fatalf("b's stream still open: got %d, want 429 (its slot held to the stream's end)", r.Status)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	d := open(t, vms[1], "/buy", "10.0.0.1:4")
	if state(d) != wasmhost.StreamUpstream {
		t.Fatalf("after b's stream ended: %v, want upstream", state(d))
	}
	// a's stream's end releases nothing more: the limit still holds.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if r := open(t, vms[0], "/buy", "10.0.0.1:5").Result(); r.Status != 429 {
		t.Fatalf("two in flight after the first two ended: got %d, want 429 (a slot released twice)", r.Status)
	}
	// c's client goes away mid-flight: the stream's end releases its slot,
	// once; d completes normally.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	respond(t, d)
	e := open(t, vms[0], "/buy", "10.0.0.1:6")
	f := open(t, vms[1], "/buy", "10.0.0.1:7")
	if state(e) != wasmhost.StreamUpstream || state(f) != wasmhost.StreamUpstream {
		t.Fatalf("after a reset and a response: %v %v", state(e), state(f))
	}
	if r := open(t, vms[1], "/buy", "10.0.0.1:8").Result(); r.Status != 429 {
		t.Fatalf("third in flight: got %d, want 429", r.Status)
	}
	respond(t, e)
	respond(t, f)
	h.AdvanceClock(1100 * time.Millisecond)
	if g := h.Metrics().Gauge("sluice.concurrency.slots_held"); g != 0 {
		t.Errorf("slots_held gauge %d, want 0", g)
	}
}

// TestConcurrencyQueuesAgainOnALaterRule: a request that waited for a slot
// of one concurrency rule and then finds the next rule's slots all held
// waits again, in that rule's queue: it goes on when a slot of that rule
// frees (or is answered 429 at max_delay), and holds its first slot in the
// meantime, released with the request.
func TestConcurrencyQueuesAgainOnALaterRule(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, `{"rules":[
		{"name":"buy","match":{"path_prefix":"/buy"},"algorithm":"concurrency","limit":1,"key":["path"],"max_delay":"2s"},
		{"name":"shop","algorithm":"concurrency","limit":1,"key":["method"],"max_delay":"2s"}]}`)
	first := open(t, vms[0], "/buy", "10.0.0.1:1")
	second := open(t, vms[0], "/buy", "10.0.0.2:1")
	if state(first) != wasmhost.StreamUpstream || state(second) != wasmhost.StreamPaused {
		t.Fatalf("first %v, second %v: want upstream, paused", state(first), state(second))
	}
	// The first frees both slots; another request takes the shop's before
	// the second's turn comes: the second gets buy's slot, then waits for
	// the shop's.
	respond(t, first)
	other := open(t, vms[1], "/home", "10.0.0.3:1")
	h.AdvanceClock(20 * time.Millisecond)
	if state(other) != wasmhost.StreamUpstream || state(second) != wasmhost.StreamPaused {
		t.Fatalf("other %v, second %v: want upstream, paused", state(other), state(second))
	}
	if g := h.Metrics().Gauge("sluice.concurrency.waiting"); g != 1 {
		t.Errorf("waiting gauge %d while the second waits for the shop's slot, want 1", g)
	}
	respond(t, other)
	h.AdvanceClock(20 * time.Millisecond)
	if state(second) != wasmhost.StreamUpstream {
		t.Fatalf("second after the shop's slot freed: %v, want upstream", state(second))
	}
	respond(t, second)
	h.AdvanceClock(3 * time.Second)
	for _, g := range []string{"sluice.concurrency.waiting", "sluice.concurrency.slots_held"} {
		if v := h.Metrics().Gauge(g); v != 0 {
			t.Errorf("%s %d after every request ended, want 0", g, v)
		}
	}
	// A waiter that queued again is answered 429 at max_delay if the slot
	// never frees, and gives back the slot it held meanwhile.
	hold := open(t, vms[1], "/home", "10.0.0.4:1")
	late := open(t, vms[0], "/buy", "10.0.0.5:1")
	h.AdvanceClock(2100 * time.Millisecond)
	if r := late.Result(); r.Status != 429 {
		t.Errorf("waiter past max_delay: %v, status %d, want 429", state(late), r.Status)
	}
	respond(t, hold)
	if s := open(t, vms[1], "/buy", "10.0.0.6:1"); state(s) != wasmhost.StreamUpstream {
		t.Errorf("a buy after the waiter timed out: %v, want upstream (its slot given back)", state(s))
	}
}
