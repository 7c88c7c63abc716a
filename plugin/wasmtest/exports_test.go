package wasmtest

import (
	"slices"
	"testing"

	"github.com/sluicehq/sluice/internal/wasmexports"
)

// TestExports: build/sluice.wasm exports only the callbacks Sluice uses.
// Envoy skips the callbacks a module does not export, and every one it
// calls costs a C++ -> V8 -> Go entry per stream; the stream's end is one
// entry, proxy_on_delete (plugin/streamend_wasip1.go). A module built with
// a bare `go build` fails here: build it with `make build`.
func TestExports(t *testing.T) {
	exps, err := wasmexports.List(pluginWasm)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range exps {
		if e.Kind == 0 {
			got = append(got, e.Name)
		}
	}
	slices.Sort(got)
	want := []string{
		"_initialize", "proxy_abi_version_0_2_0", "proxy_on_configure", "proxy_on_context_create",
		"proxy_on_delete", "proxy_on_http_call_response", "proxy_on_memory_allocate",
		"proxy_on_request_headers", "proxy_on_response_body", "proxy_on_response_headers",
		"proxy_on_tick", "proxy_on_vm_start",
	}
	if !slices.Equal(got, want) {
		t.Errorf("build/sluice.wasm exports the functions\n%v\nwant\n%v\n(build it with `make build`)", got, want)
	}
}
