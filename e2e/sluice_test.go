package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// sluiceWasm returns the absolute path of the plugin built by `make build`.
// The e2e tests prove the artifact users deploy, so they do not build their
// own: a missing build/sluice.wasm fails (make test builds it first).
func sluiceWasm(t testing.TB) string {
	t.Helper()
	root, err := envoytest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "build", "sluice.wasm")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is missing: run `make build` (make test does): %v", p, err)
	}
	return p
}

// startSluice starts Envoy with the Sluice plugin and cfg (a JSON document).
func startSluice(t testing.TB, concurrency int, cfg string, edit ...func(*envoytest.Options)) *envoytest.Envoy {
	t.Helper()
	o := envoytest.Options{
		Concurrency: concurrency,
		Wasm:        &envoytest.Wasm{File: sluiceWasm(t), Config: cfg},
	}
	for _, f := range edit {
		f(&o)
	}
	return envoytest.StartT(t, o)
}

// foundationConfig has one rule per scenario, each on its own path, so that
// one Envoy serves several tests.
const foundationConfig = `{
  "rules": [
    {"name": "burst", "match": {"path_prefix": "/burst"}, "limit": 50, "window": "1h", "burst": 50},
    {"name": "small", "match": {"path_prefix": "/small"}, "limit": 3, "window": "1h"},
    {"name": "large", "match": {"path_prefix": "/large"}, "limit": 6, "window": "1h"},
    {"name": "refill", "match": {"path_exact": "/refill"}, "limit": 1, "window": "2s"}
  ]
}`

// TestBurstAdmitsExactlyBurst sends 2,000 concurrent requests from one client
// through Envoy's worker threads: exactly burst pass, the rest get clean 429s.
func TestBurstAdmitsExactlyBurst(t *testing.T) {
	for _, workers := range []int{2, 4} {
		t.Run(fmt.Sprintf("concurrency=%d", workers), func(t *testing.T) {
			e := startSluice(t, workers, foundationConfig)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{
				Path: "/burst", Requests: 2000, Concurrency: 500, KeepResponses: true,
			})
			t.Logf("concurrency %d: %v", workers, res)
			if res.Errors != 0 {
				t.Fatalf("%d transport errors, first: %v", res.Errors, res.FirstErr)
			}
			if got := res.Count(200); got != 50 {
				t.Errorf("admitted %d of 2000, want exactly burst 50", got)
			}
			if got := res.Count(429); got != 1950 {
				t.Errorf("429s = %d, want 1950", got)
			}
			if got := e.Upstream.Count("/burst"); got != 50 {
				t.Errorf("upstream saw %d requests, want 50", got)
			}
			for _, r := range res.Responses {
				h := r.Header
				switch r.Status {
				case 429:
					ra, err := strconv.Atoi(h.Get("Retry-After"))
					if err != nil || ra < 1 {
						t.Fatalf("429 Retry-After = %q, want whole seconds >= 1", h.Get("Retry-After"))
					}
					if h.Get("X-RateLimit-Limit") != "50" || h.Get("X-RateLimit-Remaining") != "0" ||
						h.Get("RateLimit-Policy") != `"burst";q=50;w=3600` || !strings.HasPrefix(h.Get("RateLimit"), `"burst";r=0;t=`) {
						t.Fatalf("429 headers: %v", h)
					}
				case 200:
					if h.Get("X-RateLimit-Limit") != "50" || h.Get("Retry-After") != "" {
						t.Fatalf("200 headers: %v", h)
					}
				}
			}
			waitStat(t, e, "wasmcustom.sluice.rule.burst.allowed", 50)
			waitStat(t, e, "wasmcustom.sluice.rule.burst.rejected", 1950)
		})
	}
}

// TestRoutesAndRefill covers per-route limits, exact header values and a
// client that waits Retry-After and is admitted again.
func TestRoutesAndRefill(t *testing.T) {
	e := startSluice(t, 2, foundationConfig)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for path, want := range map[string]int{"/small/x": 3, "/large/y": 6} {
		res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Path: path, Requests: 10, Concurrency: 1})
		if res.Count(200) != want || res.Count(429) != 10-want {
			t.Errorf("%s: %v, want %d admitted", path, res.Status, want)
		}
	}
	// A path no rule matches is never limited and carries no headers.
	res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Path: "/free", Requests: 20, Concurrency: 4, KeepResponses: true})
	if res.Count(200) != 20 || res.Responses[0].Header.Get("X-RateLimit-Limit") != "" {
		t.Errorf("/free: %v %v", res.Status, res.Responses[0].Header)
	}

	// Exact headers: limit 1 per 2s.
	resp, _, err := e.Get(ctx, "/refill", nil)
	if err != nil {
		t.Fatal(err)
	}
	wantHeaders(t, resp, 200, map[string]string{
		"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "2",
		"RateLimit-Policy": `"refill";q=1;w=2`, "RateLimit": `"refill";r=0;t=2`, "Retry-After": "",
	})
	resp, body, err := e.Get(ctx, "/refill", nil)
	if err != nil {
		t.Fatal(err)
	}
	wantHeaders(t, resp, 429, map[string]string{
		"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0", "RateLimit-Policy": `"refill";q=1;w=2`,
		"Content-Type": "application/problem+json",
	})
	if !strings.Contains(body, `"violated-policies":["refill"]`) || !strings.Contains(body, "#quota-exceeded") {
		t.Errorf("429 body = %q, want the quota-exceeded problem naming refill", body)
	}
	ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 2 {
		t.Fatalf("Retry-After = %q, want 1 or 2", resp.Header.Get("Retry-After"))
	}
	// On a rejection t is Retry-After (the draft: never earlier than t).
	if got, want := resp.Header.Get("RateLimit"), `"refill";r=0;t=`+strconv.Itoa(ra); got != want {
		t.Errorf("429 RateLimit = %q, want %q", got, want)
	}
	time.Sleep(time.Duration(ra) * time.Second)
	resp, _, err = e.Get(ctx, "/refill", nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Errorf("after waiting Retry-After (%ds): status %d, want 200", ra, resp.StatusCode)
	}
}

// TestBadConfigStopsEnvoy: an invalid configuration makes the plugin refuse
// to start, Envoy refuses to start, and the log names the field, whatever
// the filter's failure_policy (operations.md, "Failure policy").
func TestBadConfigStopsEnvoy(t *testing.T) {
	envoytest.RequireEnvoy(t)
	for _, c := range []struct{ cfg, field, policy string }{
		{`{"rules":[{"name":"a","limit":1,"window":"1s"},{"name":"b","limit":1,"window":"soon"}]}`, "rules[1].window", ""},
		{`{"rules":[{"name":"a","limit":1,"window":"1s"}],"headres":"both"}`, "headres: unknown field", ""},
		{`{"rules":[{"name":"a","limit":0,"window":"1s"}]}`, "rules[0].limit", "FAIL_OPEN"},
		{`{"rules":[{"name":"a","limit":0,"window":"1s"}]}`, "rules[0].limit", "FAIL_RELOAD"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		e, err := envoytest.Start(ctx, envoytest.Options{Dir: t.TempDir(), Wasm: &envoytest.Wasm{File: sluiceWasm(t), Config: c.cfg, FailurePolicy: c.policy}})
		cancel()
		if err == nil {
			e.Stop()
			t.Errorf("Envoy started with %s (failure_policy %q)", c.cfg, c.policy)
			continue
		}
		var se *envoytest.StartError
		if !errors.As(err, &se) {
			t.Fatalf("unexpected error type %T: %v", err, err)
		}
		if !strings.Contains(se.Log, "sluice: invalid configuration: "+c.field) {
			t.Errorf("Envoy's log does not name %q:\n%s", c.field, tail(se.Log, 15))
		}
	}
}

func wantHeaders(t *testing.T, resp *http.Response, status int, want map[string]string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Errorf("status %d, want %d", resp.StatusCode, status)
	}
	for k, v := range want {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
}

// waitStat waits until an Envoy counter reaches want (the plugin publishes
// its counters from a once-a-second tick) and fails if it differs.
func waitStat(t *testing.T, e *envoytest.Envoy, name string, want uint64) {
	t.Helper()
	waitStatWithin(t, e, name, want, 5*time.Second)
}

// pollUntil calls done every 100 ms until it reports true or 5 s have
// passed (the plugin publishes its counters and gauges from a
// once-a-second tick): a wait for the stats flush that lasts only as long
// as the flush. The caller then asserts what it needs.
func pollUntil(done func() bool) {
	for deadline := time.Now().Add(5 * time.Second); !done() && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
}

func waitStatWithin(t *testing.T, e *envoytest.Envoy, name string, want uint64, within time.Duration) {
	t.Helper()
	var got uint64
	var err error
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got, err = e.Stat(name); err == nil && got == want {
			return
		}
	}
	t.Errorf("stat %s = %d (%v), want %d", name, got, err, want)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestStructConfiguration: the configuration may be a google.protobuf.Struct;
// Envoy then passes its JSON serialization, numbers as doubles.
func TestStructConfiguration(t *testing.T) {
	threeAdmitted(t, "Struct configuration", &envoytest.Wasm{
		File:           sluiceWasm(t),
		Config:         `{"rules": [{"name": "s", "limit": 3, "window": "1h", "burst": 3}], "status": 429, "max_keys": 1000, "client_ip": {"ipv6_prefix": 64}}`,
		ConfigAsStruct: true,
	})
}

// threeAdmitted runs Envoy with w, a configuration of a rule of 3 an hour
// however encoded, and checks that 3 of 5 requests are admitted and say so.
func threeAdmitted(t *testing.T, what string, w *envoytest.Wasm) {
	t.Helper()
	e := envoytest.StartT(t, envoytest.Options{Wasm: w})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Requests: 5, Concurrency: 1, KeepResponses: true})
	if res.Count(200) != 3 || res.Count(429) != 2 {
		t.Fatalf("%s: %v, want 3 admitted", what, res.Status)
	}
	if got := res.Responses[0].Header.Get("X-RateLimit-Limit"); got != "3" {
		t.Errorf("%s: X-RateLimit-Limit %q, want 3", what, got)
	}
}

// TestNoVMID: a filter without vm_config.vm_id (Envoy's default, the empty
// shared-data namespace) keeps one budget across its workers.
func TestNoVMID(t *testing.T) {
	e := envoytest.StartT(t, envoytest.Options{Concurrency: 2, Wasm: &envoytest.Wasm{
		File: sluiceWasm(t), Config: `{"rules": [{"name": "n", "limit": 5, "window": "1h"}]}`, NoVMID: true,
	}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Requests: 40, Concurrency: 8})
	if res.Count(200) != 5 || res.Count(429) != 35 {
		t.Fatalf("without a vm_id: %v, want 5 admitted and 35 refused", res.Status)
	}
}

// TestBytesValueConfiguration: the configuration may be a
// google.protobuf.BytesValue (base64 in YAML): Envoy passes its bytes as
// they are (anyToBytes in source/extensions/common/wasm/wasm.cc), the JSON
// a StringValue would carry.
func TestBytesValueConfiguration(t *testing.T) {
	threeAdmitted(t, "BytesValue configuration", &envoytest.Wasm{
		File:          sluiceWasm(t),
		Config:        `{"rules": [{"name": "b", "limit": 3, "window": "1h"}], "headers": "legacy"}`,
		ConfigAsBytes: true,
	})
}
