package e2e_test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// upstreamConfig: Sluice as an upstream (cluster) filter. "api" matches by
// route name, keyed by client IP; "retry" counts the attempts of /retry/a
// and "conc" holds a slot per attempt of /retry/c (the aux upstream fails
// every other attempt with 503, and the route retries 5xx); "held"
// throttles.
const upstreamConfig = `{"rules": [
  {"name": "api", "match": {"route": ["api"]}, "limit": 2, "window": "1h"},
  {"name": "retry", "match": {"path_exact": "/retry/a"}, "key": ["path"], "limit": 3, "window": "1h"},
  {"name": "conc", "match": {"path_prefix": "/retry/c"}, "key": ["path"], "algorithm": "concurrency", "limit": 1},
  {"name": "held", "match": {"path_prefix": "/held"}, "key": ["path"], "limit": 1, "window": "1s", "max_delay": "5s"},
  {"name": "gone", "match": {"path_prefix": "/gone"}, "limit": 1, "window": "10s", "max_delay": "20s"},
  {"name": "r429", "match": {"path_prefix": "/r429"}, "key": ["path"], "limit": 2, "window": "1h"}
]}`

// TestUpstreamFilter runs Sluice as an upstream HTTP filter of the cluster
// (HttpProtocolOptions.http_filters, before upstream_codec), which Envoy
// 1.40 accepts. There source.address is still the downstream client's
// address and xds.route_name the route's name, so keys and route matches
// work as in the connection manager's chain; the filter runs once per
// attempt of the router, so a retried request is charged once per attempt
// (and a concurrency slot is held per attempt, given back before the
// retry), while a refusal is not retried, even by a policy that retries
// 429; throttling holds the attempt, and a client that gives up meanwhile
// leaves nothing held; the decision reaches the access
// log's FILTER_STATE (the last attempt's).
func TestUpstreamFilter(t *testing.T) {
	aux := startAux(t)
	e := envoytest.StartT(t, envoytest.Options{Concurrency: 2, XFFNumTrustedHops: 1, Upstream: aux.ln.Addr().String(),
		Routes: []envoytest.Route{
			{Name: "api", Prefix: "/api"},
			{Name: "retry", Prefix: "/retry", RetryOn: "5xx", NumRetries: 2},
			{Name: "r429", Prefix: "/r429", RetryOn: "retriable-status-codes", RetriableStatusCodes: []int{429}, NumRetries: 2},
			{Name: "default", Prefix: "/"},
		},
		AccessLogFormat: "%REQ(:PATH)% %RESPONSE_CODE% %FILTER_STATE(wasm.sluice_decision:PLAIN)%\n",
		UpstreamWasm:    &envoytest.Wasm{File: sluiceWasm(t), Config: upstreamConfig}})
	do := func(path, client string, want int) *http.Response {
		t.Helper()
		resp, body, err := e.Do(t.Context(), "GET", path, http.Header{"X-Forwarded-For": {client}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != want {
			t.Errorf("%s from %s: %d %q, want %d", path, client, resp.StatusCode, body, want)
		}
		return resp
	}
	// Route match and client key: the route's name and the client's
	// address (from X-Forwarded-For) reach the upstream filter.
	do("/api/x", "10.0.0.1", 200)
	do("/api/x", "10.0.0.1", 200)
	if r := do("/api/x", "10.0.0.1", 429); r.Header.Get("Retry-After") == "" {
		t.Error("a rejection upstream has no Retry-After")
	}
	do("/api/x", "10.0.0.2", 200)
	// Retries: the concurrency slot of a failed attempt is free for the
	// retry (each request's first attempt fails: the upstream fails every
	// other attempt).
	for range 3 {
		do("/retry/c", "10.0.0.5", 200)
	}
	// Each attempt is charged: the first request's two attempts take 2 of
	// 3, the second's first attempt the last one, and its retry is refused.
	if r := do("/retry/a", "10.0.0.3", 200); r.Header.Get("X-RateLimit-Remaining") != "1" {
		t.Errorf("a request of two attempts: X-RateLimit-Remaining %q, want 1 (both charged)", r.Header.Get("X-RateLimit-Remaining"))
	}
	do("/retry/a", "10.0.0.3", 429)
	// A policy that retries 429 retries the upstream's (/r429/up answers
	// 429, then 200: two attempts admitted) but not Sluice's refusal:
	// Envoy sends an upstream filter's local reply to the client as the
	// stream's, without a retry.
	do("/r429/up", "10.0.0.6", 200)
	for range 2 {
		do("/r429", "10.0.0.6", 200)
	}
	do("/r429", "10.0.0.6", 429)
	waitStat(t, e, "wasmcustom.sluice.rule.r429.allowed", 4)
	waitStat(t, e, "wasmcustom.sluice.rule.r429.rejected", 1)
	// Throttling holds the attempt until its turn.
	t0 := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var last time.Duration
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			do("/held", "10.0.0.4", 200)
			mu.Lock()
			last = max(last, time.Since(t0))
			mu.Unlock()
		}()
	}
	wg.Wait()
	if last < 800*time.Millisecond {
		t.Errorf("two requests to a rule of 1 per second with max_delay: both answered within %v, want the second held about 1 s", last)
	}
	heldGivenUp(t, e)
	wantLog := "/api/x 429 rejected\n"
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(e.AccessLogPath())
		if strings.Contains(string(b), wantLog) && strings.Contains(string(b), "/held 200 delayed\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the access log has no %q and no delayed /held after 30 s:\n%s", wantLog, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestUpstreamFilterGlobal runs a global rule in Sluice as an upstream
// filter: its calls to the rate-limit service (proxy_http_call from the
// upstream filter's context) are answered, so the fleet's budget holds
// there too: of 5 requests to a rule of 3 per minute, 3 admitted.
func TestUpstreamFilterGlobal(t *testing.T) {
	_, rls := envoytest.FleetT(t, map[string]string{"sluice.yaml": shippedRLSConfig(t)})
	e := envoytest.StartT(t, envoytest.Options{Concurrency: 2, XFFNumTrustedHops: 1,
		ExtraClustersYAML: shippedCluster(t, rls.GRPCAddr),
		UpstreamWasm: &envoytest.Wasm{File: sluiceWasm(t), Config: `{"rules": [{"name": "g", "scope": "global", "limit": 3, "window": "1m"}],
			"global": {"cluster": "ratelimit", "timeout": "500ms"}}`}})
	codes := map[int]int{}
	for range 5 {
		resp, _, err := e.Do(t.Context(), "GET", "/x", http.Header{"X-Forwarded-For": {"10.0.1.1"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		codes[resp.StatusCode]++
	}
	// A service that did not answer would leave them to on_error (allow).
	if codes[200] != 3 || codes[429] != 2 {
		t.Errorf("5 requests to a global rule of 3 per minute, upstream filter: %v, want 3 admitted and 2 refused", codes)
	}
}

// heldGivenUp: a client that gives up while its attempt is held upstream
// (the router resets the attempt) leaves nothing held: the held-requests
// gauge goes from 1 back to 0.
func heldGivenUp(t *testing.T, e *envoytest.Envoy) {
	t.Helper()
	if resp, _, err := e.Do(t.Context(), "GET", "/gone", nil, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("first request to /gone: %v %v", resp, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, _, err := e.Do(ctx, "GET", "/gone", nil, nil)
		done <- err
	}()
	held := func(want uint64) func() bool {
		return func() bool { n, _ := e.Stat("wasmcustom.sluice.held_requests"); return n == want }
	}
	pollUntil(held(1))
	if !held(1)() {
		t.Fatal("the second request to /gone is not held")
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a request held about 10 s was answered")
	}
	pollUntil(held(0))
	if !held(0)() {
		t.Error("after the client of a held attempt gave up: sluice.held_requests is not 0")
	}
}
