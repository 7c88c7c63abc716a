package wasmtest

// The plugin's own bookkeeping of streams (plugin/streams.go,
// plugin/dispatch_wasip1.go) beside the SDK's: a configuration without
// global rules keeps its streams in the plugin's table, one with global
// rules in the SDK's maps (its calls to the service are routed by them).

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

const globalOnlyConfig = `{"rules":[{"name":"g","scope":"global","key":["header:x-client"],"limit":1000,"window":"1h"}],
	"global":{"cluster":"ratelimit","timeout":"500ms"}}`

// TestStreamsOfBothKindsInOneVM: a VM whose configuration without global
// rules is updated to one with them (Envoy keeps the old plugin while its
// streams finish) runs streams of both at once: the old one's streams,
// opened before and after the update's first call, end normally, and the
// new one's calls to the service reach their streams, also after a stream
// of the other kind ended in between. Then back to a local configuration
// while streams of the global one wait.
func TestStreamsOfBothKindsInOneVM(t *testing.T) {
	h := newHost(t, wasmhost.WithClusters("ratelimit"))
	vm := workers(t, h, 1, `{"rules":[{"name":"a","limit":3,"window":"1h"}]}`)[0]
	open := func(client string) *wasmhost.Stream {
		t.Helper()
		s, err := vm.NewStream(wasmhost.Properties{"source.address": client})
		if err != nil {
			t.Fatal(err)
		}
		r := wasmhost.HTTPRequest("GET", "shop.example", "/", [2]string{"x-client", client})
		if _, err := s.SendRequestHeaders(r.Headers, true); err != nil {
			t.Fatal(err)
		}
		return s
	}
	finish := func(s *wasmhost.Stream, what string) {
		t.Helper()
		if s.State() != wasmhost.StreamUpstream {
			t.Fatalf("%s: state %v before its response, want it forwarded", what, s.State())
		}
		if _, err := s.SendResponse(wasmhost.Response{Status: 200, Body: []byte("ok")}); err != nil {
			t.Fatal(err)
		}
		if res := s.Result(); res.Status != 200 || s.State() != wasmhost.StreamClosed {
			t.Fatalf("%s: status %d, state %v; want 200 and closed", what, res.Status, s.State())
		}
	}
	local := open("10.0.0.1:1")
	if err := vm.Reconfigure([]byte(globalOnlyConfig)); err != nil {
		t.Fatal(err)
	}
	var pending []*wasmhost.Stream
	for i := range 3 {
		s := open(fmt.Sprintf("10.0.1.%d:1", i+1))
		if s.State() != wasmhost.StreamPaused {
			t.Fatalf("global stream %d: state %v, want it waiting for the service", i, s.State())
		}
		pending = append(pending, s)
	}
	finish(local, "the local configuration's stream")
	calls := vm.HTTPCalls()
	if len(calls) != 3 {
		t.Fatalf("%d calls pending, want 3", len(calls))
	}
	for i, c := range calls {
		if err := vm.RespondHTTPCall(c.Token, rlsOK); err != nil {
			t.Fatal(err)
		}
		finish(pending[i], fmt.Sprintf("global stream %d", i))
	}

	// Back to a local configuration while a global stream waits for its
	// call and another one has not sent its request yet: the answers go to
	// the root that made the calls (Envoy's, and the wasmhost's), a root
	// created after one with global rules owns its streams again.
	waiting := open("10.0.1.9:1")
	late, err := vm.NewStream(wasmhost.Properties{"source.address": "10.0.1.10:1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := vm.Reconfigure([]byte(`{"rules":[{"name":"b","limit":1,"window":"1h"}]}`)); err != nil {
		t.Fatal(err)
	}
	// The late stream's call right after the update, before any callback
	// of the old root's.
	r := wasmhost.HTTPRequest("GET", "shop.example", "/", [2]string{"x-client", "late"})
	if _, err := late.SendRequestHeaders(r.Headers, true); err != nil {
		t.Fatal(err)
	}
	admitted := open("10.0.2.1:1")
	refused := open("10.0.2.1:1")
	if lr := refused.LocalResponse(); lr == nil || lr.Status != 429 || refused.State() != wasmhost.StreamClosed {
		t.Fatalf("second request of a client over rule b's limit: %+v, state %v; want a 429, closed", lr, refused.State())
	}
	finish(admitted, "the new local configuration's stream")
	calls = vm.HTTPCalls()
	if len(calls) != 2 {
		t.Fatalf("%d calls pending, want 2", len(calls))
	}
	for _, c := range calls {
		if err := vm.RespondHTTPCall(c.Token, rlsOK); err != nil {
			t.Fatal(err)
		}
	}
	finish(waiting, "the global stream answered after the update")
	finish(late, "the global stream whose request came after the update")
	if n := len(vm.OpenStreams()); n != 0 {
		t.Errorf("%d streams still open", n)
	}
	healthy(t, vm)
}
