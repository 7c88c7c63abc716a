package wasmtest

import (
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/capdoc"
	"github.com/sluicehq/sluice/internal/wasmexports"
	"github.com/sluicehq/sluice/internal/wasmhost"
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
		"proxy_on_request_headers", "proxy_on_response_headers",
		"proxy_on_tick", "proxy_on_vm_start",
	}
	if !slices.Equal(got, want) {
		t.Errorf("build/sluice.wasm exports the functions\n%v\nwant\n%v\n(build it with `make build`)", got, want)
	}
}

// TestCapabilitiesDocumented: the capabilities docs/operations.md lists for
// capability_restriction_config are exactly what the module uses: its
// imports (WASI's included: proxy-wasm-cpp-host stubs every import not
// allowed) and its proxy_on_* callbacks (it ignores every callback not
// allowed). e2e TestCapabilityRestriction runs Envoy with that list.
func TestCapabilitiesDocumented(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	doc, err := capdoc.Read(filepath.Join(filepath.Dir(file), "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	imps, err := wasmhost.ModuleImports(pluginWasm)
	if err != nil {
		t.Fatal(err)
	}
	exps, err := wasmexports.List(pluginWasm)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, im := range imps {
		want = append(want, im.Name)
	}
	for _, e := range exps {
		if e.Kind == 0 && strings.HasPrefix(e.Name, "proxy_on_") {
			want = append(want, e.Name)
		}
	}
	slices.Sort(want)
	want = slices.Compact(want)
	got := slices.Sorted(slices.Values(doc))
	if !slices.Equal(got, want) {
		t.Errorf("docs/operations.md (Capability restriction) lists\n%v\nthe module uses\n%v", got, want)
	}
}
