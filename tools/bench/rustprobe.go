package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// The Rust yardstick (tools/bench/testdata/rustprobe) in the callgrind
// section: the same host operations as the Go probe filter, done by a
// minimal Rust proxy-wasm filter (proxy-wasm crate 0.2.5). A host call's
// price in the Rust filter is what Envoy and V8 charge any proxy-wasm
// filter; what the Go probe pays on top of it is Go's (the SDK, buffers
// allocated through proxy_on_memory_allocate in the Go runtime, the GC).
// It is not a part of Sluice: it is counted only when cargo and the
// wasm32-wasip1 target are installed (make bench-cost adds the target when
// rustup is there), and never by make test.

const rustProbeDir = "tools/bench/testdata/rustprobe"

// rustProbeRows are the Rust rows: key, configuration, what it does.
var rustProbeRows = []struct{ key, config, what string }{
	{"rust-noop", "", "no-op Rust filter (proxy-wasm crate 0.2.5)"},
	{"rust-vmctx", "vmctx", "Rust: a 1 s tick"},
	{"rust-clock", "clock", "Rust: one WASI clock_time_get (as Sluice's nowNanos)"},
	{"rust-property", "property", "Rust: get_property(source.address)"},
	{"rust-shared", "shared", "Rust: get_shared_data (288 bytes) + set_shared_data"},
	{"rust-resp3", "resp3", "Rust: 3 response headers replaced"},
	{"rust-all", "vmctx,clock,property,shared,resp3", "Rust: all of the above together (Sluice's admit-path host work)"},
	{"rust-reject", "reject", "Rust: Sluice's reject-path host work (source.address, shared get, clock, local 429 with 4 headers)"},
}

// rustTrimRows are rows of the same filter exporting only the callbacks it
// uses (rustTrimDrop removed), as Sluice's build does with its own module:
// Envoy skips a callback a module does not export, and each entry it makes
// costs thousands of instructions.
var rustTrimRows = []struct{ key, config, what string }{
	{"rust-trim-noop", "", "no-op Rust filter, only the callbacks it uses exported"},
	{"rust-trim-all", "vmctx,clock,property,shared,resp3", "rust-all, only the callbacks it uses exported"},
	{"rust-trim-reject", "reject", "rust-reject, only the callbacks it uses exported"},
}

// rustTrimDrop: every callback of the crate's exports but the VM's and
// plugin's, the context creation and deletion, the request and response
// headers, the tick and the allocator.
var rustTrimDrop = []string{"proxy_on_new_connection", "proxy_on_downstream_data", "proxy_on_downstream_connection_close",
	"proxy_on_upstream_data", "proxy_on_upstream_connection_close", "proxy_on_request_body", "proxy_on_request_trailers",
	"proxy_on_response_body", "proxy_on_response_trailers", "proxy_on_queue_ready", "proxy_on_log", "proxy_on_done",
	"proxy_on_http_call_response", "proxy_on_grpc_close", "proxy_on_grpc_receive", "proxy_on_grpc_receive_initial_metadata",
	"proxy_on_grpc_receive_trailing_metadata", "proxy_on_foreign_function"}

// rustProbeVariants builds the Rust yardstick when some Rust row is wanted
// (only names the -callgrind-only keys; empty: all) and returns its
// variants, or none and a sentence saying why Rust rows are missing.
func rustProbeVariants(ctx context.Context, only string, mk func(key, what string, edit func(*envoytest.Options)) *cgVariant) ([]*cgVariant, string) {
	if only != "" && !strings.Contains(","+strings.ReplaceAll(only, " ", ""), ",rust-") {
		return nil, ""
	}
	wasm, err := buildRustProbe(ctx)
	if err != nil {
		return nil, fmt.Sprintf("The Rust yardstick rows (rust-*) were not counted: %v.", err)
	}
	trim := strings.TrimSuffix(wasm, ".wasm") + "-trim.wasm"
	if err := dropExports(wasm, trim, rustTrimDrop); err != nil {
		return nil, fmt.Sprintf("The Rust yardstick rows (rust-*) were not counted: %v.", err)
	}
	var vs []*cgVariant
	for _, r := range rustProbeRows {
		vs = append(vs, mk(r.key, r.what, func(op *envoytest.Options) {
			op.Wasm = &envoytest.Wasm{File: wasm, Name: "rustprobe", VMID: "rustprobe", Config: r.config}
		}))
	}
	for _, r := range rustTrimRows {
		vs = append(vs, mk(r.key, r.what, func(op *envoytest.Options) {
			op.Wasm = &envoytest.Wasm{File: trim, Name: "rustprobe", VMID: "rustprobe", Config: r.config}
		}))
	}
	return vs, ""
}

// buildRustProbe builds the Rust yardstick (cargo's target directory under
// build/, which git ignores) and returns the module's absolute path.
func buildRustProbe(ctx context.Context) (string, error) {
	if _, err := exec.LookPath("cargo"); err != nil {
		return "", fmt.Errorf("cargo is not installed")
	}
	if out, err := exec.CommandContext(ctx, "rustc", "--print", "sysroot").Output(); err == nil {
		lib := filepath.Join(strings.TrimSpace(string(out)), "lib", "rustlib", "wasm32-wasip1")
		if _, err := os.Stat(lib); err != nil {
			return "", fmt.Errorf("the Rust target wasm32-wasip1 is not installed (`rustup target add wasm32-wasip1`)")
		}
	}
	target, err := filepath.Abs("build/rustprobe")
	if err != nil {
		return "", err
	}
	progress("building the Rust yardstick (%s)", rustProbeDir)
	cmd := exec.CommandContext(ctx, "cargo", "build", "--release", "--locked", "--target", "wasm32-wasip1",
		"--manifest-path", filepath.Join(rustProbeDir, "Cargo.toml"), "--target-dir", target)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("cargo build of %s failed: %v: %s", rustProbeDir, err, strings.ReplaceAll(lastLines(buf.String(), 5), "\n", " / "))
	}
	return filepath.Join(target, "wasm32-wasip1", "release", "rustprobe.wasm"), nil
}

// rustReport compares the Go probe's and the Rust yardstick's price of each
// host operation, split into V8-compiled code (the guest, V8's wasm-to-C++
// stubs) and Envoy's binary plus libraries (V8's runtime, the proxy-wasm
// host, Envoy), and the best a proxy-wasm filter does against the native
// filter. note says why Rust rows are missing, if they are.
func rustReport(vs []*cgVariant, note string) string {
	by := map[string]*cgVariant{}
	for _, v := range vs {
		by[v.key] = v
	}
	var b strings.Builder
	b.WriteString("\n### Go against a Rust proxy-wasm filter: what is intrinsic to proxy-wasm in Envoy/V8\n\n")
	if note != "" {
		b.WriteString(note + "\n")
		return b.String()
	}
	anyRust := false
	for key := range by {
		anyRust = anyRust || strings.HasPrefix(key, "rust-")
	}
	if !anyRust {
		b.WriteString("No Rust row was counted (name rust-* keys in -callgrind-only).\n")
		return b.String()
	}
	k := func(n float64) string { return fmt.Sprintf("%.1f k", n/1000) }
	split := func(a, base *cgVariant) (total, jit, host float64) {
		j1, e1, l1 := groupCosts(a)
		j0, e0, l0 := groupCosts(base)
		return a.ir - base.ir, j1 - j0, (e1 + l1) - (e0 + l0)
	}
	b.WriteString("Each operation's price is its probe minus the same language's no-op filter; \"guest\" is V8-compiled code " +
		"(the wasm module and V8's stubs between wasm and C++), \"host\" is Envoy's binary and the libraries " +
		"(V8's runtime, the proxy-wasm host, Envoy).\n\n")
	b.WriteString("| operation | Go probe: total (guest / host) | Rust: total (guest / host) | Go minus Rust |\n|---|---:|---:|---:|\n")
	row := func(what, gk, gbase, rk, rbase string) {
		g, g0, r, r0 := by[gk], by[gbase], by[rk], by[rbase]
		gs, rs, ds := "", "", ""
		var gt, rt float64
		if g != nil && g0 != nil {
			t, j, h := split(g, g0)
			gt, gs = t, fmt.Sprintf("%s (%s / %s)", k(t), k(j), k(h))
		}
		if r != nil && r0 != nil {
			t, j, h := split(r, r0)
			rt, rs = t, fmt.Sprintf("%s (%s / %s)", k(t), k(j), k(h))
		}
		if gs == "" || rs == "" {
			return // one side was not counted
		}
		ds = fmt.Sprintf("%+.1f k", (gt-rt)/1000)
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", what, gs, rs, ds)
	}
	row("no-op filter, over no filter", "noop", "none", "rust-noop", "none")
	row("a 1 s tick (vmctx)", "vmctx", "noop", "rust-vmctx", "rust-noop")
	row("clock (Go: time.Now, 2 WASI clock reads; Rust: 1)", "clock", "noop", "rust-clock", "rust-noop")
	row("source.address", "property", "noop", "rust-property", "rust-noop")
	row("shared get 288 B + CAS set", "shared", "noop", "rust-shared", "rust-noop")
	row("3 response headers", "resp3", "noop", "rust-resp3", "rust-noop")
	row("all together (Go adds recover and a 300-byte allocation)", "all", "noop", "rust-all", "rust-noop")
	row("Sluice admitted, against the probes doing its host work", "sluice", "noop", "rust-all", "rust-noop")
	row("no-op, only the callbacks used exported (Go: noop-min), over no filter", "noop-min", "none", "rust-trim-noop", "none")
	row("Sluice admitted (its build exports only what it uses), against the trimmed Rust filter, each over no filter", "sluice", "none", "rust-trim-all", "none")
	b.WriteString("\n")
	ratio := func(what, num, den string) {
		n, d := by[num], by[den]
		if n == nil || d == nil {
			return
		}
		fmt.Fprintf(&b, "- %s: %s / %s instructions, ratio %.2f\n", what, k(n.ir), k(d.ir), n.ir/d.ir)
	}
	ratio("native / Rust filter doing Sluice's admit-path host work (the best a proxy-wasm filter doing this work reaches here)", "native", "rust-all")
	ratio("native / Rust filter doing Sluice's reject-path host work", "native-reject", "rust-reject")
	ratio("native / the same Rust filter exporting only the callbacks it uses, admit path", "native", "rust-trim-all")
	ratio("native / the same Rust filter exporting only the callbacks it uses, reject path", "native-reject", "rust-trim-reject")
	ratio("trimmed Rust admit-path filter / Sluice admitted", "rust-trim-all", "sluice")
	ratio("trimmed Rust reject-path filter / Sluice rejected", "rust-trim-reject", "sluice-reject")
	ratio("trimmed Rust no-op / trimmed Rust admit-path filter (the Sluice / no-op target's floor)", "rust-trim-noop", "rust-trim-all")
	ratio("native / Go probe doing Sluice's reject-path host work", "native-reject", "probe-reject")
	ratio("Rust admit-path filter / Sluice admitted", "rust-all", "sluice")
	ratio("Rust reject-path filter / Sluice rejected", "rust-reject", "sluice-reject")
	ratio("Go reject-path probe / Sluice rejected", "probe-reject", "sluice-reject")
	ratio("no-op Rust filter / no-op Go filter", "rust-noop", "noop")
	return b.String()
}
