package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// The fleet compose file's images besides sluice-envoy (envoy/fleet/images).
var fleetImages = []string{"sluice-redis:7.0", "sluice-ratelimit:3fb702589d36", "sluice-store:local"}

// TestFleetComposeFiles: the three members' bootstraps differ only in their
// ports and node id, and each logs Sluice's decision and rule in its access
// log (TestFleetCompose runs them).
func TestFleetComposeFiles(t *testing.T) {
	t.Parallel()
	root := mustRepoRoot(t)
	dir := filepath.Join(root, "envoy", "fleet")
	norm := regexp.MustCompile(`\b(1000[1-3]|991[1-3])\b|sluice-fleet-[1-3]|member [1-3] of`)
	var first string
	for n := 1; n <= 3; n++ {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("envoy-%d.yaml", n)))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{fmt.Sprintf("port_value: 1000%d", n), fmt.Sprintf("port_value: 991%d", n), fmt.Sprintf("id: sluice-fleet-%d", n),
			"sluice_decision=%FILTER_STATE(wasm.sluice_decision:PLAIN)%", "sluice_rule=%FILTER_STATE(wasm.sluice_rule:PLAIN)%"} {
			if !strings.Contains(string(b), want) {
				t.Errorf("envoy-%d.yaml lacks %q", n, want)
			}
		}
		s := norm.ReplaceAllString(string(b), "N")
		if n == 1 {
			first = s
		} else if s != first {
			t.Errorf("envoy-%d.yaml differs from envoy-1.yaml beyond ports and node id", n)
		}
	}
	compose := readYAMLFile(t, filepath.Join(dir, "docker-compose.yaml"))
	for n := 1; n <= 3; n++ {
		svc := yamlGet(t, compose, "services", fmt.Sprintf("envoy-%d", n))
		if img := yamlStr(t, svc, "image"); img != envoytest.DefaultImage {
			t.Errorf("envoy-%d image %q", n, img)
		}
		var args []string
		for _, a := range yamlGet(t, svc, "command").([]any) {
			args = append(args, a.(string))
		}
		if got := strings.Join(args, " "); !strings.Contains(got, fmt.Sprintf("--base-id 1%d", n)) {
			t.Errorf("envoy-%d command %q: want --base-id 1%d (distinct on the host network)", n, got, n)
		}
	}
}

// TestFleetCompose brings envoy/fleet/docker-compose.yaml up as a user does
// (three Envoys, envoyproxy/ratelimit, Redis and the demo store, all in
// containers of the local images) and checks, with requests round-robined
// over the three Envoys from one client, that the global rule "products"
// (60 per minute) admits at most 60 (and at least 54) of 180 across the
// fleet, while the local rule "cart" (60 per minute in each Envoy) admits 60
// in each, 180 of 240. The compose file's ports are fixed, so test runs on
// the machine take turns through a lock and wait for the ports to be free.
func TestFleetCompose(t *testing.T) {
	t.Parallel()
	envoytest.RequireCompose(t, envoytest.DefaultImage)
	for _, img := range fleetImages {
		envoytest.RequireDocker(t, img)
	}
	root := mustRepoRoot(t)
	sluiceWasm(t)
	envoytest.LockMachine(t, "sluice-compose-fleet", 5*time.Minute)
	envoytest.WaitPortsFree(t, time.Minute, 10001, 10002, 10003, 9911, 9912, 9913, 16379, 18080, 18081, 18082, 18083)

	c := envoytest.ComposeT(t, filepath.Join(root, "envoy", "fleet", "docker-compose.yaml"))
	start := time.Now()
	c.Up(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	client := envoytest.NewClient(16)
	defer client.CloseIdleConnections()
	get := func(url string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		resp.Body.Close()
		return resp, nil
	}
	// Ready: each Envoy's admin /ready, and the service's /healthcheck
	// (200 once it reaches Redis).
	for _, u := range []string{"http://127.0.0.1:18082/healthcheck", "http://127.0.0.1:9911/ready", "http://127.0.0.1:9912/ready", "http://127.0.0.1:9913/ready"} {
		for {
			if resp, err := get(u); err == nil && resp.StatusCode == 200 {
				break
			}
			if ctx.Err() != nil {
				cs, _ := c.Containers(context.Background())
				t.Fatalf("%s never answered 200; containers:\n%s", u, strings.Join(cs, "\n"))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	cs, err := c.Containers(ctx)
	if err != nil || len(cs) != 6 {
		t.Fatalf("containers %q (%v), want 6", cs, err)
	}
	t.Logf("docker-compose up: ready in %v:\n%s", time.Since(start).Round(time.Millisecond), strings.Join(cs, "\n"))

	const limit, sent = 60, 180
	// round sends n GETs for path, request i to Envoy i%3, from 6 senders,
	// and returns the admitted count per Envoy and one 429.
	round := func(path string, n int) ([3]int, *http.Response) {
		var per [3]atomic.Int64
		var next atomic.Int64
		var mu sync.Mutex
		var rejected *http.Response
		var wg sync.WaitGroup
		for w := 0; w < 6; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := next.Add(1) - 1
					if i >= int64(n) {
						return
					}
					resp, err := get(fmt.Sprintf("http://127.0.0.1:%d%s", 10001+i%3, path))
					if err != nil {
						t.Error(err)
						return
					}
					switch resp.StatusCode {
					case 200:
						per[i%3].Add(1)
					case 429:
						mu.Lock()
						rejected = resp
						mu.Unlock()
					default:
						t.Errorf("GET %s: status %d", path, resp.StatusCode)
					}
				}
			}()
		}
		wg.Wait()
		return [3]int{int(per[0].Load()), int(per[1].Load()), int(per[2].Load())}, rejected
	}
	sum := func(a [3]int) int { return a[0] + a[1] + a[2] }

	// The service counts in fixed windows aligned on the wall-clock minute:
	// the run is judged within one. The client is the same for every run
	// (the key is client_ip), so a run that crossed the top of a minute (a
	// loaded machine: the counts span two windows) is sent again from the
	// start of the next window, up to 3 times.
	var (
		t0                  time.Time
		minute              int64
		global              [3]int
		rej                 *http.Response
		failOpen, forwarded int
	)
	for attempt := 1; ; attempt++ {
		left := time.Until(time.Now().Truncate(time.Minute).Add(time.Minute))
		if attempt > 1 || left < 15*time.Second {
			t.Logf("waiting %v for the next minute window", left.Round(time.Millisecond))
			time.Sleep(left + 200*time.Millisecond)
		}
		minute, t0 = time.Now().Unix()/60, time.Now()
		failOpen0 := fleetStat(ctx, t, "wasmcustom.sluice.on_error.allowed")
		global, rej = round("/products", sent)
		forwarded += sum(global) // every run's reach the store
		// on_error is "allow" with a 100 ms timeout on the service: a call
		// that fails or times out (a loaded machine) lets its request
		// through, as configured. The budget holds for the requests the
		// service decided.
		failOpen = fleetStat(ctx, t, "wasmcustom.sluice.on_error.allowed") - failOpen0
		if time.Now().Unix()/60 == minute {
			break
		}
		if attempt == 3 {
			t.Fatalf("three runs crossed a minute boundary (the last took %v)", time.Since(t0).Round(time.Millisecond))
		}
		t.Logf("the run crossed a minute boundary (took %v, admitted %v): again in the next window", time.Since(t0).Round(time.Millisecond), global)
	}
	t.Logf("global rule products (%d/min): %d requests round-robin over 3 Envoys, admitted %d (per Envoy %v, %d of them by on_error: allow; call failures %d) in %v",
		limit, sent, sum(global), global, failOpen, fleetStat(ctx, t, "wasmcustom.sluice.global.call_failures"), time.Since(t0).Round(time.Millisecond))
	if n := sum(global); n-failOpen > limit || n < limit*9/10 {
		t.Errorf("global rule admitted %d across the fleet (%d by on_error: allow), want between %d and %d", n, failOpen, limit*9/10, limit)
	}
	for i, n := range global {
		if n == 0 {
			t.Errorf("envoy-%d admitted nothing: the round-robin did not reach it", i+1)
		}
	}
	if rej == nil {
		t.Fatal("no 429 from the global rule")
	}
	if ra, err := strconv.Atoi(rej.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Errorf("Retry-After %q", rej.Header.Get("Retry-After"))
	}

	const sentLocal = 240 // 80 to each Envoy
	local, _ := round("/cart", sentLocal)
	t.Logf("local rule cart (%d/min in each Envoy): %d requests round-robin, admitted %d (per Envoy %v) in %v", limit, sentLocal, sum(local), local, time.Since(t0).Round(time.Millisecond))
	if time.Now().Unix()/60 == minute {
		if local != [3]int{limit, limit, limit} {
			t.Errorf("local rule admitted %v, want %d in each Envoy", local, limit)
		}
	} else if n := sum(local); n < 3*limit {
		t.Errorf("local rule admitted %d across three Envoys, want at least %d (each its own %d)", n, 3*limit, limit)
	}

	// The store saw exactly what the Envoys admitted.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:18080/metrics", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct {
		Endpoints map[string]struct {
			Received int64 `json:"received"`
		} `json:"endpoints"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.Endpoints["GET /products"].Received; got != int64(forwarded) {
		t.Errorf("the store received %d GET /products, the Envoys admitted %d", got, forwarded)
	}
	if got := m.Endpoints["GET /cart"].Received; got != int64(sum(local)) {
		t.Errorf("the store received %d GET /cart, the Envoys admitted %d", got, sum(local))
	}
}

// fleetStat sums the counter name over the three Envoys of the compose
// fleet (their admin ports 9911-9913).
func fleetStat(ctx context.Context, t *testing.T, name string) int {
	t.Helper()
	n := 0
	for port := 9911; port <= 9913; port++ {
		u := fmt.Sprintf("http://127.0.0.1:%d/stats?filter=%s", port, url.QueryEscape("^"+regexp.QuoteMeta(name)+"$"))
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("stats of envoy on %d: %v", port, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		n += int(envoytest.ParseStats(string(b))[name])
	}
	return n
}
