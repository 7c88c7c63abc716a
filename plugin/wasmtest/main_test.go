// Package wasmtest runs the compiled plugin, build/sluice.wasm, in the
// wazero-based proxy-wasm host of internal/wasmhost, which follows Envoy's
// semantics (shared data, CAS, pause and resume, local replies) with a clock
// the tests control and several VMs sharing one store, as Envoy's worker
// threads do. These tests prove the artifact that ships, not the Go source
// run natively.
package wasmtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

var pluginWasm []byte

// TestMain runs `make build` and loads build/sluice.wasm. make rebuilds it
// only when a source changed (and trims its exports, see TestExports), so a
// bare `go test ./...` never tests a stale module left by an older build.
func TestMain(m *testing.M) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	path := filepath.Join(root, "build", "sluice.wasm")
	cmd := exec.Command("make", "--no-print-directory", "-s", "build")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the plugin: %v\n%s", err, out)
		os.Exit(1)
	}
	var err error
	if pluginWasm, err = os.ReadFile(path); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// newHost compiles the plugin into a fresh host (its own shared data, a
// manual clock at 2026-01-01).
func newHost(t testing.TB, opts ...wasmhost.Option) *wasmhost.Host {
	t.Helper()
	h, err := wasmhost.New(context.Background(), pluginWasm, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	return h
}

// workers starts n VMs (worker threads) with one plugin configuration.
func workers(t testing.TB, h *wasmhost.Host, n int, cfg string) []*wasmhost.VM {
	t.Helper()
	vms, err := h.NewVMs(n, nil, []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	return vms
}

// get sends a GET from client (an "ip:port" source address) with extra
// headers.
func get(vm *wasmhost.VM, path, client string, headers ...[2]string) *wasmhost.Result {
	return send(vm, "GET", path, client, headers...)
}

func send(vm *wasmhost.VM, method, path, client string, headers ...[2]string) *wasmhost.Result {
	r := wasmhost.HTTPRequest(method, "shop.example", path, headers...)
	r.Properties = wasmhost.Properties{"source.address": client}
	r.Response = &wasmhost.Response{Status: 200, Body: []byte("ok")}
	return vm.Request(r)
}

// healthy fails t if a VM trapped, logged a recovered panic, or the host
// noticed something Envoy would mishandle.
func healthy(t *testing.T, vms ...*wasmhost.VM) {
	t.Helper()
	for _, vm := range vms {
		if err := vm.Failed(); err != nil {
			t.Errorf("vm %d failed: %v", vm.ID(), err)
		}
		for _, w := range vm.Warnings() {
			t.Errorf("vm %d host warning: %s", vm.ID(), w)
		}
		if strings.Contains(vm.LogText(), "internal error") {
			t.Errorf("vm %d recovered from a panic:\n%s", vm.ID(), vm.LogText())
		}
	}
}
