package e2e_test

import (
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
  {"name": "held", "match": {"path_prefix": "/held"}, "key": ["path"], "limit": 1, "window": "1s", "max_delay": "5s"}
]}`

// TestUpstreamFilter runs Sluice as an upstream HTTP filter of the cluster
// (HttpProtocolOptions.http_filters, before upstream_codec), which Envoy
// 1.40 accepts. There source.address is still the downstream client's
// address and xds.route_name the route's name, so keys and route matches
// work as in the connection manager's chain; the filter runs once per
// attempt of the router, so a retried request is charged once per attempt
// (and a concurrency slot is held per attempt, given back before the
// retry); throttling holds the attempt; the decision reaches the access
// log's FILTER_STATE (the last attempt's).
func TestUpstreamFilter(t *testing.T) {
	aux := startAux(t)
	e := envoytest.StartT(t, envoytest.Options{Concurrency: 2, XFFNumTrustedHops: 1, Upstream: aux.ln.Addr().String(),
		Routes: []envoytest.Route{
			{Name: "api", Prefix: "/api"},
			{Name: "retry", Prefix: "/retry", RetryOn: "5xx", NumRetries: 2},
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
