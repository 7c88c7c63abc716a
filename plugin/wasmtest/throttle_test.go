package wasmtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

// TestThrottleReleasesInOrderFromTick: requests over the limit that can be
// admitted within max_delay are paused and released by the tick of the
// worker that holds them, in arrival order, 100ms apart; the rest are
// rejected at once.
func TestThrottleReleasesInOrderFromTick(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, `{"rules":[{"name":"login","limit":10,"window":"1s","burst":5,"max_delay":"1s"}]}`)
	var held []*wasmhost.Result
	immediate, rejected := 0, 0
	for i := 0; i < 20; i++ {
		r := get(vms[i%2], "/login", "10.0.0.1:1")
		switch {
		case r.Paused:
			held = append(held, r)
		case r.Status == 200:
			immediate++
		case r.Status == 429:
			rejected++
			// Retry-After is the wait until the request would pass without
			// being held: the 16th..20th are 1.1s..1.5s over, so 2.
			if ra := r.Headers.Value("retry-after"); ra != "2" {
				t.Errorf("rejection retry-after %q, want 2", ra)
			}
		default:
			t.Fatalf("request %d: %+v", i, r)
		}
	}
	if immediate != 5 || len(held) != 10 || rejected != 5 {
		t.Fatalf("immediate %d held %d rejected %d, want 5, 10, 5", immediate, len(held), rejected)
	}
	// Step the clock 10ms at a time; record when each held request is let go.
	released := make([]time.Duration, len(held))
	for step := time.Duration(0); step <= 1100*time.Millisecond; step += 10 * time.Millisecond {
		for i, r := range held {
			if released[i] == 0 && r.Stream.State() != wasmhost.StreamPaused {
				released[i] = step
			}
		}
		if err := h.AdvanceClock(10 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range held {
		want := time.Duration(i+1) * 100 * time.Millisecond
		if released[i] < want || released[i] > want+20*time.Millisecond {
			t.Errorf("held request %d released at %v, want %v (+ one tick)", i, released[i], want)
		}
		if res := r.Stream.Finish(); res.Status != 200 || !res.Forwarded {
			t.Errorf("held request %d: status %d forwarded %v", i, res.Status, res.Forwarded)
		}
	}
	h.AdvanceClock(time.Second)
	if got := h.Metrics().Counter("sluice.rule.login.delayed"); got != 10 {
		t.Errorf("delayed counter %d, want 10", got)
	}
}

// TestHeldStreamThatGoesAwayIsForgotten: a client that disconnects while
// held is removed; the tick does not try to resume it.
func TestHeldStreamThatGoesAwayIsForgotten(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[{"name":"r","limit":1,"window":"1s","max_delay":"5s"}]}`)[0]
	get(vm, "/", "10.0.0.1:1")
	r := get(vm, "/", "10.0.0.1:1")
	if !r.Paused {
		t.Fatalf("not held: %+v", r.Status)
	}
	if err := r.Stream.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.AdvanceClock(3 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := vm.Failed(); err != nil {
		t.Fatal(err)
	}
	for _, w := range vm.Warnings() {
		t.Errorf("host warning: %s", w)
	}
	if got := h.Metrics().Gauge("sluice.held_requests"); got != 0 {
		t.Errorf("held gauge %d after the client left", got)
	}
}

// TestLeakyBucketPacesThroughTicks: a leaky bucket holds requests even with
// max_delay 0 and lets them go at its rate.
func TestLeakyBucketPacesThroughTicks(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[{"name":"pay","algorithm":"leaky_bucket","limit":5,"window":"1s","burst":2}]}`)[0]
	var rs []*wasmhost.Result
	for i := 0; i < 5; i++ {
		rs = append(rs, get(vm, "/", fmt.Sprintf("10.0.0.1:%d", i)))
	}
	if rs[0].Status != 200 || !rs[1].Paused || !rs[2].Paused || rs[3].Status != 429 || rs[4].Status != 429 {
		t.Fatalf("leaky bucket of 2 at 5/s: %d %v %v %d %d", rs[0].Status, rs[1].Paused, rs[2].Paused, rs[3].Status, rs[4].Status)
	}
	h.AdvanceClock(210 * time.Millisecond)
	if rs[1].Stream.State() == wasmhost.StreamPaused || rs[2].Stream.State() != wasmhost.StreamPaused {
		t.Error("after 200ms exactly the first queued request should have left")
	}
	h.AdvanceClock(200 * time.Millisecond)
	if rs[2].Stream.State() == wasmhost.StreamPaused {
		t.Error("after 400ms the second queued request should have left")
	}
}

// TestBurstAcrossWorkersClockReadFirst: the compiled plugin reads the clock
// when a request's headers arrive and the shared state afterwards, so a
// worker can find a charge another worker made at a later clock read.
// Here the host's clock is stepped 1µs back before each request of worker
// 0: its requests are decided after worker 1's, at an earlier time. Four
// requests at once under burst 2 (the e2e TestMetricsAfterKnownTraffic's
// login rule): 2 forwarded at once, 2 held and released 100ms apart.
func TestBurstAcrossWorkersClockReadFirst(t *testing.T) {
	clock := wasmhost.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h := newHost(t, wasmhost.WithClock(clock))
	vms := workers(t, h, 2, `{"rules":[{"name":"login","limit":10,"window":"1s","burst":2,"max_delay":"1s"}]}`)
	t0 := clock.Now()
	var held []*wasmhost.Result
	for i, w := range []int{1, 0, 1, 0} {
		clock.Set(t0.Add(time.Duration(w) * time.Microsecond))
		r := get(vms[w], "/login", "203.0.113.5:1")
		switch {
		case r.Paused:
			held = append(held, r)
		case r.Status != 200:
			t.Fatalf("request %d (worker %d): status %d", i+1, w, r.Status)
		case len(held) > 0:
			t.Fatalf("request %d forwarded after one was held", i+1)
		}
	}
	if len(held) != 2 {
		t.Fatalf("%d of 4 held, want 2 (burst 2 forwarded at once)", len(held))
	}
	clock.Set(t0.Add(time.Microsecond))
	released := []time.Duration{0, 0}
	for step := 10 * time.Millisecond; step <= 300*time.Millisecond; step += 10 * time.Millisecond {
		if err := h.AdvanceClock(10 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		for i, r := range held {
			if released[i] == 0 && r.Stream.State() != wasmhost.StreamPaused {
				released[i] = step
			}
		}
	}
	for i, want := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond} {
		if released[i] < want || released[i] > want+20*time.Millisecond {
			t.Errorf("held request %d released at %v, want %v (+ one tick)", i+1, released[i], want)
		}
	}
	m := h.Metrics()
	if a, d := m.Counter("sluice.rule.login.allowed"), m.Counter("sluice.rule.login.delayed"); a != 2 || d != 2 {
		t.Errorf("login allowed %d delayed %d, want 2 and 2", a, d)
	}
	healthy(t, vms...)
}
