package wasmhost

import (
	"strings"
	"testing"
	"time"
)

// grpcLike is a POST with a body and trailers, answered with a body and
// trailers (grpc-status), as a gRPC call is.
func grpcLike(path string, resp Response) Request {
	req := HTTPRequest("POST", "a", path)
	req.Body = []byte("request body")
	req.Trailers = Headers{{"x-req-trailer", "1"}}
	resp.Body = []byte("response body")
	resp.Trailers = Headers{{"grpc-status", "0"}}
	req.Response = &resp
	return req
}

// TestTrailers: trailers reach the plugin after the body, their maps are
// writable in their callbacks, and what the plugin added goes on with them.
func TestTrailers(t *testing.T) {
	r := newVM(t, newHost(t), "vm0", "").Request(grpcLike("/x", Response{})).Must(t)
	wantEq(t, "upstream trailer", r.UpstreamTrailers.Value("x-req-trailer"), "1")
	wantEq(t, "trailer the plugin added to the request", r.UpstreamTrailers.Value("x-plugin-trailer"), "1")
	wantEq(t, "upstream body", string(r.UpstreamBody), "request body")
	wantEq(t, "client's grpc-status", r.Trailers.Value("grpc-status"), "0")
	wantEq(t, "trailer the plugin added to the response", r.Trailers.Value("x-plugin-trailer"), "1")
	wantEq(t, "client's body", string(r.Body), "response body")
}

// TestTrailersWaitForHeldRequest: a request held at its headers (stop-all)
// keeps its body and trailers: nothing reaches the upstream, and the
// trailers reach the plugin only once it resumes the request.
func TestTrailersWaitForHeldRequest(t *testing.T) {
	clk := NewManualClock(time.Unix(0, 0))
	h := newHost(t, WithClock(clk))
	vm := newVM(t, h, "vm0", `{"tick_ms":100}`)
	r := vm.Request(grpcLike("/pause?trailers=hold", Response{})).Must(t)
	if !r.Paused || r.Forwarded || r.UpstreamTrailers != nil || strings.Contains(vm.LogText(), "request trailers held") {
		t.Fatalf("held request: paused %v, forwarded %v, upstream trailers %v; want it all held", r.Paused, r.Forwarded, r.UpstreamTrailers)
	}
	if err := h.AdvanceClock(100 * time.Millisecond); err != nil { // the tick resumes it
		t.Fatal(err)
	}
	r = r.Stream.Result()
	wantEq(t, "trailers callbacks after the resume", strings.Count(vm.LogText(), "request trailers held"), 1)
	if !r.Paused || !r.Forwarded || r.UpstreamTrailers != nil || string(r.UpstreamBody) != "request body" {
		t.Fatalf("resumed: paused %v, forwarded %v, upstream trailers %v; want headers and body on, held at its trailers", r.Paused, r.Forwarded, r.UpstreamTrailers)
	}
	if err := h.AdvanceClock(100 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	r = r.Stream.Finish().Must(t)
	wantEq(t, "upstream trailer after the second resume", r.UpstreamTrailers.Value("x-req-trailer"), "1")
	wantEq(t, "client's grpc-status", r.Trailers.Value("grpc-status"), "0")
}

// TestTrailersContinueStoppedRequest: where the headers stop alone
// (allow_on_headers_stop_iteration) and the body stops, the trailers reach
// the plugin at once, and a Continue for them, also cpp-host's for a
// module without the callback, sends the request on.
func TestTrailersContinueStoppedRequest(t *testing.T) {
	r := newVM(t, newHost(t, WithAllowOnHeadersStopIteration()), "vm0", "").Request(grpcLike("/pause?body=hold", Response{})).Must(t)
	if r.Paused || r.UpstreamTrailers.Value("x-plugin-trailer") != "1" {
		t.Fatalf("body held, trailers continue: paused %v, upstream trailers %v; want the request sent on", r.Paused, r.UpstreamTrailers)
	}
	h := newHostWithout(t, []string{"proxy_on_request_trailers"}, WithAllowOnHeadersStopIteration())
	r = newVM(t, h, "vm0", "").Request(grpcLike("/pause?body=hold", Response{})).Must(t)
	if r.Paused || r.UpstreamTrailers.Value("x-req-trailer") != "1" || r.UpstreamTrailers.Has("x-plugin-trailer") {
		t.Fatalf("body held, no trailers callback: paused %v, upstream trailers %v; want the request sent on", r.Paused, r.UpstreamTrailers)
	}
}

// TestTrailersOfHeldResponse: a response whose body the plugin holds gets
// its trailers delivered; their Continue (the plugin's, or cpp-host's for
// a module without the callback) sends the response, a stop keeps it.
func TestTrailersOfHeldResponse(t *testing.T) {
	vm := newVM(t, newHost(t), "vm0", "")
	r := vm.Request(grpcLike("/x?resp_body=hold&resp_trailers=hold", Response{})).Must(t)
	if r.State != StreamResponsePaused || r.Status != 0 {
		t.Fatalf("body and trailers held: state %v, status %d; want the response held", r.State, r.Status)
	}
	if !strings.Contains(vm.LogText(), "response body held, end_of_stream false") {
		t.Errorf("the body of a response with trailers was not delivered with end_of_stream false:\n%s", vm.LogText())
	}
	r = vm.Request(grpcLike("/x?resp_body=hold", Response{})).Must(t)
	if r.State != StreamClosed || r.Trailers.Value("grpc-status") != "0" {
		t.Fatalf("body held, trailers continue: state %v, trailers %v; want the response sent", r.State, r.Trailers)
	}
	h := newHostWithout(t, []string{"proxy_on_response_trailers"})
	r = newVM(t, h, "vm0", "").Request(grpcLike("/x?resp_body=hold&resp_trailers=hold", Response{})).Must(t)
	if r.State != StreamClosed || r.Trailers.Value("grpc-status") != "0" || r.Trailers.Has("x-plugin-trailer") {
		t.Fatalf("body held, no trailers callback: state %v, trailers %v; want the response sent (cpp-host answers Continue)", r.State, r.Trailers)
	}
}
