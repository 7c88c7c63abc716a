package wasmtest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

// TestImportsAreProvidedByEnvoy fails on any import Envoy 1.40 does not
// provide (a Go plugin that touched files or sockets would import WASI calls
// Envoy refuses, and the module would not load).
func TestImportsAreProvidedByEnvoy(t *testing.T) {
	problems, err := wasmhost.CheckEnvoyImports(pluginWasm)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("import Envoy 1.40 does not provide: %v", p)
	}
	imports, err := wasmhost.ModuleImports(pluginWasm)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, im := range imports {
		names = append(names, im.QualifiedName())
	}
	t.Logf("%d imports: %s", len(names), strings.Join(names, " "))
	for _, n := range names {
		if strings.Contains(n, "sock_") || strings.Contains(n, "path_open") {
			t.Errorf("the plugin imports %s: no file or network access belongs in it", n)
		}
	}
}

const burstConfig = `{"rules":[{"name":"burst","limit":10,"window":"1s","burst":5}]}`

// TestBurstInterleavedAcrossWorkers sends one client's burst round-robin over
// 2 and 4 VMs sharing Envoy-like shared data: exactly burst are admitted.
func TestBurstInterleavedAcrossWorkers(t *testing.T) {
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			h := newHost(t)
			vms := workers(t, h, n, burstConfig)
			admitted := 0
			for i := 0; i < 40; i++ {
				r := get(vms[i%n], "/", "10.0.0.1:4000").Must(t)
				switch r.Status {
				case 200:
					admitted++
				case 429:
				default:
					t.Fatalf("status %d", r.Status)
				}
			}
			if admitted != 5 {
				t.Errorf("%d workers admitted %d, want burst 5", n, admitted)
			}
		})
	}
}

// TestRefillWithTheClock: the bucket refills as the test clock advances.
func TestRefillWithTheClock(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, burstConfig)
	for i := 0; i < 5; i++ {
		get(vms[i%2], "/", "10.0.0.1:1").Must(t)
	}
	if r := get(vms[0], "/", "10.0.0.1:1"); r.Status != 429 {
		t.Fatalf("sixth: %d", r.Status)
	}
	if err := h.AdvanceClock(99 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if r := get(vms[1], "/", "10.0.0.1:1"); r.Status != 429 {
		t.Errorf("after 99ms: %d, want 429", r.Status)
	}
	if err := h.AdvanceClock(time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if r := get(vms[1], "/", "10.0.0.1:1"); r.Status != 200 {
		t.Errorf("after 100ms: %d, want 200 (one token)", r.Status)
	}
	if r := get(vms[0], "/", "10.0.0.1:1"); r.Status != 429 {
		t.Errorf("second after 100ms: %d, want 429", r.Status)
	}
	// Long idle (the bucket is full after 500ms): never more than burst.
	h.AdvanceClock(10 * time.Second)
	ok := 0
	for i := 0; i < 10; i++ {
		if get(vms[i%2], "/", "10.0.0.1:1").Status == 200 {
			ok++
		}
	}
	if ok != 5 {
		t.Errorf("after a long idle %d admitted, want burst 5 (never more)", ok)
	}
}

// TestExactHeaders checks every header value of admitted and rejected
// responses.
func TestExactHeaders(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[{"name":"checkout","match":{"path_prefix":"/checkout","methods":["POST"]},"limit":10,"window":"1m","burst":2}]}`)[0]
	r := send(vm, "POST", "/checkout", "10.1.1.1:5").Must(t)
	want := map[string]string{
		"x-ratelimit-limit": "10", "x-ratelimit-remaining": "1", "x-ratelimit-reset": "6",
		"ratelimit-policy": `"checkout";q=10;w=60`, "ratelimit": `"checkout";r=1;t=6`,
	}
	expectHeaders(t, r, 200, want, "retry-after")
	send(vm, "POST", "/checkout", "10.1.1.1:5").Must(t)
	r = send(vm, "POST", "/checkout", "10.1.1.1:5").Must(t)
	want = map[string]string{
		"retry-after": "6", "x-ratelimit-limit": "10", "x-ratelimit-remaining": "0", "x-ratelimit-reset": "12",
		// t on a rejection is Retry-After, not the full reset (12).
		"ratelimit-policy": `"checkout";q=10;w=60`, "ratelimit": `"checkout";r=0;t=6`,
		"content-type": "application/problem+json",
	}
	expectHeaders(t, r, 429, want)
	if r.Forwarded {
		t.Error("a rejected request reached the upstream")
	}
	if !strings.Contains(string(r.Body), `"violated-policies":["checkout"]`) {
		t.Errorf("body %q", r.Body)
	}
	// GET does not match the POST-only rule: no limit headers at all.
	r = send(vm, "GET", "/checkout", "10.1.1.1:5").Must(t)
	expectHeaders(t, r, 200, nil, "x-ratelimit-limit", "ratelimit")
}

func expectHeaders(t *testing.T, r *wasmhost.Result, status int, want map[string]string, absent ...string) {
	t.Helper()
	if r.Status != status {
		t.Errorf("status %d, want %d", r.Status, status)
	}
	for k, v := range want {
		if got := r.Headers.Value(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	for _, k := range absent {
		if r.Headers.Has(k) {
			t.Errorf("unexpected %s: %q", k, r.Headers.Value(k))
		}
	}
}

// TestRulesPerPath: different rules for different paths; a request passes
// only if every matching rule admits it, and the most constrained rule is
// reported.
func TestRulesPerPath(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, `{"rules":[
		{"name":"site","limit":100,"window":"1m"},
		{"name":"search","match":{"path_prefix":"/search"},"limit":3,"window":"1m"},
		{"name":"login","match":{"path_exact":"/login"},"limit":1,"window":"1m"}]}`)
	count := func(path string, n int) (ok int, last *wasmhost.Result) {
		for i := 0; i < n; i++ {
			last = get(vms[i%2], path, "10.2.2.2:1").Must(t)
			if last.Status == 200 {
				ok++
			}
		}
		return ok, last
	}
	if ok, last := count("/search?q=shoes", 5); ok != 3 || last.Headers.Value("ratelimit-policy") != `"search";q=3;w=60` {
		t.Errorf("/search: %d admitted, policy %q", ok, last.Headers.Value("ratelimit-policy"))
	}
	if ok, _ := count("/login", 3); ok != 1 {
		t.Errorf("/login: %d admitted, want 1", ok)
	}
	if ok, _ := count("/login/help", 3); ok != 3 {
		t.Errorf("/login/help (not exact): %d admitted, want 3", ok)
	}
	// site was charged 3 + 1 + 3 = 7 admitted requests; rejected ones refunded.
	_, last := count("/", 1)
	if got := last.Headers.Value("x-ratelimit-remaining"); got != "92" {
		t.Errorf("site remaining %s, want 92 (rejections refunded)", got)
	}
}

// TestBadConfigFailsStart: the plugin refuses to start and its log line
// names the field.
func TestBadConfigFailsStart(t *testing.T) {
	h := newHost(t)
	for cfg, field := range map[string]string{
		``: `at least one rule is required`,
		`{"rules":[{"name":"a","limit":1,"window":"1s"},{"name":"b","limit":1,"window":"fortnight"}]}`: `rules[1].window`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","burst":-1}]}`:                                  `rules[0].burst`,
		`{"rules":[{"name":"a","limit":1,"window":"1s"}],"headers":"fancy"}`:                           `headers:`,
		`{"rules":[{"name":"a","limit":1,"window":"1s"}],"max_key":5}`:                                 `max_key: unknown field`,
	} {
		_, err := h.NewVM(nil, []byte(cfg))
		var se *wasmhost.StartError
		if !errors.As(err, &se) {
			t.Errorf("%s: started (err %v)", cfg, err)
			continue
		}
		if !strings.Contains(err.Error(), "sluice: invalid configuration: ") || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: error does not name %q: %v", cfg, field, err)
		}
	}
}

// TestHostCallsPerRequest records the host calls of the admit and reject
// paths (the figures quoted in docs/design/performance.md) and bounds them.
func TestHostCallsPerRequest(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, burstConfig)[0]
	get(vm, "/", "10.0.0.9:1").Must(t) // warm: creates the bucket
	vm.ResetHostCalls()
	get(vm, "/", "10.0.0.9:1").Must(t)
	admit := vm.HostCalls()
	for i := 0; i < 5; i++ {
		get(vm, "/", "10.0.0.9:1")
	}
	vm.ResetHostCalls()
	if r := get(vm, "/", "10.0.0.9:1"); r.Status != 429 {
		t.Fatalf("not rejected: %d", r.Status)
	}
	reject := vm.HostCalls()
	t.Logf("admit path: %d host calls: %s", total(admit), wasmhost.FormatHostCalls(admit))
	t.Logf("reject path: %d host calls: %s", total(reject), wasmhost.FormatHostCalls(reject))
	if admit["env.proxy_get_shared_data"] != 1 || admit["env.proxy_set_shared_data"] != 1 {
		t.Errorf("admit path shared data: %v", admit)
	}
	if reject["env.proxy_set_shared_data"] != 0 {
		t.Error("the reject path wrote shared data")
	}
	// The access log's filter state: the decision and the rule, on both paths.
	if admit["env.proxy_set_property"] != 2 || reject["env.proxy_set_property"] != 2 {
		t.Errorf("set_property: admit %d, reject %d, want 2 each", admit["env.proxy_set_property"], reject["env.proxy_set_property"])
	}
	if n := total(admit); n > 16 {
		t.Errorf("admit path makes %d host calls", n)
	}
}

func total(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

// TestRetryAfterIsExactAndWhole: Retry-After is whole seconds rounded up, at
// least 1, and the request is admitted once that time has passed.
func TestRetryAfterIsExactAndWhole(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[{"name":"r","limit":2,"window":"5s"}]}`)[0]
	get(vm, "/", "10.0.0.1:1")
	get(vm, "/", "10.0.0.1:1")
	r := get(vm, "/", "10.0.0.1:1")
	ra, err := strconv.Atoi(r.Headers.Value("retry-after"))
	if r.Status != 429 || err != nil || ra != 3 { // 2.5s rounded up
		t.Fatalf("status %d retry-after %q, want 429 and 3", r.Status, r.Headers.Value("retry-after"))
	}
	h.AdvanceClock(time.Duration(ra) * time.Second)
	if r := get(vm, "/", "10.0.0.1:1"); r.Status != 200 {
		t.Errorf("after Retry-After: %d", r.Status)
	}
}

// TestGRPCRetryPushback: a refused gRPC call carries gRPC's retry pushback,
// the wait to its admission in milliseconds (Retry-After rounds it up to
// seconds); a refused HTTP request does not, and a request without a body
// (which no gRPC call is) is not even asked its content type.
func TestGRPCRetryPushback(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[{"name":"r","limit":2,"window":"5s"}]}`)[0]
	grpc := [2]string{"content-type", "application/grpc"}
	call := func() *wasmhost.Result {
		// A unary gRPC call: POST, its message (here empty) in a 5-byte frame.
		r := wasmhost.HTTPRequest("POST", "shop.example", "/pkg.Svc/Call", grpc, [2]string{"te", "trailers"})
		r.Properties = wasmhost.Properties{"source.address": "10.0.0.1:1"}
		r.Body = []byte{0, 0, 0, 0, 0}
		r.Response = &wasmhost.Response{Status: 200}
		return vm.Request(r)
	}
	call()
	call()
	r := call()
	if r.Status != 429 || r.Headers.Value("grpc-retry-pushback-ms") != "2500" || r.Headers.Value("retry-after") != "3" {
		t.Errorf("refused gRPC call: status %d, grpc-retry-pushback-ms %q, retry-after %q: want 429, 2500 and 3",
			r.Status, r.Headers.Value("grpc-retry-pushback-ms"), r.Headers.Value("retry-after"))
	}
	r = send(vm, "POST", "/", "10.0.0.1:1", [2]string{"content-type", "application/json"})
	if _, ok := r.Headers.Get("grpc-retry-pushback-ms"); r.Status != 429 || ok {
		t.Errorf("refused HTTP request: status %d, grpc-retry-pushback-ms present %v", r.Status, ok)
	}
	vm.ResetHostCalls()
	r = get(vm, "/", "10.0.0.1:1", grpc)
	if n := vm.HostCalls()["env.proxy_get_header_map_value"]; r.Status != 429 || n != 0 {
		t.Errorf("refused request without a body: status %d, %d header reads, want 429 and none", r.Status, n)
	}
	h.AdvanceClock(2500 * time.Millisecond)
	if r := call(); r.Status != 200 {
		t.Errorf("after the pushback: %d", r.Status)
	}
}
