package wasmtest

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

// A global rule behind a concurrency queue: the waiter that gets the slot
// asks the rate-limit service, and that call must be answered to the
// waiter, wherever the slot was freed.
const queuedGlobalConfig = `{"rules":[
	{"name":"fleet","scope":"global","key":["header:x-client"],"limit":30,"window":"1m"},
	{"name":"slots","algorithm":"concurrency","limit":1,"key":["path"],"max_delay":"5s"}],
	"global":{"cluster":"ratelimit","timeout":"500ms"}}`

// settle answers every call to the service with OK while s is paused,
// moving the clock on by step when none is pending, for at most within;
// it returns s's state then.
func settle(t *testing.T, h *wasmhost.Host, vm *wasmhost.VM, s *wasmhost.Stream, step, within time.Duration) wasmhost.StreamState {
	t.Helper()
	for waited := time.Duration(0); s.State() == wasmhost.StreamPaused && waited <= within; {
		calls := vm.HTTPCalls()
		for _, c := range calls {
			if err := vm.RespondHTTPCall(c.Token, rlsOK); err != nil {
				t.Fatal(err)
			}
		}
		if len(calls) == 0 {
			if err := h.AdvanceClock(step); err != nil {
				t.Fatal(err)
			}
			waited += step
		}
	}
	return s.State()
}

// TestQueueGrantedAtStreamEndAsksTheService: a waiter granted its slot
// when the holder's stream ends (a response with a body gives its slot
// back there) goes upstream once the service has answered its global
// rule's call, well before global.timeout would let it through unasked
// (on_error allow), and is counted by the service.
func TestQueueGrantedAtStreamEndAsksTheService(t *testing.T) {
	h := newHost(t, wasmhost.WithClusters("ratelimit"))
	vm := workers(t, h, 1, queuedGlobalConfig)[0]
	client := [2]string{"x-client", "c"}
	a := openH(t, vm, "/queued", "10.0.0.1:1", client)
	if st := settle(t, h, vm, a, 5*time.Millisecond, 100*time.Millisecond); st != wasmhost.StreamUpstream {
		t.Fatalf("holder: %v, want upstream", st)
	}
	b := openH(t, vm, "/queued", "10.0.0.1:2", client)
	wantState(t, "waiter", b, wasmhost.StreamPaused)
	for round := 0; round < 3; round++ {
		if _, err := a.SendResponse(wasmhost.Response{Status: 200, Body: []byte("ok")}); err != nil {
			t.Fatal(err)
		}
		wantState(t, "holder after its response", a, wasmhost.StreamClosed)
		if st := settle(t, h, vm, b, 5*time.Millisecond, 200*time.Millisecond); st != wasmhost.StreamUpstream {
			t.Fatalf("round %d: waiter %v 200 ms after the holder's stream ended, want upstream", round, st)
		}
		a, b = b, openH(t, vm, "/queued", "10.0.0.1:3", client)
		wantState(t, "next waiter", b, wasmhost.StreamPaused)
	}
	respond(t, a)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	idle(t, h)
	for _, c := range []string{"sluice.global.call_failures", "sluice.global.expired"} {
		if n := h.Metrics().Counter(c); n != 0 {
			t.Errorf("%s %d, want 0 (every call answered in time)", c, n)
		}
	}
}
