package e2e_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/capdoc"
	"github.com/sluicehq/sluice/internal/envoytest"
)

// TestCapabilityRestriction: a filter whose capability_restriction_config
// allows exactly what docs/operations.md lists (proxy-wasm-cpp-host stubs
// every other import and ignores every other callback) rejects with its
// headers, releases a held request from its tick, gives back a
// concurrency slot at each response's end and at the end of a stream whose
// client gave up, and publishes its metrics.
func TestCapabilityRestriction(t *testing.T) {
	root, err := envoytest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	caps, err := capdoc.Read(root)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(caps, "proxy_on_tick") || !slices.Contains(caps, "fd_write") {
		t.Fatalf("documented capabilities %v lack proxy_on_tick or fd_write", caps)
	}
	cfg := `{"rules": [
	  {"name": "rej", "match": {"path_prefix": "/r"}, "key": [], "limit": 1, "window": "1h"},
	  {"name": "thr", "match": {"path_prefix": "/t"}, "key": [], "limit": 1, "window": "1s", "max_delay": "3s"},
	  {"name": "conc", "match": {"path_prefix": "/c"}, "key": [], "algorithm": "concurrency", "limit": 1}]}`
	e := startSluice(t, 1, cfg, func(o *envoytest.Options) { o.Wasm.AllowedCapabilities = caps })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	do := func(path string) (int, string) {
		resp, _, err := e.Do(ctx, "GET", path, nil, nil)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}
	if c1, _ := do("/r"); c1 != 200 {
		t.Errorf("/r first: %d, want 200", c1)
	}
	if c2, ra := do("/r"); c2 != 429 || ra == "" {
		t.Errorf("/r second: %d Retry-After %q, want 429 with Retry-After", c2, ra)
	}
	do("/t")
	start := time.Now()
	if c, _ := do("/t"); c != 200 || time.Since(start) < 300*time.Millisecond {
		t.Errorf("/t second: %d after %v, want 200 after being held", c, time.Since(start))
	}
	for i := 0; i < 3; i++ {
		if c, _ := do("/c"); c != 200 {
			t.Errorf("/c request %d: %d, want 200 (the slot given back at each end)", i, c)
		}
	}
	// A client gone while its request is at the upstream: only the
	// stream's end gives the slot back.
	e.Upstream.SetDelay(5 * time.Second)
	gone, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	if _, _, err := e.Do(gone, "GET", "/c", nil, nil); err == nil {
		t.Error("/c with a slow upstream: answered before the client gave up")
	}
	stop()
	e.Upstream.SetDelay(0)
	time.Sleep(200 * time.Millisecond)
	if c, _ := do("/c"); c != 200 {
		t.Errorf("/c after a client gave up: %d, want 200 (the slot given back at its stream's end)", c)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, err := e.Stat("wasmcustom.sluice.rule.thr.delayed")
		if err == nil && v == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice.rule.thr.delayed = %d (%v), want 1", v, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
