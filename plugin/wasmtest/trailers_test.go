package wasmtest

// Trailers (gRPC): a stream Sluice holds must keep its trailers waiting,
// since the module exports no trailer callbacks and proxy-wasm-cpp-host
// answers Continue for them, which would send on what the filter had
// stopped (docs/design/envoy-setups.md, "Pausing on headers"). Each case
// runs with and without allow_on_headers_stop_iteration.

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

// grpcRequest is a unary gRPC call from client: a body, then trailers, and
// an upstream answer with a body and trailers (grpc-status).
func grpcRequest(client string, headers ...[2]string) wasmhost.Request {
	r := wasmhost.HTTPRequest("POST", "api.example", "/pkg.Svc/Call", append(headers, [2]string{"content-type", "application/grpc"})...)
	r.Properties = wasmhost.Properties{"source.address": client}
	r.Body = []byte("\x00\x00\x00\x00\x02hi")
	r.Trailers = wasmhost.Headers{{"x-request-trailer", "1"}}
	r.Response = &wasmhost.Response{Status: 200, Headers: wasmhost.Headers{{"content-type", "application/grpc"}, {"x-tokens-used", "10"}},
		Body: []byte("\x00\x00\x00\x00\x02ok"), Trailers: wasmhost.Headers{{"grpc-status", "0"}}}
	return r
}

// hosts runs f on a host without, then with, allow_on_headers_stop_iteration.
func hosts(t *testing.T, f func(t *testing.T, h *wasmhost.Host), opts ...wasmhost.Option) {
	t.Run("default", func(t *testing.T) { f(t, newHost(t, opts...)) })
	t.Run("allow_on_headers_stop_iteration", func(t *testing.T) { f(t, stopIterHost(t, opts...)) })
}

// TestThrottledRequestKeepsTrailers: a gRPC call throttled by max_delay
// stays held, body and trailers, until its turn, then goes upstream whole.
func TestThrottledRequestKeepsTrailers(t *testing.T) {
	hosts(t, func(t *testing.T, h *wasmhost.Host) {
		vm := workers(t, h, 1, `{"rules":[{"name":"r","limit":1,"window":"1s","max_delay":"5s"}]}`)[0]
		if r := vm.Request(grpcRequest("10.0.0.1:1")); r.Trailers.Value("grpc-status") != "0" || r.UpstreamTrailers.Value("x-request-trailer") != "1" {
			t.Fatalf("first call: %d, trailers %v, upstream trailers %v; want it through with its trailers", r.Status, r.Trailers, r.UpstreamTrailers)
		}
		r := vm.Request(grpcRequest("10.0.0.1:1"))
		if !r.Paused || r.Forwarded || len(r.UpstreamBody) != 0 || r.UpstreamTrailers != nil {
			t.Fatalf("throttled call: paused %v, forwarded %v, upstream body %q, trailers %v; want it held whole", r.Paused, r.Forwarded, r.UpstreamBody, r.UpstreamTrailers)
		}
		if err := h.AdvanceClock(time.Second); err != nil {
			t.Fatal(err)
		}
		done := r.Stream.Finish()
		if done.Status != 200 || len(done.UpstreamBody) != 7 || done.UpstreamTrailers.Value("x-request-trailer") != "1" || done.Trailers.Value("grpc-status") != "0" {
			t.Fatalf("after its delay: %d, upstream body %q, upstream trailers %v, trailers %v; want it through whole", done.Status, done.UpstreamBody, done.UpstreamTrailers, done.Trailers)
		}
		healthy(t, vm)
	})
}

// TestHeldResponseKeepsTrailers: a gRPC response held for its charge
// (engine.SettleHeld) waits, body and trailers, for the service's answer.
func TestHeldResponseKeepsTrailers(t *testing.T) {
	hosts(t, func(t *testing.T, h *wasmhost.Host) {
		vm := workers(t, h, 1, heldConfig)[0]
		s, err := vm.NewStream(wasmhost.Properties{"source.address": "10.0.0.1:4000"})
		if err != nil {
			t.Fatal(err)
		}
		req := grpcRequest("10.0.0.1:4000", [2]string{"x-client", "x"})
		if _, err := s.SendRequestHeaders(req.Headers, false); err != nil {
			t.Fatal(err)
		}
		if err := vm.RespondHTTPCall(onlyCall(t, vm).Token, rlsOK); err != nil { // the lease
			t.Fatal(err)
		}
		if _, err := s.SendRequestBody(req.Body, false); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SendRequestTrailers(req.Trailers); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SendResponse(*req.Response); err != nil {
			t.Fatal(err)
		}
		if r := s.Result(); s.State() != wasmhost.StreamResponsePaused || r.Status != 0 {
			t.Fatalf("response with a debt: state %v, status %d; want it held, trailers and all", s.State(), r.Status)
		}
		if err := vm.RespondHTTPCall(onlyCall(t, vm).Token, rlsOK); err != nil { // the debt
			t.Fatal(err)
		}
		if r := s.Result(); r.Status != 200 || len(r.Body) != 7 || r.Trailers.Value("grpc-status") != "0" {
			t.Fatalf("after the debt's answer: %d, body %q, trailers %v; want the response delivered whole", r.Status, r.Body, r.Trailers)
		}
		healthy(t, vm)
	}, wasmhost.WithClusters("ratelimit"))
}
