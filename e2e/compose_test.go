package e2e_test

import (
	"context"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// TestDockerComposeUp runs the shipped envoy/docker-compose.yaml as a user
// does (`docker-compose -f envoy/docker-compose.yaml up -d`), with the image
// `make image` builds and build/sluice.wasm, in front of a backend on the
// store address envoy.yaml names, and checks the checkout rule: a burst of 2,
// then 429 with Retry-After. The file's ports are fixed (10000, 9901, 8080),
// so test runs on the machine take turns through a lock and wait for the
// ports to be free.
func TestDockerComposeUp(t *testing.T) {
	t.Parallel()
	envoytest.RequireCompose(t, envoytest.DefaultImage)
	root := mustRepoRoot(t)
	sluiceWasm(t)
	envoytest.LockMachine(t, "sluice-compose-demo", 5*time.Minute)
	envoytest.WaitPortsFree(t, time.Minute, 8080, 9901, 10000)

	// The port was free a moment ago; bind it, retrying while something
	// else on the machine holds it for a moment.
	store, err := envoytest.StartUpstreamOn("127.0.0.1:8080")
	for deadline := time.Now().Add(30 * time.Second); err != nil && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		store, err = envoytest.StartUpstreamOn("127.0.0.1:8080")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	c := envoytest.ComposeT(t, filepath.Join(root, "envoy", "docker-compose.yaml"))
	start := time.Now()
	c.Up(t)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client := envoytest.NewClient(4)
	defer client.CloseIdleConnections()
	for {
		resp, err := client.Get("http://127.0.0.1:9901/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if cs, _ := c.Containers(ctx); len(cs) == 1 && !strings.HasSuffix(cs[0], " running") {
			t.Fatalf("the container is not running: %s", cs[0])
		}
		select {
		case <-ctx.Done():
			t.Fatal("Envoy in docker-compose: admin 127.0.0.1:9901/ready never answered 200")
		case <-time.After(200 * time.Millisecond):
		}
	}
	cs, err := c.Containers(ctx)
	if err != nil || len(cs) != 1 || strings.Fields(cs[0])[1] != envoytest.DefaultImage {
		t.Fatalf("containers %q (%v), want one of %s", cs, err, envoytest.DefaultImage)
	}
	t.Logf("docker-compose up: %s ready in %v", cs[0], time.Since(start).Round(time.Millisecond))

	// checkout: POST /checkout*, token bucket 5 per minute, burst 2.
	var codes []int
	var last *http.Response
	for i := 0; i < 3; i++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1:10000/checkout", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		last = resp
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
		t.Fatalf("POST /checkout ×3: %v, want 200 200 429 (burst 2)", codes)
	}
	ra, err := strconv.Atoi(last.Header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 60 {
		t.Errorf("Retry-After %q, want whole seconds in [1, 60]", last.Header.Get("Retry-After"))
	}
	if got := last.Header.Get("RateLimit-Policy"); !strings.HasPrefix(got, `"checkout";q=5;w=60`) {
		t.Errorf("RateLimit-Policy %q", got)
	}
	if n := store.Count("/checkout"); n != 2 {
		t.Errorf("the store saw %d checkouts, want 2", n)
	}
	t.Logf("POST /checkout ×3 → %v, Retry-After: %s, %s: %s", codes, last.Header.Get("Retry-After"),
		"X-RateLimit-Remaining", last.Header.Get("X-RateLimit-Remaining"))
}

// TestImage checks the image `make image` builds as the contract names it:
// Envoy 1.40 as the entrypoint (arguments pass straight to envoy), the
// plugin baked in at /etc/envoy/sluice.wasm and envoy/envoy.yaml as the
// default bootstrap: validating that bootstrap inside the image loads the
// baked plugin in V8 and runs its start-up on the example configuration.
func TestImage(t *testing.T) {
	t.Parallel()
	envoytest.RequireDocker(t, envoytest.DefaultImage)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, "docker", append([]string{"run", "--rm", "--network", "none", envoytest.DefaultImage}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("docker run %s %v: %v\n%s", envoytest.DefaultImage, args, err, out)
		}
		return string(out)
	}
	if v := run("--version"); !strings.Contains(v, "/1.40.0/") {
		t.Errorf("envoy --version in the image: %q, want 1.40.0", v)
	}
	out := run("--mode", "validate", "-c", "/etc/envoy/envoy.yaml")
	if !strings.Contains(out, "configuration '/etc/envoy/envoy.yaml' OK") || !strings.Contains(out, "sluice: started: 3 rule(s)") {
		t.Errorf("validating the default bootstrap with the baked plugin:\n%s", out)
	}
}
