package wasmtest

// Envoy's allow_on_headers_stop_iteration (docs/design/envoy-setups.md,
// "Pausing on headers"): where the operator sets it, a header callback's
// StopIteration stops the headers alone and the body goes on to the
// module, which exports no request body callback; so every pause on the
// headers must stop the body too.

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

// stopIterHost is a host whose plugin configuration sets
// allow_on_headers_stop_iteration.
func stopIterHost(t *testing.T, opts ...wasmhost.Option) *wasmhost.Host {
	return newHost(t, append(opts, wasmhost.WithAllowOnHeadersStopIteration())...)
}

// postBody sends a POST with a body from client.
func postBody(vm *wasmhost.VM, path, client string, headers ...[2]string) *wasmhost.Result {
	r := wasmhost.HTTPRequest("POST", "shop.example", path, headers...)
	r.Properties = wasmhost.Properties{"source.address": client}
	r.Body = []byte("order=42")
	r.Response = &wasmhost.Response{Status: 200, Body: []byte("ok")}
	return vm.Request(r)
}

// held fails t unless r is a request still held on its headers, its body
// with it.
func held(t *testing.T, what string, r *wasmhost.Result) {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("%s: %v", what, r.Err)
	}
	if !r.Paused || r.Forwarded || len(r.UpstreamBody) != 0 || r.RawAction != 4 {
		t.Fatalf("%s: paused %v, forwarded %v (body %q), status %d, returned %d; want held with its body (StopAllIterationAndWatermark, 4)",
			what, r.Paused, r.Forwarded, r.UpstreamBody, r.Status, r.RawAction)
	}
}

// wentWhole fails t unless the held request r, let go, went upstream with
// its body and was answered 200, and vm is healthy.
func wentWhole(t *testing.T, what string, r *wasmhost.Result, vm *wasmhost.VM) {
	t.Helper()
	if done := r.Stream.Finish(); done.Status != 200 || string(done.UpstreamBody) != "order=42" {
		t.Fatalf("%s: %d, upstream body %q; want 200 with the body", what, done.Status, done.UpstreamBody)
	}
	healthy(t, vm)
}

// TestStopIterationThrottledBodyHeld: a POST throttled by max_delay stays
// held with its body until its turn, then goes upstream whole.
func TestStopIterationThrottledBodyHeld(t *testing.T) {
	h := stopIterHost(t)
	vm := workers(t, h, 1, `{"rules":[{"name":"r","limit":1,"window":"1s","max_delay":"5s"}]}`)[0]
	if r := postBody(vm, "/", "10.0.0.1:1"); r.Status != 200 {
		t.Fatalf("first POST: %d", r.Status)
	}
	r := postBody(vm, "/", "10.0.0.1:1")
	held(t, "throttled POST", r)
	if err := h.AdvanceClock(time.Second); err != nil {
		t.Fatal(err)
	}
	wentWhole(t, "after its delay", r, vm)
}

// TestStopIterationQueuedBodyHeld: a POST queued by a concurrency rule
// stays queued with its body until a slot frees.
func TestStopIterationQueuedBodyHeld(t *testing.T) {
	h := stopIterHost(t)
	vm := workers(t, h, 1, `{"rules":[{"name":"c","algorithm":"concurrency","limit":1,"key":[],"max_delay":"5s"}]}`)[0]
	first := open(t, vm, "/buy", "10.0.0.1:1")
	if state(first) != wasmhost.StreamUpstream {
		t.Fatalf("first request: %v, want upstream", state(first))
	}
	r := postBody(vm, "/buy", "10.0.0.2:1")
	held(t, "queued POST", r)
	respond(t, first)
	if err := h.AdvanceClock(10 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	wentWhole(t, "after the slot freed", r, vm)
}

// TestStopIterationGlobalCallBodyHeld: a POST waiting for the rate-limit
// service's answer (a stream the SDK dispatches) stays held with its body.
func TestStopIterationGlobalCallBodyHeld(t *testing.T) {
	h := stopIterHost(t, wasmhost.WithClusters("ratelimit"))
	vm := workers(t, h, 1, heldConfig)[0]
	r := postBody(vm, "/v1", "10.0.0.1:1", [2]string{"x-client", "x"})
	held(t, "POST awaiting the service", r)
	if err := vm.RespondHTTPCall(onlyCall(t, vm).Token, rlsOK); err != nil {
		t.Fatal(err)
	}
	wentWhole(t, "after the service's answer", r, vm)
}

// TestStopIterationHeldResponse: a response held for its charge
// (engine.SettleHeld) waits, body and all, for the service's answer.
func TestStopIterationHeldResponse(t *testing.T) {
	h := stopIterHost(t, wasmhost.WithClusters("ratelimit"))
	vm := workers(t, h, 1, heldConfig)[0]
	s, act := heldRequest(t, vm, "10")
	if act != wasmhost.Pause || s.State() != wasmhost.StreamResponsePaused || s.Result().ResponseRawAction != 4 {
		t.Fatalf("response with a debt: action %v, state %v, returned %d; want it held (4)", act, s.State(), s.Result().ResponseRawAction)
	}
	if err := vm.RespondHTTPCall(onlyCall(t, vm).Token, rlsOK); err != nil {
		t.Fatal(err)
	}
	if res := s.Result(); res.Status != 200 || string(res.Body) != "answer" {
		t.Fatalf("after the debt's answer: %d %q; want the response delivered", res.Status, res.Body)
	}
	healthy(t, vm)
}
