package wasmtest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

// Throttling (held requests) and the numbers responses report, checked
// against docs/configuration.md (Throttling, Responses).

// TestHeldRequestWhoseClientLeaves: "A held request whose client goes
// away is forgotten" (docs/configuration.md, Throttling): the held gauge
// returns to 0, nothing fails, and its reservation is given back, on every
// algorithm that holds (sliding_window cannot): the client's next request is released when the
// one that left would have been (1 s), not a whole interval after it.
func TestHeldRequestWhoseClientLeaves(t *testing.T) {
	for _, alg := range []string{"token_bucket", "fixed_window", "leaky_bucket"} {
		t.Run(alg, func(t *testing.T) {
			h := newHost(t)
			burst := `,"burst":1`
			if strings.HasSuffix(alg, "_window") {
				burst = ""
			}
			vm := workers(t, h, 1, fmt.Sprintf(`{"rules":[{"name":"r","algorithm":%q,"limit":1,"window":"1s"%s,"max_delay":"5s"}]}`, alg, burst))[0]
			h.AdvanceClock(100 * time.Millisecond) // off the window edges
			get(vm, "/", "10.0.0.1:1").Must(t)
			held := get(vm, "/", "10.0.0.1:1").Must(t)
			if !held.Paused {
				t.Fatalf("second request not held: %d", held.Status)
			}
			if err := held.Stream.Close(); err != nil {
				t.Fatal(err)
			}
			next := get(vm, "/", "10.0.0.1:1").Must(t)
			if !next.Paused {
				t.Fatalf("third request not held: %d", next.Status)
			}
			at := releaseTimes(t, h, []*wasmhost.Result{next}, 3*time.Second)[0]
			if at == 0 || at > 1050*time.Millisecond {
				t.Errorf("after the held request's client left, the next request was released after %v, want by 1s (its reservation given back)", at)
			}
			next.Stream.Finish()
			h.AdvanceClock(1100 * time.Millisecond)
			if g := h.Metrics().Gauge("sluice.held_requests"); g != 0 {
				t.Errorf("held gauge %d once nothing is held", g)
			}
			if got := h.Metrics().Counter("sluice.rule.r.delayed"); got != 2 {
				t.Errorf("delayed counter %d, want 2 (the request that left was delayed too)", got)
			}
			healthy(t, vm)
		})
	}
}

// TestRetryAfterEveryAlgorithmAndWindow: on every algorithm and window
// (sub-second included), a rejection's Retry-After is whole seconds, at
// least 1, RateLimit's t and the body's retry-after equal it, Remaining is
// 0; the request is still refused a second before it (rounded up, not
// down) and admitted once it has passed (docs/configuration.md, Responses).
func TestRetryAfterEveryAlgorithmAndWindow(t *testing.T) {
	for _, alg := range []string{"token_bucket", "fixed_window", "sliding_window", "leaky_bucket"} {
		for _, win := range []string{"250ms", "1s", "7s", "1m"} {
			t.Run(alg+"/"+win, func(t *testing.T) {
				h := newHost(t)
				extra := ""
				if alg == "leaky_bucket" {
					extra = `,"burst":1`
				}
				vm := workers(t, h, 1, fmt.Sprintf(`{"rules":[{"name":"r","algorithm":%q,"limit":3,"window":%q%s}]}`, alg, win, extra))[0]
				h.AdvanceClock(130 * time.Millisecond) // off the window edges
				var rej *wasmhost.Result
				for i := 0; i < 10 && rej == nil; i++ {
					r := get(vm, "/", "10.0.0.1:1").Must(t)
					if r.Paused {
						continue // leaky bucket: queued
					}
					if r.Status == 429 {
						rej = r
					}
				}
				if rej == nil {
					t.Fatal("never rejected")
				}
				ra, err := strconv.Atoi(rej.Headers.Value("retry-after"))
				if err != nil || ra < 1 {
					t.Fatalf("retry-after %q", rej.Headers.Value("retry-after"))
				}
				if got := rej.Headers.Value("ratelimit"); got != fmt.Sprintf(`"r";r=0;t=%d`, ra) {
					t.Errorf("ratelimit %q, retry-after %d", got, ra)
				}
				if got := rej.Headers.Value("x-ratelimit-remaining"); got != "0" {
					t.Errorf("x-ratelimit-remaining %q on a rejection", got)
				}
				var doc struct {
					RetryAfter int `json:"retry-after"`
				}
				if err := json.Unmarshal(rej.Body, &doc); err != nil || doc.RetryAfter != ra {
					t.Errorf("body retry-after %d (%v), header %d", doc.RetryAfter, err, ra)
				}
				if ra > 1 {
					h.AdvanceClock(time.Duration(ra-1) * time.Second)
					if r := get(vm, "/", "10.0.0.1:1").Must(t); r.Status != 429 {
						t.Errorf("admitted (%d, paused %v) a second before Retry-After %d", r.Status, r.Paused, ra)
					}
					h.AdvanceClock(time.Second)
				} else {
					h.AdvanceClock(time.Second)
				}
				if r := get(vm, "/", "10.0.0.1:1").Must(t); r.Status != 200 && !r.Paused {
					t.Errorf("after Retry-After %d: %d", ra, r.Status)
				}
				healthy(t, vm)
			})
		}
	}
}

// releaseTimes steps the clock 5ms at a time for up to d and records when
// each paused stream stops being paused (0: never).
func releaseTimes(t *testing.T, h *wasmhost.Host, rs []*wasmhost.Result, d time.Duration) []time.Duration {
	t.Helper()
	at := make([]time.Duration, len(rs))
	for step := 5 * time.Millisecond; step <= d; step += 5 * time.Millisecond {
		if err := h.AdvanceClock(5 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		for i, r := range rs {
			if at[i] == 0 && state(r.Stream) != wasmhost.StreamPaused {
				at[i] = step
			}
		}
	}
	return at
}

// TestHeldAcrossConfigUpdate: requests held by the old configuration's VM
// are released by it at their time after a new configuration (new VMs,
// the rule unchanged, a rule added in front) took over; the new VM's
// requests queue behind them (shared state), and every request shows
// "delayed" with the rule in the access log.
func TestHeldAcrossConfigUpdate(t *testing.T) {
	h := newHost(t)
	old := workers(t, h, 1, `{"rules":[{"name":"pace","limit":10,"window":"1s","burst":1,"max_delay":"2s"}]}`)
	var rs []*wasmhost.Result
	for i := 0; i < 4; i++ {
		rs = append(rs, get(old[0], "/", "10.0.0.1:1").Must(t))
	}
	nu := workers(t, h, 1, `{"rules":[{"name":"other","match":{"path_prefix":"/x"},"limit":1,"window":"1s"},
		{"name":"pace","limit":10,"window":"1s","burst":1,"max_delay":"2s"}]}`)
	for i := 0; i < 3; i++ {
		rs = append(rs, get(nu[0], "/", "10.0.0.1:1").Must(t))
	}
	if rs[0].Status != 200 {
		t.Fatalf("first: %d", rs[0].Status)
	}
	for i, r := range rs[1:] {
		if !r.Paused {
			t.Fatalf("request %d not held: %d", i+1, r.Status)
		}
		if d, n := filterState(t, r); d != "delayed" || n != "pace" {
			t.Errorf("request %d access log: %q %q, want delayed pace", i+1, d, n)
		}
	}
	at := releaseTimes(t, h, rs[1:], 1500*time.Millisecond)
	for i, got := range at {
		want := time.Duration(i+1) * 100 * time.Millisecond
		if got < want || got > want+10*time.Millisecond {
			t.Errorf("held request %d released at %v, want %v (+ a tick)", i+1, got, want)
		}
	}
	for _, r := range rs[1:] {
		if res := r.Stream.Finish(); res.Status != 200 {
			t.Errorf("held request answered %d", res.Status)
		}
	}
	h.AdvanceClock(1100 * time.Millisecond)
	if g := h.Metrics().Gauge("sluice.held_requests"); g != 0 {
		t.Errorf("held gauge %d", g)
	}
	healthy(t, append(old, nu...)...)
}

// TestLateTickNoBurstOverLimit: the worker's tick comes 500ms late (a busy
// worker). Held requests due meanwhile go together, but no new request is
// admitted at once beyond the rate: in the second that follows the late
// tick, no more than limit requests reach the upstream in all.
func TestLateTickNoBurstOverLimit(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[{"name":"pace","limit":10,"window":"1s","burst":2,"max_delay":"3s"}]}`)[0]
	var held []*wasmhost.Result
	up := 0
	for i := 0; i < 20; i++ {
		r := get(vm, "/", "10.0.0.1:1").Must(t)
		switch {
		case r.Paused:
			held = append(held, r)
		case r.Status == 200:
			up++
		}
	}
	if up != 2 {
		t.Fatalf("%d admitted at once, want burst 2", up)
	}
	mc := h.Clock().(*wasmhost.ManualClock)
	mc.Advance(500 * time.Millisecond) // no tick meanwhile
	if err := h.FireDueTicks(); err != nil {
		t.Fatal(err)
	}
	released := 0
	for _, r := range held {
		if state(r.Stream) != wasmhost.StreamPaused {
			released++
		}
	}
	// New requests now: all must be held (the reservations reach 2s ahead).
	fresh := 0
	for i := 0; i < 5; i++ {
		r := get(vm, "/", "10.0.0.1:1").Must(t)
		if r.Status == 200 && !r.Paused {
			fresh++
		}
		if r.Paused {
			r.Stream.Close()
		}
	}
	t.Logf("late tick released %d held requests at once", released)
	if released != 5 || fresh != 0 {
		t.Errorf("after a tick 500ms late: %d released (want 5 due: 100..500ms), %d new admitted at once (want 0)", released, fresh)
	}
	for _, r := range held {
		r.Stream.Close()
	}
	healthy(t, vm)
}

// TestLaterRuleThatWouldHoldDoesNotRefuse: violated-policies names the
// rules that refused the request: the one that rejected it and the later
// ones that would have too (docs/configuration.md, Responses). A later
// rule with max_delay that would hold the request (within its max_delay)
// admits it, so it is not listed, and its hold does not lengthen the
// Retry-After beyond the wait of the rule that refused: a client that
// waits that long is admitted.
func TestLaterRuleThatWouldHoldDoesNotRefuse(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[
		{"name":"strict","limit":1,"window":"10s"},
		{"name":"paced","limit":1,"window":"20s","burst":1,"max_delay":"30s"}]}`)[0]
	if r := get(vm, "/", "10.0.0.1:1").Must(t); r.Status != 200 {
		t.Fatalf("first: %d", r.Status)
	}
	r := get(vm, "/", "10.0.0.1:1").Must(t)
	if r.Status != 429 {
		t.Fatalf("second: %d", r.Status)
	}
	var doc struct {
		Violated []string `json:"violated-policies"`
	}
	_ = json.Unmarshal(r.Body, &doc)
	// paced would hold this request 20s (<= max_delay 30s), not refuse it.
	if strings.Join(doc.Violated, ",") != "strict" {
		t.Errorf("violated-policies %v, want [strict] (paced would have held it, within its max_delay)", doc.Violated)
	}
	ra := r.Headers.Value("retry-after")
	t.Logf("retry-after %s, ratelimit %q", ra, r.Headers.Value("ratelimit"))
	// A client that waits the Retry-After of strict (10s) is admitted:
	// strict passes, paced holds it 10s (within its 30s).
	h.AdvanceClock(10 * time.Second)
	r2 := get(vm, "/", "10.0.0.1:1").Must(t)
	if !r2.Paused && r2.Status != 200 {
		t.Errorf("after 10s: %d, want admitted (held by paced)", r2.Status)
	}
	if ra != "10" {
		t.Errorf("retry-after %s, want 10 (strict's wait; paced would then hold it, not refuse it)", ra)
	}
	if r2.Paused {
		r2.Stream.Close()
	}
	healthy(t, vm)
}

// TestHeldResponseResetCountsFromRelease: an admitted response carries the
// limit headers "with the quota left after this request: t is then the
// time until the quota is fully restored"; X-RateLimit-Reset is "seconds
// until the quota is fully restored" (docs/configuration.md, Responses).
// A request held 6s is answered 6s after it arrived: its headers must
// count from then, not from its arrival.
func TestHeldResponseResetCountsFromRelease(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[{"name":"pace","limit":10,"window":"1m","burst":1,"max_delay":"1m"}]}`)[0]
	if r := get(vm, "/", "10.0.0.1:1").Must(t); r.Status != 200 || r.Headers.Value("x-ratelimit-reset") != "6" {
		t.Fatalf("first: %d reset %q", r.Status, r.Headers.Value("x-ratelimit-reset"))
	}
	held := get(vm, "/", "10.0.0.1:1").Must(t) // held 6s; the bucket is full again 12s from arrival
	if !held.Paused {
		t.Fatalf("second not held: %d", held.Status)
	}
	at := releaseTimes(t, h, []*wasmhost.Result{held}, 7*time.Second)
	if at[0] < 6*time.Second || at[0] > 6010*time.Millisecond {
		t.Fatalf("released at %v, want 6s", at[0])
	}
	res := held.Stream.Finish()
	// Answered at 6s: the quota is fully restored at 12s, 6s later.
	if got := res.Headers.Value("x-ratelimit-reset"); got != "6" {
		t.Errorf("held request answered after 6s: x-ratelimit-reset %q, want 6 (12s from arrival, 6s from the answer)", got)
	}
	if got := res.Headers.Value("ratelimit"); got != `"pace";r=0;t=6` {
		t.Errorf("held request answered after 6s: ratelimit %q, want t=6", got)
	}
	healthy(t, vm)
}

// TestLeakySpacingAcrossWorkers: a leaky bucket's requests leave "at
// exactly limit/window, one every window/limit", also when they arrive on
// two workers, and the queue holds burst of them.
func TestLeakySpacingAcrossWorkers(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, `{"rules":[{"name":"pay","algorithm":"leaky_bucket","limit":10,"window":"1s","burst":4}]}`)
	var held []*wasmhost.Result
	statuses := map[int]int{}
	for i := 0; i < 8; i++ {
		r := get(vms[i%2], "/pay?x=1", fmt.Sprintf("10.0.0.1:%d", i)).Must(t)
		if r.Paused {
			held = append(held, r)
		} else {
			statuses[r.Status]++
		}
	}
	if statuses[200] != 1 || len(held) != 4 || statuses[429] != 3 {
		t.Fatalf("at once %v, held %d: want 1 forwarded, 4 queued, 3 refused", statuses, len(held))
	}
	at := releaseTimes(t, h, held, time.Second)
	for i, got := range at {
		want := time.Duration(i+1) * 100 * time.Millisecond
		if got < want || got > want+5*time.Millisecond {
			t.Errorf("queued request %d left at %v, want %v", i, got, want)
		}
	}
	for _, r := range held {
		r.Stream.Finish()
	}
	healthy(t, vms...)
}

// TestQueuedThenHeldRequestWhoseClientLeaves: a request let in by a
// concurrency rule's queue, then held by a rate rule's delay, whose client
// leaves while held: its slot and its rate charge are both given back (the
// next request takes the slot at once and is held only to the turn of the
// one that left).
func TestQueuedThenHeldRequestWhoseClientLeaves(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[
		{"name":"pace","limit":2,"window":"1s","burst":1,"max_delay":"3s"},
		{"name":"store","algorithm":"concurrency","limit":1,"key":["path"],"max_delay":"3s"}]}`)[0]
	a := open(t, vm, "/buy", "10.0.0.1:1")
	w := open(t, vm, "/buy", "10.0.0.1:1") // pace delays it 500ms, store queues it
	h.AdvanceClock(100 * time.Millisecond)
	respond(t, a)
	h.AdvanceClock(20 * time.Millisecond)
	wantState(t, "w held after its queue", w, wasmhost.StreamPaused)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	next := open(t, vm, "/buy", "10.0.0.1:1")
	wantState(t, "next", next, wasmhost.StreamPaused)
	at := releaseTimes(t, h, []*wasmhost.Result{{Stream: next}}, 2*time.Second)[0]
	if at == 0 || at > 400*time.Millisecond {
		t.Errorf("next request released %v later, want by the left one's turn (380ms)", at)
	}
	respond(t, next)
	idle(t, h)
	healthy(t, vm)
}
