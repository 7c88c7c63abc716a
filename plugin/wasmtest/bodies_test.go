package wasmtest

import (
	"testing"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

// TestResponseBodyAfterReconfiguration: a VM whose first configuration
// needs no response body callback (it answers without looking the stream
// up, plugin/dispatch_wasip1.go) still gives a concurrency rule's slot
// back at the response's end once a configuration with one arrives, as
// Envoy keeps the VM and adds a root context.
func TestResponseBodyAfterReconfiguration(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[{"name":"rate","limit":100,"window":"1s"}]}`)[0]
	if r := get(vm, "/", "10.0.0.1:1"); r.Status != 200 {
		t.Fatalf("first configuration: %d", r.Status)
	}
	if err := vm.Reconfigure([]byte(`{"rules":[{"name":"store","algorithm":"concurrency","limit":1,"key":["path"]}]}`)); err != nil {
		t.Fatal(err)
	}
	a := open(t, vm, "/buy", "10.0.0.1:2")
	if state(a) != wasmhost.StreamUpstream {
		t.Fatalf("first request: %v, want upstream", state(a))
	}
	// The response is complete (with a body) and the stream still open: the
	// slot is free at the body's end, not at the stream's.
	if _, err := a.SendResponse(wasmhost.Response{Status: 200, Body: []byte("ok"), KeepOpen: true}); err != nil {
		t.Fatal(err)
	}
	if b := open(t, vm, "/buy", "10.0.0.1:3"); state(b) != wasmhost.StreamUpstream {
		t.Fatalf("after the first response's end: %v, want upstream (its slot kept until the stream's end)", state(b))
	}
}
