package wasmhost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/tetratelabs/wazero"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmexports"
)

// testWasm is testdata/testplugin compiled for wasip1 in TestMain.
var testWasm []byte

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "wasmhost-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	out := filepath.Join(dir, "testplugin.wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, "./testdata/testplugin")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the test plugin:", err)
		os.Exit(1)
	}
	testWasm, err = os.ReadFile(out)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Compiled modules are kept on disk (build/wazero-cache) between runs:
	// `make unit` runs these tests a second time under -race, where
	// wazero's compiler, plain Go code, is several times slower.
	if c, err := wazero.NewCompilationCacheWithDir(filepath.Join("..", "..", "build", "wazero-cache")); err == nil {
		defaultCache = c
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func newHost(t testing.TB, opts ...Option) *Host {
	t.Helper()
	return newHostOf(t, testWasm, opts...)
}

// newHostWithout is newHost on the test module without the exports drop,
// as `make build` drops exports from the plugin.
func newHostWithout(t testing.TB, drop []string, opts ...Option) *Host {
	t.Helper()
	mod, err := wasmexports.Edit(testWasm, drop, nil)
	if err != nil {
		t.Fatal(err)
	}
	return newHostOf(t, mod, opts...)
}

func newHostOf(t testing.TB, mod []byte, opts ...Option) *Host {
	t.Helper()
	h, err := New(context.Background(), mod, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	return h
}

func newVM(t testing.TB, h *Host, vmConfig, pluginConfig string) *VM {
	t.Helper()
	vm, err := h.NewVM([]byte(vmConfig), []byte(pluginConfig))
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

func get(path string) Request {
	return Request{Headers: Headers{
		{":method", "GET"}, {":path", path}, {":authority", "example.com"}, {":scheme", "http"},
	}}
}

func hdr(t *testing.T, r *Result, name string) string {
	t.Helper()
	v, ok := r.Headers.Get(name)
	if !ok {
		t.Fatalf("response has no %q header; headers: %v", name, r.Headers)
	}
	return v
}

func wantEq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// --- imports -----------------------------------------------------------------

func TestEnvoyImportList(t *testing.T) {
	info, err := ParseModule(testWasm)
	if err != nil {
		t.Fatal(err)
	}
	wantEq(t, "ABI of a Go SDK module", info.ABI, ABI020)

	provided := map[string]Import{}
	for _, imp := range EnvoyImports(ABI020) {
		provided[imp.QualifiedName()] = imp
	}
	imports, err := ModuleImports(testWasm)
	if err != nil {
		t.Fatal(err)
	}
	if len(imports) < 10 {
		t.Fatalf("only %d imports parsed", len(imports))
	}
	for _, imp := range imports {
		p, ok := provided[imp.QualifiedName()]
		if !ok {
			t.Errorf("the test plugin imports %s, which Envoy does not provide", imp)
			continue
		}
		if p.Signature() != imp.Signature() {
			t.Errorf("%s: Envoy provides %s", imp, p.Signature())
		}
	}
	problems, err := CheckEnvoyImports(testWasm)
	if err != nil || len(problems) != 0 {
		t.Fatalf("CheckEnvoyImports = %v, %v", problems, err)
	}

	names := func(abi ABIVersion) map[string]Import {
		m := map[string]Import{}
		for _, imp := range EnvoyImports(abi) {
			m[imp.QualifiedName()] = imp
		}
		return m
	}
	v020, v021 := names(ABI020), names(ABI021)
	if _, ok := v020["env.proxy_get_log_level"]; ok {
		t.Error("ABI 0.2.0 must not get proxy_get_log_level (cpp-host registers it for 0.2.1 only)")
	}
	if _, ok := v021["env.proxy_get_log_level"]; !ok {
		t.Error("ABI 0.2.1 must get proxy_get_log_level")
	}
	for _, n := range []string{"env.proxy_get_configuration", "env.proxy_continue_request", "env.proxy_clear_route_cache"} {
		if _, ok := v021[n]; ok {
			t.Errorf("%s is ABI 0.1.0 only", n)
		}
	}
	// The WASI set of cpp-host PR #427/#533, under both module names.
	for _, n := range []string{"sched_yield", "poll_oneoff", "fd_fdstat_get", "fd_fdstat_set_flags", "random_get",
		"clock_time_get", "clock_res_get", "environ_get", "args_get", "proc_exit", "fd_prestat_get",
		"fd_prestat_dir_name", "path_open", "fd_pwrite", "sock_shutdown"} {
		for _, m := range []string{"wasi_snapshot_preview1.", "wasi_unstable."} {
			if _, ok := v020[m+n]; !ok {
				t.Errorf("%s%s missing", m, n)
			}
		}
	}
	if got := v020["wasi_snapshot_preview1.path_link"].Signature(); got != "(i32,i32,i32,i32,i32,i32)->i32" {
		t.Errorf("path_link signature %s (cpp-host declares 6 Word params)", got)
	}
	if got := v020["env.proxy_increment_metric"].Signature(); got != "(i32,i64)->i32" {
		t.Errorf("proxy_increment_metric signature %s", got)
	}
	if got := v020["wasi_snapshot_preview1.proc_exit"].Signature(); got != "(i32)->()" {
		t.Errorf("proc_exit signature %s", got)
	}
}

// wasmModule hand-assembles a module with the given function imports and
// exported no-op functions.
func wasmModule(imports []Import, exports ...string) []byte {
	leb := func(b []byte, v uint32) []byte {
		for {
			c := byte(v & 0x7f)
			v >>= 7
			if v != 0 {
				b = append(b, c|0x80)
				continue
			}
			return append(b, c)
		}
	}
	str := func(b []byte, s string) []byte { return append(leb(b, uint32(len(s))), s...) }
	section := func(out []byte, id byte, body []byte) []byte {
		out = append(out, id)
		out = leb(out, uint32(len(body)))
		return append(out, body...)
	}
	var types []byte
	types = leb(types, uint32(len(imports)+1))
	for _, imp := range imports {
		types = append(types, 0x60)
		types = leb(types, uint32(len(imp.Params)))
		for _, p := range imp.Params {
			types = append(types, byte(p))
		}
		types = leb(types, uint32(len(imp.Results)))
		for _, r := range imp.Results {
			types = append(types, byte(r))
		}
	}
	types = append(types, 0x60, 0, 0) // ()->() for the exports
	var imps []byte
	imps = leb(imps, uint32(len(imports)))
	for i, imp := range imports {
		imps = str(imps, imp.Module)
		imps = str(imps, imp.Name)
		imps = append(imps, 0)
		imps = leb(imps, uint32(i))
	}
	var funcs, exps, code []byte
	funcs = leb(funcs, uint32(len(exports)))
	exps = leb(exps, uint32(len(exports)))
	code = leb(code, uint32(len(exports)))
	for i, e := range exports {
		funcs = leb(funcs, uint32(len(imports)))
		exps = str(exps, e)
		exps = append(exps, 0)
		exps = leb(exps, uint32(len(imports)+i))
		code = append(code, 2, 0, 0x0b)
	}
	out := []byte("\x00asm\x01\x00\x00\x00")
	out = section(out, 1, types)
	out = section(out, 2, imps)
	out = section(out, 3, funcs)
	out = section(out, 7, exps)
	out = section(out, 10, code)
	return out
}

func TestNewRefusesWhatEnvoyRefuses(t *testing.T) {
	i32 := func(n int) []ValueType {
		p := make([]ValueType, n)
		for i := range p {
			p[i] = I32
		}
		return p
	}
	fn := func(module, name string, params []ValueType, results ...ValueType) Import {
		return Import{Module: module, Name: name, Kind: KindFunc, Params: params, Results: results}
	}
	logImp := fn("env", "proxy_log", i32(3), I32)
	cases := []struct {
		name    string
		wasm    []byte
		wantErr string
	}{
		{"no ABI version", wasmModule([]Import{logImp}, "proxy_on_memory_allocate"), "Missing or unknown Proxy-Wasm ABI version"},
		{"unknown import", wasmModule([]Import{fn("env", "proxy_no_such_call", i32(1), I32)}, "proxy_abi_version_0_2_1", "proxy_on_memory_allocate"),
			"env.proxy_no_such_call(i32)->i32: missing import"},
		{"0.2.1-only import in a 0.2.0 module", wasmModule([]Import{fn("env", "proxy_get_log_level", i32(1), I32)}, "proxy_abi_version_0_2_0", "proxy_on_memory_allocate"),
			"env.proxy_get_log_level(i32)->i32: missing import"},
		{"WASI preview1 path_link signature", wasmModule([]Import{fn("wasi_snapshot_preview1", "path_link", i32(7), I32)}, "proxy_abi_version_0_2_1", "proxy_on_memory_allocate"),
			"import type mismatch, Envoy provides (i32,i32,i32,i32,i32,i32)->i32"},
		{"WASI function cpp-host lacks", wasmModule([]Import{fn("wasi_snapshot_preview1", "sock_open", i32(3), I32)}, "proxy_abi_version_0_2_1", "proxy_on_memory_allocate"),
			"wasi_snapshot_preview1.sock_open"},
		{"provided by Envoy but not by this host", wasmModule([]Import{fn("env", "proxy_grpc_call", i32(12), I32)}, "proxy_abi_version_0_2_1", "proxy_on_memory_allocate"),
			"env.proxy_grpc_call, which Envoy provides but this host does not implement"},
		{"no allocator", wasmModule([]Import{logImp}, "proxy_abi_version_0_2_1"), "missing malloc function"},
		{"ABI 0.1.0", wasmModule([]Import{logImp}, "proxy_abi_version_0_1_0", "malloc"), "0.1.0 is not supported"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(context.Background(), c.wasm)
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("New error = %v, want it to contain %q", err, c.wantErr)
			}
		})
	}
	problems, err := CheckEnvoyImports(cases[1].wasm)
	if err != nil || len(problems) != 1 || problems[0].Reason != "missing" {
		t.Fatalf("CheckEnvoyImports = %v, %v", problems, err)
	}
}

// --- shared data ---------------------------------------------------------------

func TestSharedDataStoreSemantics(t *testing.T) {
	s := NewSharedData()
	if _, _, ok := s.Get("", "k"); ok {
		t.Fatal("empty store has k")
	}
	wantEq(t, "set missing key, cas 0", s.Set("", "k", []byte("v1"), 0), StatusOK)
	v, c1, ok := s.Get("", "k")
	if !ok || string(v) != "v1" || c1 != 1 {
		t.Fatalf("get = %q %d %v, want v1 1 true (the CAS counter starts at 1)", v, c1, ok)
	}
	wantEq(t, "set existing key, cas 0 (unconditional)", s.Set("", "k", []byte("v2"), 0), StatusOK)
	_, c2, _ := s.Get("", "k")
	wantEq(t, "cas after second set", c2, c1+1)
	wantEq(t, "set with stale cas", s.Set("", "k", []byte("v3"), c1), StatusCasMismatch)
	v, _, _ = s.Get("", "k")
	wantEq(t, "value after mismatch", string(v), "v2")
	wantEq(t, "set with current cas", s.Set("", "k", []byte("v3"), c2), StatusOK)
	wantEq(t, "set missing key with an arbitrary cas", s.Set("", "fresh", []byte("x"), 12345), StatusOK)
	_, cf, _ := s.Get("", "fresh")
	wantEq(t, "cas is one global counter", cf, c2+2)

	// Namespaces: same key, other vm_id.
	wantEq(t, "other vm_id", s.Set("other", "k", []byte("o"), 0), StatusOK)
	v, _, _ = s.Get("", "k")
	wantEq(t, "vm_id namespaces are separate", string(v), "v3")
	wantEq(t, "Len", s.Len(), 3)
	wantEq(t, "Bytes", s.Bytes(), len("k")+len("v3")+len("fresh")+len("x")+len("k")+len("o"))

	// No delete: an empty value keeps the key.
	wantEq(t, "set empty value", s.Set("", "k", nil, 0), StatusOK)
	v, _, ok = s.Get("", "k")
	if !ok || len(v) != 0 {
		t.Fatalf("empty value: got %q %v, want empty and present", v, ok)
	}
	wantEq(t, "Len after empty set", s.Len(), 3)

	// Values are copied in and out.
	in := []byte("abc")
	s.Set("", "copy", in, 0)
	in[0] = 'Z'
	out, _, _ := s.Get("", "copy")
	out[1] = 'Y'
	again, _, _ := s.Get("", "copy")
	wantEq(t, "stored value", string(again), "abc")

	// Wrap-around skips 0.
	s.SetNextCAS(0xFFFFFFFF)
	s.Set("", "wrap", []byte("1"), 0)
	_, cw, _ := s.Get("", "wrap")
	wantEq(t, "cas before wrap", cw, uint32(0xFFFFFFFF))
	s.Set("", "wrap", []byte("2"), cw)
	_, cw, _ = s.Get("", "wrap")
	wantEq(t, "cas after wrap skips 0", cw, uint32(1))
	wantEq(t, "NextCAS", s.NextCAS(), uint32(2))

	snap := s.Snapshot()
	var keys []string
	for _, e := range snap {
		keys = append(keys, e.VMID+"/"+e.Key)
	}
	wantEq(t, "snapshot order", strings.Join(keys, ","), "/copy,/fresh,/k,/wrap,other/k")
}

// sharedOp runs a /shared/* request and returns x-status, x-value, x-cas.
func sharedOp(t *testing.T, vm *VM, path string) (status, value string, cas uint32) {
	t.Helper()
	r := vm.Request(get(path)).Must(t)
	c, _ := strconv.ParseUint(r.Headers.Value("x-cas"), 10, 32)
	return hdr(t, r, "x-status"), r.Headers.Value("x-value"), uint32(c)
}

func TestSharedDataThroughPlugin(t *testing.T) {
	h := newHost(t, WithVMID("sluice"))
	vm := newVM(t, h, "vm0", "")

	st, _, cas := sharedOp(t, vm, "/shared/get?key=k")
	if st != "not_found" || cas != 0 {
		t.Fatalf("get missing = %s cas %d", st, cas)
	}
	st, _, _ = sharedOp(t, vm, "/shared/set?key=k&value=a&cas=0")
	wantEq(t, "set new key", st, "ok")
	st, v, c1 := sharedOp(t, vm, "/shared/get?key=k")
	if st != "ok" || v != "a" || c1 == 0 {
		t.Fatalf("get = %s %q %d", st, v, c1)
	}
	_, storeCAS, _ := h.SharedValue("k")
	wantEq(t, "CAS the plugin sees = store CAS", c1, storeCAS)

	// Unlike the SDK's proxytest emulator, Envoy accepts cas=0 on an existing key.
	st, _, _ = sharedOp(t, vm, "/shared/set?key=k&value=b&cas=0")
	wantEq(t, "cas=0 on an existing key", st, "ok")
	_, _, c2 := sharedOp(t, vm, "/shared/get?key=k")
	wantEq(t, "cas after unconditional set", c2, c1+1)

	st, _, _ = sharedOp(t, vm, fmt.Sprintf("/shared/set?key=k&value=c&cas=%d", c1))
	wantEq(t, "stale cas", st, "cas_mismatch")
	_, v, _ = sharedOp(t, vm, "/shared/get?key=k")
	wantEq(t, "value kept after mismatch", v, "b")
	st, _, _ = sharedOp(t, vm, fmt.Sprintf("/shared/set?key=k&value=c&cas=%d", c2))
	wantEq(t, "current cas", st, "ok")

	st, _, _ = sharedOp(t, vm, "/shared/set?key=fresh&value=z&cas=777")
	wantEq(t, "missing key with any cas", st, "ok")

	st, _, _ = sharedOp(t, vm, "/shared/set?key=k&value=&cas=0")
	wantEq(t, "empty value", st, "ok")
	wantEq(t, "keys (no delete)", h.SharedData().Len(), 2)
	got, _, ok := h.SharedValue("k")
	if !ok || len(got) != 0 {
		t.Fatalf("k = %q %v after empty set", got, ok)
	}
	for _, e := range h.SharedData().Snapshot() {
		wantEq(t, "namespace", e.VMID, "sluice")
	}
}

func TestSharedDataTwoVMs(t *testing.T) {
	h := newHost(t)
	a, b := newVM(t, h, "A", ""), newVM(t, h, "B", "")

	// Both workers see the key missing and create it: both succeed.
	for _, vm := range []*VM{a, b} {
		st, _, cas := sharedOp(t, vm, "/shared/get?key=race")
		if st != "not_found" || cas != 0 {
			t.Fatalf("vm%d get = %s %d", vm.ID(), st, cas)
		}
	}
	st, _, _ := sharedOp(t, a, "/shared/set?key=race&value=fromA&cas=0")
	wantEq(t, "A creates", st, "ok")
	st, _, _ = sharedOp(t, b, "/shared/set?key=race&value=fromB&cas=0")
	wantEq(t, "B creates too", st, "ok")
	v, _, _ := h.SharedValue("race")
	wantEq(t, "last writer wins", string(v), "fromB")

	// Both read the same CAS; the first set wins, the second mismatches.
	_, _, ca := sharedOp(t, a, "/shared/get?key=race")
	_, _, cb := sharedOp(t, b, "/shared/get?key=race")
	wantEq(t, "both VMs see one CAS", ca, cb)
	st, _, _ = sharedOp(t, a, fmt.Sprintf("/shared/set?key=race&value=A2&cas=%d", ca))
	wantEq(t, "A with current cas", st, "ok")
	st, _, _ = sharedOp(t, b, fmt.Sprintf("/shared/set?key=race&value=B2&cas=%d", cb))
	wantEq(t, "B with now-stale cas", st, "cas_mismatch")

	// The CAS counter is global: a set on another key from the other VM
	// gets the next value.
	_, _, last := sharedOp(t, a, "/shared/get?key=race")
	sharedOp(t, b, "/shared/set?key=other&value=1&cas=0")
	_, _, co := sharedOp(t, b, "/shared/get?key=other")
	wantEq(t, "global CAS counter", co, last+1)
}

func TestSharedDataFourVMsConcurrently(t *testing.T) {
	h := newHost(t)
	const perVM = 40
	vms := make([]*VM, 4)
	for i := range vms {
		vms[i] = newVM(t, h, fmt.Sprintf("vm%d", i), "")
	}
	var wg sync.WaitGroup
	attempts := make([]int, len(vms))
	errs := make(chan error, len(vms)*perVM)
	stop := make(chan struct{})
	go func() { // inspect the store while the VMs run
		for {
			select {
			case <-stop:
				return
			default:
				_ = h.SharedData().Len()
				_ = h.SharedData().Snapshot()
			}
		}
	}()
	for i, vm := range vms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perVM {
				r := vm.Request(get("/shared/incr?key=counter"))
				if r.Err != nil || r.Headers.Value("x-status") != "ok" {
					errs <- fmt.Errorf("vm%d: %v %v", vm.ID(), r.Err, r.Headers)
					return
				}
				n, _ := strconv.Atoi(r.Headers.Value("x-attempts"))
				attempts[i] += n
			}
		}()
	}
	wg.Wait()
	close(stop)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	v, _, _ := h.SharedValue("counter")
	wantEq(t, "counter", string(v), strconv.Itoa(4*perVM))
	total := 0
	for _, n := range attempts {
		total += n
	}
	if total < 4*perVM {
		t.Fatalf("attempts %d < %d", total, 4*perVM)
	}
	t.Logf("%d increments took %d CAS attempts", 4*perVM, total)
}

// --- HTTP streams ------------------------------------------------------------

func TestHeaders(t *testing.T) {
	h := newHost(t)
	vm := newVM(t, h, "vm0", "")
	r := vm.Request(Request{
		Headers: Headers{
			{":method", "POST"}, {":path", "/headers"}, {":authority", "example.com"}, {":scheme", "https"},
			{"X-Dup", "a"}, {"x-dup", "b"}, {"x-replace", "old"}, {"x-remove", "1"},
		},
		Body: []byte("hello"),
		Response: &Response{Status: 201, Headers: Headers{
			{"server", "upstream"}, {"x-upstream-secret", "s"}, {"content-type", "text/plain"},
		}, Body: []byte("world")},
	}).Must(t)

	wantEq(t, "action", r.Action, Continue)
	wantEq(t, "forwarded", r.Forwarded, true)
	wantEq(t, "state", r.State, StreamClosed)
	wantEq(t, "upstream request", fmt.Sprint(r.UpstreamRequest),
		fmt.Sprint(Headers{{":method", "POST"}, {":path", "/headers"}, {":authority", "example.com"}, {":scheme", "https"},
			{"x-dup", "a"}, {"x-dup", "b"}, {"x-replace", "new"}, {"x-added", "1"}}))
	wantEq(t, "upstream body", string(r.UpstreamBody), "hello")
	wantEq(t, "request ops", fmt.Sprint(r.RequestHeaderOps), fmt.Sprint([]HeaderOp{
		{Map: MapRequestHeaders, Op: "add", Name: "x-added", Value: "1"},
		{Map: MapRequestHeaders, Op: "replace", Name: "x-replace", Value: "new"},
		{Map: MapRequestHeaders, Op: "remove", Name: "x-remove"},
	}))

	wantEq(t, "status", r.Status, 201)
	wantEq(t, "body", string(r.Body), "world")
	wantEq(t, "server", hdr(t, r, "server"), "sluice-test")
	if r.Headers.Has("x-upstream-secret") {
		t.Error("x-upstream-secret was not removed")
	}
	for name, want := range map[string]string{
		"x-plugin-saw-status":             "201",
		"x-request-header-count":          "8",
		"x-num-headers-arg":               "8",
		"x-end-of-stream-arg":             "false", // there is a body
		"x-first-request-header":          ":method",
		"x-missing-header":                "not_found",
		"x-dup-first":                     "a", // Envoy returns the first value
		"x-response-map-in-request-phase": "bad_argument",
		"x-request-map-in-response-phase": "bad_argument", // request headers are gone once forwarded
		"x-resp-num-headers-arg":          "4",
		"x-resp-end-of-stream-arg":        "false",
	} {
		wantEq(t, name, hdr(t, r, name), want)
	}
	var respOps []string
	for _, op := range r.ResponseHeaderOps {
		respOps = append(respOps, op.Op+" "+op.Name)
	}
	if s := strings.Join(respOps, ","); !strings.Contains(s, "replace server,remove x-upstream-secret") {
		t.Errorf("response ops %s", s)
	}
	if !strings.Contains(vm.LogText(), fmt.Sprintf("stream done: %d /headers (request headers in log: ok)", r.ContextID)) {
		t.Errorf("on_log did not run or could not read the request headers:\n%s", vm.LogText())
	}
}

func TestHeaderMapSemantics(t *testing.T) {
	m := newHeaderMap(Headers{{"X-A", "1"}, {":path", "/"}, {"x-b", "2"}, {"x-a", "3"}})
	wantEq(t, "pseudo-headers first, names lowercased", fmt.Sprint(m.kv), fmt.Sprint(Headers{{":path", "/"}, {"x-a", "1"}, {"x-b", "2"}, {"x-a", "3"}}))
	m.add(":method", "GET")
	wantEq(t, "pseudo inserted after pseudo", m.kv[1][0], ":method")
	m.replace("X-A", "9")
	wantEq(t, "replace changes the first entry only", fmt.Sprint(m.kv.Values("x-a")), "[9 3]")
	m.replace("x-new", "n")
	wantEq(t, "replace adds a missing header", m.kv[len(m.kv)-1][1], "n")
	m.remove("x-a")
	wantEq(t, "remove drops every entry", m.kv.Has("x-a"), false)
	v, ok := m.get("X-B")
	wantEq(t, "get is case-insensitive", v+strconv.FormatBool(ok), "2true")
	wantEq(t, "byteSize", m.byteSize(), len(":path/:methodGETx-b2x-newn"))

	h := Headers{{"a", "1"}, {"bb", ""}, {"", "x"}}
	b := make([]byte, pairsSize(h))
	marshalPairs(b, h)
	wantEq(t, "round trip", fmt.Sprint(unmarshalPairs(b)), fmt.Sprint(h))
	wantEq(t, "spec example size", pairsSize(Headers{{"a", "1"}, {"b", "22"}}), 4+16+4+5)
	if unmarshalPairs(b[:len(b)-1]) != nil || unmarshalPairs([]byte{1, 0}) != nil {
		t.Error("malformed pairs must read as an empty map")
	}
}

func TestProperties(t *testing.T) {
	h := newHost(t, WithVMID("vm-a"), WithPluginName("sluice"), WithRootID("root"),
		WithProperties(Properties{"node.id": "node-1"}))
	vm := newVM(t, h, "vm0", "")
	req := get("/props?x=1")
	req.Properties = Properties{
		"source.address":    "10.0.0.1:5555",
		"source.port":       PropertyInt64(5555),
		"xds\x00route_name": "r1", // wire form works too
		PropertyPath("metadata", "filter.name.with.dots", "key"): "dotted",
	}
	r := vm.Request(req).Must(t)
	for name, want := range map[string]string{
		"x-prop-source-address":           "10.0.0.1:5555",
		"x-prop-source-port":              "5555",
		"x-prop-xds-route_name":           "r1",
		"x-prop-plugin_vm_id":             "vm-a",
		"x-prop-plugin_name":              "sluice",
		"x-prop-plugin_root_id":           "root",
		"x-prop-request-path":             "/props?x=1",
		"x-prop-request-url_path":         "/props",
		"x-prop-node-id":                  "node-1",
		"x-prop-no-such-property":         "<not_found>",
		"x-prop-sluice_custom":            "<not_found>",
		"x-set-property":                  "ok",
		"x-prop-after-set":                "set-by-plugin",
		"x-prop-dotted-segment":           "dotted",
		"x-request-map-in-response-phase": "bad_argument",
	} {
		wantEq(t, name, hdr(t, r, name), want)
	}
	// Request properties belong to their stream.
	r = vm.Request(get("/props")).Must(t)
	wantEq(t, "other stream", hdr(t, r, "x-prop-source-address"), "<not_found>")
	wantEq(t, "host property", hdr(t, r, "x-prop-node-id"), "node-1")
}

func TestLocalResponses(t *testing.T) {
	h := newHost(t)
	vm := newVM(t, h, "vm0", "")

	r := vm.Request(get("/deny")).Must(t)
	wantEq(t, "status", r.Status, 429)
	wantEq(t, "body", string(r.Body), "slow down\n")
	wantEq(t, "action", r.Action, Pause)
	wantEq(t, "raw action", r.RawAction, uint32(1))
	wantEq(t, "forwarded", r.Forwarded, false)
	wantEq(t, "state", r.State, StreamClosed)
	// The local reply goes through the plugin's own on_response_headers.
	wantEq(t, "client headers", fmt.Sprint(r.Headers), fmt.Sprint(Headers{
		{":status", "429"}, {"retry-after", "7"}, {"x-ratelimit-remaining", "0"},
		{"content-length", "10"}, {"content-type", "text/plain"},
		{"x-plugin-saw-status", "429"}, {"x-request-map-in-response-phase", "bad_argument"},
	}))
	if lr := r.LocalResponse; lr == nil || lr.Status != 429 || lr.GrpcStatus != -1 || lr.FromHost ||
		fmt.Sprint(lr.Headers) != "[[retry-after 7] [x-ratelimit-remaining 0]]" {
		t.Errorf("local response %+v", r.LocalResponse)
	}

	// Returning Continue after a local response still stops iteration.
	r = vm.Request(get("/deny-continue")).Must(t)
	wantEq(t, "raw action", r.RawAction, uint32(0))
	wantEq(t, "action", r.Action, Pause)
	wantEq(t, "forwarded", r.Forwarded, false)
	wantEq(t, "status", r.Status, 403)
	if r.Headers.Has("content-length") || r.Headers.Has("content-type") {
		t.Errorf("no body, no content headers: %v", r.Headers)
	}

	// Only the first local response of a stream counts.
	r = vm.Request(get("/deny-twice")).Must(t)
	wantEq(t, "status", r.Status, 429)
	wantEq(t, "body", string(r.Body), "first")
	if len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "second proxy_send_local_response") {
		t.Errorf("warnings %v", r.Warnings)
	}
	if !strings.Contains(vm.LogText(), "second local response: ok") {
		t.Errorf("the plugin must see Ok for the ignored reply:\n%s", vm.LogText())
	}

	// A local response while processing the upstream response replaces it
	// directly (no second pass through the plugin).
	r = vm.Request(get("/deny-in-response")).Must(t)
	wantEq(t, "forwarded", r.Forwarded, true)
	wantEq(t, "status", r.Status, 502)
	wantEq(t, "body", string(r.Body), "replaced upstream response")
	wantEq(t, "headers", fmt.Sprint(r.Headers), fmt.Sprint(Headers{
		{":status", "502"}, {"x-replaced", "yes"}, {"content-length", "26"}, {"content-type", "text/plain"},
	}))
}

func TestPauseResumeFromTick(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := NewManualClock(start)
	h := newHost(t, WithClock(clk))
	vm := newVM(t, h, "vm0", `{"tick_ms":100}`)
	wantEq(t, "tick period", vm.TickPeriod(), 100*time.Millisecond)
	ticks := func() uint64 { return h.Metrics().Counter("test_ticks_total") }

	pause := func(what string) *Result {
		req := get("/pause?on_tick=" + what)
		req.Response = &Response{Status: 200, Body: []byte("upstream ok")}
		r := vm.Request(req).Must(t)
		if !r.Paused || r.State != StreamPaused || r.Status != 0 || r.Forwarded || r.Action != Pause {
			t.Fatalf("%s: not paused: %+v", what, r)
		}
		return r
	}
	resume, deny, keep := pause("resume"), pause("deny"), pause("keep")
	wantEq(t, "paused gauge", h.Metrics().Gauge("test_paused"), uint64(3))

	// The client of the third request goes away.
	if err := keep.Stream.Close(); err != nil {
		t.Fatal(err)
	}
	wantEq(t, "closed state", keep.Stream.State(), StreamClosed)
	wantEq(t, "gauge after close", h.Metrics().Gauge("test_paused"), uint64(2))
	if !strings.Contains(vm.LogText(), fmt.Sprintf("stream done: %d /pause", keep.ContextID)) {
		t.Errorf("on_log not called for the closed stream:\n%s", vm.LogText())
	}

	if err := h.AdvanceClock(99 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	wantEq(t, "ticks before the period", ticks(), uint64(0))
	if err := h.AdvanceClock(time.Millisecond); err != nil {
		t.Fatal(err)
	}
	wantEq(t, "ticks", ticks(), uint64(1))

	wantEq(t, "resumed stream", resume.Stream.State(), StreamUpstream)
	d := deny.Stream.Result()
	wantEq(t, "denied stream", d.State, StreamClosed)
	wantEq(t, "denied status", d.Status, 503)
	wantEq(t, "denied body", string(d.Body), "denied on tick")
	wantEq(t, "denied header", d.Headers.Value("x-from"), "tick")
	wantEq(t, "denied reply went through on_response_headers", d.Headers.Value("x-plugin-saw-status"), "503")
	wantEq(t, "gauge after tick", h.Metrics().Gauge("test_paused"), uint64(0))

	r := resume.Stream.Finish().Must(t)
	wantEq(t, "resumed status", r.Status, 200)
	wantEq(t, "resumed body", string(r.Body), "upstream ok")
	wantEq(t, "resumed state", r.State, StreamClosed)
	wantEq(t, "resumed forwarded", r.Forwarded, true)

	still := pause("keep")
	if err := still.Stream.Finish().Err; !errors.Is(err, ErrStillPaused) {
		t.Fatalf("Finish on a held stream: %v", err)
	}

	if err := h.AdvanceClock(250 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	wantEq(t, "ticks at 200ms and 300ms", ticks(), uint64(3))
	if err := vm.Tick(); err != nil {
		t.Fatal(err)
	}
	wantEq(t, "explicit tick", ticks(), uint64(4))
	wantEq(t, "clock", clk.Now(), start.Add(350*time.Millisecond))
	wantEq(t, "held stream still paused", still.Stream.State(), StreamPaused)
	if w := vm.Warnings(); len(w) != 0 {
		t.Errorf("warnings: %v", w)
	}
}

func TestEffectiveContext(t *testing.T) {
	h := newHost(t)
	vm := newVM(t, h, "vm0", "")
	r := vm.Request(get(fmt.Sprintf("/effective?id=%d", vm.RootContextID()))).Must(t)
	wantEq(t, "root context", hdr(t, r, "x-status"), "ok")
	r = vm.Request(get("/effective?id=99999")).Must(t)
	wantEq(t, "unknown context", hdr(t, r, "x-status"), "bad_argument")

	gone := vm.Request(get("/pause?on_tick=keep")).Must(t)
	if err := gone.Stream.Close(); err != nil {
		t.Fatal(err)
	}
	r = vm.Request(get(fmt.Sprintf("/effective?id=%d", gone.ContextID))).Must(t)
	wantEq(t, "deleted stream", hdr(t, r, "x-status"), "bad_argument")
	wantEq(t, "context ids grow", r.ContextID > gone.ContextID, true)
}

func TestHTTPCall(t *testing.T) {
	h := newHost(t, WithClusters("auth"))
	vm := newVM(t, h, "vm0", "")

	r := vm.Request(get("/callout")).Must(t)
	wantEq(t, "paused for the callout", r.State, StreamPaused)
	calls := vm.HTTPCalls()
	if len(calls) != 1 || calls[0].Cluster != "auth" || calls[0].Timeout != 500*time.Millisecond ||
		calls[0].Headers.Value(":path") != "/check" {
		t.Fatalf("calls %+v", calls)
	}
	if err := vm.RespondHTTPCall(calls[0].Token, &Response{Status: 200, Body: []byte("alice")}); err != nil {
		t.Fatal(err)
	}
	wantEq(t, "resumed by the callback", r.Stream.State(), StreamUpstream)
	f := r.Stream.Finish().Must(t)
	wantEq(t, "header added from the callback", f.UpstreamRequest.Value("x-auth-user"), "alice")
	wantEq(t, "status", f.Status, 200)

	r = vm.Request(get("/callout")).Must(t)
	calls = vm.HTTPCalls()
	if err := vm.RespondHTTPCall(calls[0].Token, &Response{Status: 401, Body: []byte("no")}); err != nil {
		t.Fatal(err)
	}
	f = r.Stream.Result()
	wantEq(t, "denied", f.Status, 403)
	wantEq(t, "callout status", f.Headers.Value("x-callout-status"), "401")
	wantEq(t, "body", string(f.Body), "no")
	wantEq(t, "state", f.State, StreamClosed)

	r = vm.Request(get("/callout")).Must(t)
	calls = vm.HTTPCalls()
	if err := vm.RespondHTTPCall(calls[0].Token, nil); err != nil {
		t.Fatal(err)
	}
	wantEq(t, "failed callout", r.Stream.Result().Status, 502)

	r = vm.Request(get("/callout?cluster=nope")).Must(t)
	wantEq(t, "unknown cluster", hdr(t, r, "x-status"), "bad_argument")
	wantEq(t, "no pending calls", len(vm.HTTPCalls()), 0)
}

func TestSharedQueue(t *testing.T) {
	h := newHost(t)
	a := newVM(t, h, "A", "")
	b := newVM(t, h, "B", "") // registers "work" last: notifications go to B

	r := a.Request(get("/enqueue?v=x")).Must(t)
	wantEq(t, "enqueue", hdr(t, r, "x-status"), "ok")
	if _, _, ok := h.SharedValue("dequeued"); ok {
		t.Fatal("B ran before its event loop did")
	}
	if err := b.DeliverPending(); err != nil {
		t.Fatal(err)
	}
	v, _, _ := h.SharedValue("dequeued")
	wantEq(t, "dequeued by B", string(v), "x@B;")
	b.Request(get("/enqueue?v=y")).Must(t)
	v, _, _ = h.SharedValue("dequeued")
	wantEq(t, "same-VM enqueue delivered after the request", string(v), "x@B;y@B;")
}

func TestRequestBodyAndResponseBody(t *testing.T) {
	h := newHost(t)
	vm := newVM(t, h, "vm0", "")
	req := HTTPRequest("POST", "a", "/rewrite")
	req.Body = []byte("request body")
	req.Response = &Response{Headers: Headers{{"content-type", "text/plain"}}, Body: []byte("response body")}
	r := vm.Request(req).Must(t)
	wantEq(t, "upstream body (prepend + append)", string(r.UpstreamBody), "<request body>")
	wantEq(t, "body seen by the plugin", hdr(t, r, "x-request-body-seen"), "request body")
	wantEq(t, "end of stream on the body", hdr(t, r, "x-request-body-eos"), "true")
	wantEq(t, "default status", r.Status, 200)
	wantEq(t, "client body (replaced)", string(r.Body), "rewritten:response body")
	if r.Headers.Has("x-too-late") || !strings.Contains(vm.LogText(), "add header in response body: bad_argument") {
		t.Errorf("response headers must be read-only in the body callback:\n%s", vm.LogText())
	}
}

func TestFireDueTicksAndHelpers(t *testing.T) {
	clk := NewManualClock(time.Unix(0, 0))
	h := newHost(t, WithClock(clk), WithMaxLogEntries(10))
	vms, err := h.NewVMs(3, nil, []byte(`{"tick_ms":100}`))
	if err != nil || len(vms) != 3 || len(h.VMs()) != 3 {
		t.Fatalf("NewVMs: %v %v", vms, err)
	}
	ticks := func() uint64 { return h.Metrics().Counter("test_ticks_total") }
	clk.Advance(250 * time.Millisecond)
	if err := h.FireDueTicks(); err != nil {
		t.Fatal(err)
	}
	wantEq(t, "one catch-up tick per VM", ticks(), uint64(3))
	clk.Advance(50 * time.Millisecond)
	_ = h.FireDueTicks()
	wantEq(t, "re-armed from now", ticks(), uint64(3))
	clk.Advance(50 * time.Millisecond)
	_ = h.FireDueTicks()
	wantEq(t, "next period", ticks(), uint64(6))

	vm := vms[0]
	for range 5 {
		vm.Request(get("/log")).Must(t)
	}
	if n := len(vm.Logs()); n > 10 || vm.DroppedLogs() == 0 {
		t.Fatalf("kept %d lines, dropped %d", n, vm.DroppedLogs())
	}
	if !strings.Contains(vm.Logs()[len(vm.Logs())-1].Message, "stream done") {
		t.Errorf("the newest lines must be kept: %v", vm.Logs())
	}
}

// --- start-up, logs, metrics, clock ------------------------------------------

func TestPluginStart(t *testing.T) {
	h := newHost(t)
	vm := newVM(t, h, "my-vm-config", `{"name":"n1"}`)
	wantEq(t, "root context id", vm.RootContextID(), uint32(1))
	logs := vm.LogText()
	for _, want := range []string{`[info] vm start: vm configuration "my-vm-config"`, `plugin started: root context 1, configuration "{\"name\":\"n1\"}"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	r := vm.Request(get("/config")).Must(t)
	wantEq(t, "config kept", hdr(t, r, "x-name"), "n1")
	// The plugin configuration is readable only while configuring; the VM
	// configuration any time.
	r = vm.Request(get("/vmconfig-in-request")).Must(t)
	wantEq(t, "vm config", hdr(t, r, "x-vm-config"), "my-vm-config")
	wantEq(t, "plugin config after start", hdr(t, r, "x-plugin-config-status"), "not_found")
}

func TestBadConfigurationFailsNewVM(t *testing.T) {
	h := newHost(t)
	_, err := h.NewVM(nil, []byte(`{"rate": -1}`))
	var se *StartError
	if !errors.As(err, &se) || se.Phase != "proxy_on_configure" || se.Err != nil {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(err.Error(), `field "rate" must be positive, got -1`) || !strings.Contains(err.Error(), "[error]") {
		t.Fatalf("error does not carry the plugin's log: %v", err)
	}
	_, err = h.NewVM(nil, []byte(`{"rate": "x"`))
	if err == nil || !strings.Contains(err.Error(), "invalid configuration") {
		t.Fatalf("bad JSON: %v", err)
	}
	_, err = h.NewVM([]byte("fail-vm-start"), nil)
	if !errors.As(err, &se) || se.Phase != "proxy_on_vm_start" || !strings.Contains(err.Error(), "vm start refused") {
		t.Fatalf("vm start: %v", err)
	}
	wantEq(t, "failed VMs are not kept", len(h.VMs()), 0)
}

func TestStartRestrictions(t *testing.T) {
	// cpp-host allows only logging, clocks, random, environment and the
	// like while _initialize runs; shared data access traps.
	h := newHost(t, WithEnv(map[string]string{"TESTPLUGIN_SHARED_IN_INIT": "1"}))
	_, err := h.NewVM(nil, nil)
	var se *StartError
	if !errors.As(err, &se) || se.Phase != "initialize" || !strings.Contains(err.Error(), "restricted_callback: env.proxy_get_shared_data") {
		t.Fatalf("err = %v", err)
	}
	h = newHost(t, WithEnv(map[string]string{"TESTPLUGIN_LOG_IN_INIT": "1", "GREETING": "hi"}))
	vm := newVM(t, h, "", "")
	if !strings.Contains(vm.LogText(), "logging from init is allowed") {
		t.Errorf("log from init missing:\n%s", vm.LogText())
	}
	r := vm.Request(get("/env")).Must(t)
	wantEq(t, "environ", hdr(t, r, "x-greeting"), "hi")
}

func TestLogs(t *testing.T) {
	var echo bytes.Buffer
	h := newHost(t, WithLogOutput(&echo), WithLogLevel(LogWarn))
	vm := newVM(t, h, "vm0", "")
	vm.ClearLogs()
	r := vm.Request(get("/log")).Must(t)
	wantEq(t, "status", r.Status, 204)
	var got []string
	for _, l := range vm.Logs() {
		if l.Source == "proxy_log" || l.Source == "stderr" {
			got = append(got, l.String()+" ("+l.Source+")")
			if l.ContextID != r.ContextID {
				t.Errorf("%q logged from context %d, want %d", l.Message, l.ContextID, r.ContextID)
			}
		}
	}
	want := []string{
		"[trace] a trace line (proxy_log)", "[debug] a debug line (proxy_log)", "[info] an info line (proxy_log)",
		"[warn] a warn line (proxy_log)", "[error] an error line (proxy_log)", "[critical] a critical line (proxy_log)",
		"[error] hello from println (stderr)", // Envoy logs stderr at error level
	}
	if len(got) < len(want) || strings.Join(got[:len(want)], "\n") != strings.Join(want, "\n") {
		t.Fatalf("logs:\n%s", strings.Join(got, "\n"))
	}
	e := echo.String()
	if strings.Contains(e, "an info line") || !strings.Contains(e, "[warn] a warn line") || !strings.Contains(e, "[critical] a critical line") {
		t.Errorf("echo with level warn:\n%s", e)
	}
}

func TestMetricsSharedAcrossVMs(t *testing.T) {
	h := newHost(t)
	a, b := newVM(t, h, "A", ""), newVM(t, h, "B", "")
	r := a.Request(get("/metrics")).Must(t)
	wantEq(t, "counter seen by A", hdr(t, r, "x-requests"), "1")
	wantEq(t, "gauge seen by A", hdr(t, r, "x-gauge"), "3")
	r = b.Request(get("/metrics?more")).Must(t)
	wantEq(t, "counter seen by B (shared stat)", hdr(t, r, "x-requests"), "2")
	wantEq(t, "gauge seen by B", hdr(t, r, "x-gauge"), "6")
	wantEq(t, "counter", h.Metrics().Counter("test_requests_total"), uint64(2))
	wantEq(t, "prefixed name", h.Metrics().Counter("wasmcustom.test_requests_total"), uint64(2))
	wantEq(t, "gauge", h.Metrics().Gauge("test_paused"), uint64(6))
	wantEq(t, "histogram", fmt.Sprint(h.Metrics().Histogram("test_sizes")), "[8 13]")
	m, ok := h.Metrics().Get("test_sizes")
	if !ok || m.Type != MetricHistogram {
		t.Fatalf("Get = %+v %v", m, ok)
	}
	wantEq(t, "snapshot size", len(h.Metrics().Snapshot()), 4)
}

func TestClock(t *testing.T) {
	start := time.Date(2030, 5, 6, 7, 8, 9, 10, time.UTC)
	clk := NewManualClock(start)
	h := newHost(t, WithClock(clk))
	vm := newVM(t, h, "", "")
	r := vm.Request(get("/time")).Must(t)
	wantEq(t, "guest time.Now", hdr(t, r, "x-now-unix-nano"), strconv.FormatInt(start.UnixNano(), 10))
	clk.Advance(1500 * time.Millisecond)
	r = vm.Request(get("/time")).Must(t)
	wantEq(t, "after Advance", hdr(t, r, "x-now"), start.Add(1500*time.Millisecond).Format(time.RFC3339Nano))
	clk.Set(start.Add(-time.Hour))
	r = vm.Request(get("/time")).Must(t)
	wantEq(t, "after a backwards Set", hdr(t, r, "x-now-unix-nano"), strconv.FormatInt(start.Add(-time.Hour).UnixNano(), 10))

	hr := newHost(t, WithRealClock())
	vmr := newVM(t, hr, "", "")
	r = vmr.Request(get("/time")).Must(t)
	ns, _ := strconv.ParseInt(hdr(t, r, "x-now-unix-nano"), 10, 64)
	if d := time.Since(time.Unix(0, ns)); d < 0 || d > 10*time.Second {
		t.Fatalf("real clock off by %v", d)
	}
}

func TestCrashFailClosedAndFailOpen(t *testing.T) {
	h := newHost(t)
	vm := newVM(t, h, "", "")
	r := vm.Request(get("/panic"))
	var te *TrapError
	if !errors.As(r.Err, &te) || te.Callback != "proxy_on_request_headers" {
		t.Fatalf("err = %v", r.Err)
	}
	if r.Status != 503 || r.LocalResponse == nil || !r.LocalResponse.FromHost || r.Details != "wasm_fail_stream" {
		t.Fatalf("fail-closed reply: %+v", r)
	}
	if !strings.Contains(vm.LogText(), "boom: test plugin asked to panic") {
		t.Errorf("panic message not logged:\n%s", vm.LogText())
	}
	if vm.Failed() == nil {
		t.Fatal("VM not failed")
	}
	r = vm.Request(get("/deny"))
	if r.Err != nil || r.Status != 503 || !r.LocalResponse.FromHost {
		t.Fatalf("request on a failed VM: %+v", r)
	}

	ho := newHost(t, WithFailOpen())
	vmo := newVM(t, ho, "", "")
	vmo.Request(get("/panic"))
	r = vmo.Request(get("/deny")).Must(t)
	wantEq(t, "fail open forwards", r.Forwarded, true)
	wantEq(t, "fail open status", r.Status, 200)
}

func TestHostCallCounting(t *testing.T) {
	h := newHost(t)
	vm := newVM(t, h, "", "")
	vm.ResetHostCalls()
	wantEq(t, "after reset", vm.TotalHostCalls(), uint64(0))
	vm.Request(get("/shared/get?key=a")).Must(t)
	calls := vm.HostCalls()
	wantEq(t, "get_shared_data calls", calls["env.proxy_get_shared_data"], uint64(1))
	wantEq(t, "send_local_response calls", calls["env.proxy_send_local_response"], uint64(1))
	if calls["env.proxy_get_header_map_value"] < 2 {
		t.Errorf("header reads: %v", calls)
	}
	var sum uint64
	for _, n := range calls {
		sum += n
	}
	wantEq(t, "total", vm.TotalHostCalls(), sum)
	if !strings.Contains(FormatHostCalls(calls), "env.proxy_get_shared_data") {
		t.Error("FormatHostCalls")
	}
	if ms := vm.MemorySize(); ms < 1<<20 || ms%65536 != 0 {
		t.Errorf("memory size %d", ms)
	}
}

func TestCloseVM(t *testing.T) {
	h := newHost(t)
	vm := newVM(t, h, "", "")
	p := vm.Request(get("/pause?on_tick=keep")).Must(t)
	if err := vm.Close(); err != nil {
		t.Fatal(err)
	}
	wantEq(t, "open stream ended", p.Stream.State(), StreamClosed)
	if !strings.Contains(vm.LogText(), fmt.Sprintf("stream done: %d", p.ContextID)) {
		t.Errorf("on_log on close:\n%s", vm.LogText())
	}
	if err := vm.Tick(); err == nil {
		t.Error("Tick on a closed VM")
	}
}

// BenchmarkRequest measures one allowed request through the test plugin
// and reports host calls per request.
func BenchmarkRequest(b *testing.B) {
	h := newHost(b, WithRealClock())
	vm := newVM(b, h, "", "")
	req := get("/headers")
	vm.ResetHostCalls()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if r := vm.Request(req); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	b.ReportMetric(float64(vm.TotalHostCalls())/float64(b.N), "hostcalls/op")
}

func TestCallTimeout(t *testing.T) {
	h := newHost(t, WithCallTimeout(time.Nanosecond))
	_, err := h.NewVM(nil, nil)
	var se *StartError
	if !errors.As(err, &se) || se.Phase != "initialize" {
		t.Fatalf("a 1ns call budget must abort _initialize: %v", err)
	}
	h = newHost(t, WithCallTimeout(10*time.Second))
	vm := newVM(t, h, "", "")
	vm.Request(get("/deny")).Must(t)
}

// TestMissingCallbacksAreSkipped: like proxy-wasm-cpp-host in Envoy, the
// host calls only the callbacks the module exports; a missing body callback
// lets the data through unchanged, a missing proxy_on_done counts as done.
// `make build` drops exports from build/sluice.wasm (internal/wasmexports)
// and relies on this.
func TestMissingCallbacksAreSkipped(t *testing.T) {
	h := newHostWithout(t, []string{"proxy_on_request_body", "proxy_on_response_body", "proxy_on_log", "proxy_on_done"})
	vm := newVM(t, h, "vm0", "")
	for range 3 {
		req := HTTPRequest("POST", "a", "/rewrite")
		req.Body = []byte("request body")
		req.Response = &Response{Headers: Headers{{"content-type", "text/plain"}}, Body: []byte("response body")}
		r := vm.Request(req).Must(t)
		wantEq(t, "upstream body (no body callback)", string(r.UpstreamBody), "request body")
		wantEq(t, "client body (no body callback)", string(r.Body), "response body")
		wantEq(t, "status", r.Status, 200)
		if r.Headers.Has("x-request-body-seen") {
			t.Error("proxy_on_request_body ran although not exported")
		}
		wantEq(t, "stream state", r.Stream.State(), StreamClosed)
	}
	if strings.Contains(vm.LogText(), "stream done:") {
		t.Errorf("proxy_on_log ran although not exported:\n%s", vm.LogText())
	}
	if n := len(vm.OpenStreams()); n != 0 {
		t.Errorf("%d streams still open", n)
	}
	if err := vm.Close(); err != nil {
		t.Fatalf("closing a VM without proxy_on_done: %v", err)
	}
}

// TestAllowOnHeadersStopIteration: with allow_on_headers_stop_iteration a
// request paused with StopIteration (1) on its headers still has its body
// delivered: a Continue from the body callback, or a module without one,
// sends the request upstream at once; a stop keeps it held. Without the
// flag the body waits with the headers.
func TestAllowOnHeadersStopIteration(t *testing.T) {
	post := func(vm *VM, path string) *Result {
		req := HTTPRequest("POST", "a", path)
		req.Body = []byte("request body")
		return vm.Request(req).Must(t)
	}
	h := newHost(t)
	r := post(newVM(t, h, "vm0", ""), "/pause")
	if !r.Paused || r.Forwarded || r.RawAction != 1 {
		t.Fatalf("without the flag: paused %v, forwarded %v, returned %d; want held", r.Paused, r.Forwarded, r.RawAction)
	}

	clk := NewManualClock(time.Unix(0, 0))
	h = newHost(t, WithClock(clk), WithAllowOnHeadersStopIteration())
	vm := newVM(t, h, "vm0", `{"tick_ms":100}`)
	r = post(vm, "/pause")
	if r.Paused || !r.Forwarded || r.Status != 200 || string(r.UpstreamBody) != "request body" {
		t.Fatalf("flag, body callback continues: paused %v, forwarded %v, status %d; want sent on with its body", r.Paused, r.Forwarded, r.Status)
	}
	r = post(vm, "/pause?body=hold")
	if !r.Paused || r.Forwarded || strings.Count(vm.LogText(), "request body held") != 1 {
		t.Fatalf("flag, body callback stops: paused %v, forwarded %v; want held after one body callback", r.Paused, r.Forwarded)
	}
	if err := h.AdvanceClock(100 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	r = r.Stream.Finish().Must(t)
	wantEq(t, "resumed status", r.Status, 200)
	wantEq(t, "resumed upstream body", string(r.UpstreamBody), "request body")
	wantEq(t, "body callbacks", strings.Count(vm.LogText(), "request body held"), 1)

	h = newHostWithout(t, []string{"proxy_on_request_body"}, WithAllowOnHeadersStopIteration())
	r = post(newVM(t, h, "vm0", ""), "/pause")
	if r.Paused || !r.Forwarded || string(r.UpstreamBody) != "request body" {
		t.Fatalf("flag, no body callback: paused %v, forwarded %v; want sent on (cpp-host answers Continue for it)", r.Paused, r.Forwarded)
	}
}

// TestMetricsRejected: a rejected name (a stats matcher's) is defined
// without error, counts nothing, reads 0 and is not listed.
func TestMetricsRejected(t *testing.T) {
	m := NewMetrics()
	m.Reject("wasmcustom.test_requests_total")
	h := newHost(t, WithMetrics(m))
	a := newVM(t, h, "A", "")
	r := a.Request(get("/metrics")).Must(t)
	wantEq(t, "rejected counter seen by A", hdr(t, r, "x-requests"), "0")
	wantEq(t, "gauge seen by A", hdr(t, r, "x-gauge"), "3")
	if _, ok := m.Get("test_requests_total"); ok {
		t.Error("a rejected counter is listed")
	}
	wantEq(t, "snapshot size (ticks, paused, sizes)", len(m.Snapshot()), 3)
}
