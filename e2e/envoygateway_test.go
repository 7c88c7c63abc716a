package e2e_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// The Envoy Gateway test: Sluice deployed as Envoy Gateway users deploy it,
// from the Gateway API resources shipped in envoy/deploy/envoy-gateway/,
// with Envoy Gateway (v1.9.1, `make envoy-gateway`) in standalone mode:
// resources read from a directory, Envoy 1.40.0 run as a local process and
// configured over xDS, as a cluster's Envoy would be. What standalone mode
// needs on top of the shipped resources is standalone.yaml (a Backend for
// the upstream, the EnvoyPatchPolicy that points Envoy Gateway's wasm
// cluster at the local server) and standalone-config.yaml (Envoy Gateway's
// own configuration); docs/deploy-envoy-gateway.md follows this test.

// egEnvoyVersion is the Envoy Envoy Gateway runs: the wheel's.
const egEnvoyVersion = "1.40.0"

// egListener is the Gateway's listener (gateway.yaml: port 8888), bound to
// loopback by standalone.yaml.
const egListener = "127.0.0.1:8888"

// egFixture is one running Envoy Gateway and what the test serves it.
type egFixture struct {
	t        *testing.T
	gw       *envoytest.Gateway
	up       *envoytest.Upstream
	client   *http.Client // a new connection per request: a listener update never leaves it on the old filter chain
	from     atomic.Value // the client's address (a string, 127.0.0.N): each step is a new client for client_ip rules
	wasmURL  string       // build/sluice.wasm over HTTP on loopback
	wasmSHA  string       // its sha256
	wasmHits atomic.Int64
	image    string // REGISTRY/sluice:e2e, built from envoy/deploy/oci/Dockerfile
	digest   string // its manifest digest (hex), as `docker push` prints it
}

// shippedEG returns a file of envoy/deploy/envoy-gateway/.
func shippedEG(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(mustRepoRoot(t), "envoy", "deploy", "envoy-gateway", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// replaceOnce replaces the one occurrence of old in s, failing the test if
// the shipped file no longer has it exactly once.
func replaceOnce(t *testing.T, s, old, new, file string) string {
	t.Helper()
	if n := strings.Count(s, old); n != 1 {
		t.Fatalf("%s: %q occurs %d times, want once (the test edits what the file's comments tell users to edit)", file, old, n)
	}
	return strings.Replace(s, old, new, 1)
}

// httpPolicy is envoyextensionpolicy-http.yaml with what its comments tell
// users to set: the URL of the module and its sha256.
func (f *egFixture) httpPolicy() string {
	const file = "envoyextensionpolicy-http.yaml"
	p := shippedEG(f.t, file)
	p = replaceOnce(f.t, p, "url: https://artifacts.example.com/sluice/0.1.0/sluice.wasm", "url: "+f.wasmURL, file)
	return replaceOnce(f.t, p, "# sha256: <64 hex digits of sha256sum build/sluice.wasm>", "sha256: "+f.wasmSHA, file)
}

// imagePolicy is an Image policy file (envoyextensionpolicy.yaml or
// envoyextensionpolicy-global.yaml) with the image pushed to the test's
// registry, pinned by its digest.
func (f *egFixture) imagePolicy(file string) string {
	p := shippedEG(f.t, file)
	return replaceOnce(f.t, p, "url: registry.example.com/sluice:0.1.0",
		"url: "+f.image+"\n        sha256: "+f.digest, file)
}

// startEG takes the machine's Envoy Gateway lock, then starts the
// upstream, the wasm HTTP server, the registry with the image, and Envoy
// Gateway on gateway.yaml, standalone.yaml and the resources given; all of
// it is stopped in t.Cleanup, whatever happens.
func startEG(t *testing.T, withImage bool, resources func(f *egFixture) map[string]string) *egFixture {
	t.Helper()
	egBin, registryBin, envoyBin := envoytest.RequireGatewayParts(t)
	wasm := sluiceWasm(t)
	// Envoy Gateway's ports are fixed: test runs on the machine (other
	// worktrees) take turns.
	envoytest.LockMachine(t, "sluice-envoy-gateway", 10*time.Minute)
	if pids := envoytest.ReapGatewayLeftovers(); len(pids) > 0 {
		t.Logf("killed processes %v left by an Envoy Gateway test run that was killed", pids)
	}
	envoytest.WaitPortsFree(t, time.Minute, append(envoytest.GatewayPorts, 8888)...)
	f := &egFixture{t: t}
	f.from.Store("127.0.0.1")
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		local := &net.TCPAddr{IP: net.ParseIP(f.from.Load().(string))}
		return (&net.Dialer{Timeout: 5 * time.Second, LocalAddr: local}).DialContext(ctx, network, addr)
	}
	f.client = &http.Client{
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil, DialContext: dial},
		Timeout:   10 * time.Second,
	}
	dir := t.TempDir()
	var err error
	if f.up, err = envoytest.StartUpstream(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.up.Close() })
	f.serveWasm(t, wasm)
	if withImage {
		f.pushImage(t, registryBin, wasm, dir)
	}

	host, port, _ := net.SplitHostPort(f.up.Addr())
	standalone, err := envoytest.Expand(shippedEG(t, "standalone.yaml"), map[string]string{
		"EG_CONFIG_HOME": filepath.Join(dir, "eg", "config"), "BACKEND_ADDRESS": host, "BACKEND_PORT": port})
	if err != nil {
		t.Fatalf("standalone.yaml: %v", err)
	}
	all := map[string]string{"gateway.yaml": shippedEG(t, "gateway.yaml"), "standalone.yaml": standalone}
	for name, r := range resources(f) {
		all[name] = r
	}
	config := shippedEG(t, "standalone-config.yaml")
	if !strings.Contains(config, `envoyVersion: "`+egEnvoyVersion+`"`) {
		t.Fatalf("standalone-config.yaml does not ask for Envoy %s, the one the test links (it would download another)", egEnvoyVersion)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f.gw, err = envoytest.StartGateway(ctx, envoytest.GatewayOptions{
		Bin: egBin, Envoy: envoyBin, EnvoyVersion: egEnvoyVersion, Dir: filepath.Join(dir, "eg"),
		Config: config, Resources: all,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pids := f.gw.Pids()
		f.gw.Stop()
		if t.Failed() {
			t.Logf("Envoy Gateway (pids %v) log tail:\n%s", pids, tail(f.gw.Logs(), 60))
		}
	})
	return f
}

// serveWasm serves the module on a loopback port, as an artifact server
// would, and counts the downloads.
func (f *egFixture) serveWasm(t *testing.T, wasm string) {
	b, err := os.ReadFile(wasm)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	f.wasmSHA = hex.EncodeToString(sum[:])
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/sluice/sluice.wasm" {
			http.NotFound(w, r)
			return
		}
		f.wasmHits.Add(1)
		w.Header().Set("Content-Type", "application/wasm")
		_, _ = w.Write(b)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	f.wasmURL = "http://" + ln.Addr().String() + "/sluice/sluice.wasm"
}

var pushDigestRE = regexp.MustCompile(`digest: sha256:([0-9a-f]{64})`)

// pushImage starts the registry, builds the image from
// envoy/deploy/oci/Dockerfile (the context: a directory holding
// sluice.wasm, as build/ does) and pushes it; the image is removed from
// Docker's store at the end.
func (f *egFixture) pushImage(t *testing.T, registryBin, wasm, dir string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	reg, err := envoytest.StartRegistry(ctx, registryBin, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	buildCtx := filepath.Join(dir, "oci")
	if err := os.MkdirAll(buildCtx, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(wasm)
	if err == nil {
		err = os.WriteFile(filepath.Join(buildCtx, "sluice.wasm"), b, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	f.image = reg.Addr + "/sluice:e2e"
	docker := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	docker("build", "-q", "-f", filepath.Join(mustRepoRoot(t), "envoy", "deploy", "oci", "Dockerfile"), "-t", f.image, buildCtx)
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", f.image).Run() })
	m := pushDigestRE.FindStringSubmatch(docker("push", f.image))
	if m == nil {
		t.Fatalf("docker push %s printed no digest", f.image)
	}
	f.digest = m[1]
}

// egResponse is what a client got from the Gateway.
type egResponse struct {
	status int
	header http.Header
	err    error
}

func (r egResponse) String() string {
	if r.err != nil {
		return "error: " + r.err.Error()
	}
	return fmt.Sprintf("%d (RateLimit-Policy %q)", r.status, r.header.Get("RateLimit-Policy"))
}

// do sends one request to the Gateway's listener, on a new connection.
func (f *egFixture) do(method, path string, h http.Header) egResponse {
	req, err := http.NewRequest(method, "http://"+egListener+path, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return egResponse{err: err}
	}
	resp.Body.Close()
	return egResponse{status: resp.StatusCode, header: resp.Header}
}

// burst sends n requests one after the other and returns their statuses
// and the last response.
func (f *egFixture) burst(method, path string, h http.Header, n int) ([]int, egResponse) {
	codes := make([]int, 0, n)
	var last egResponse
	for i := 0; i < n; i++ {
		last = f.do(method, path, h)
		if last.err != nil {
			f.t.Fatalf("request %d of %d: %v", i+1, n, last.err)
		}
		codes = append(codes, last.status)
	}
	return codes, last
}

// waitFor probes until ok accepts a response (at most wait) and returns
// the time it took and the responses seen before, by kind.
func (f *egFixture) waitFor(what string, wait time.Duration, probe func() egResponse, ok func(egResponse) bool) (time.Duration, map[string]int) {
	f.t.Helper()
	start := time.Now()
	seen := map[string]int{}
	for {
		r := probe()
		if ok(r) {
			return time.Since(start), seen
		}
		seen[r.kind()]++
		if f.gw.Exited() {
			f.t.Fatalf("%s: Envoy Gateway exited", what)
		}
		if m := egLoadError.FindString(f.gw.Logs()); m != "" {
			f.t.Fatalf("%s: Envoy Gateway could not load the resources: %s", what, m)
		}
		if time.Since(start) > wait {
			f.t.Fatalf("%s: not after %v; seen %v; last: %v", what, wait, seen, r)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// egLoadError is Envoy Gateway's log line for a resource file it could not
// read (its file provider then ignores the whole directory) or for an Envoy
// that exited at start.
var egLoadError = regexp.MustCompile(`failed to (re)?load resources.*|failed to run envoy.*`)

// kind classifies a response for the logs: an error, or the status and
// whether Sluice's headers were on it.
func (r egResponse) kind() string {
	switch {
	case r.err != nil:
		if strings.Contains(r.err.Error(), "connection refused") {
			return "connection refused"
		}
		return "error"
	case r.header.Get("RateLimit-Policy") != "":
		return fmt.Sprintf("%d limited", r.status)
	default:
		return fmt.Sprintf("%d unlimited", r.status)
	}
}

// onlyKinds fails the test if a response seen while waiting was of another
// kind than allowed: no request may pass unlimited while the gateway starts
// or switches configurations.
func onlyKinds(t *testing.T, what string, seen map[string]int, allowed ...string) {
	t.Helper()
	for k, n := range seen {
		ok := false
		for _, a := range allowed {
			ok = ok || k == a || strings.HasSuffix(k, a)
		}
		if !ok {
			t.Errorf("%s: %d responses %q (want only %v)", what, n, k, allowed)
		}
	}
}

// hasPolicy reports whether a response carries Sluice's policy header for
// a rule with quota q, e.g. `"login";q=10`.
func hasPolicy(rule string, q int) func(egResponse) bool {
	want := fmt.Sprintf(`"%s";q=%d;`, rule, q)
	return func(r egResponse) bool {
		return r.err == nil && strings.Contains(r.header.Get("RateLimit-Policy"), want)
	}
}

// checkRejection checks Sluice's 429: status, Retry-After, draft and legacy
// headers naming the rule.
func checkRejection(t *testing.T, r egResponse, rule string) {
	t.Helper()
	if r.status != 429 {
		t.Fatalf("want Sluice's 429, got %v", r)
	}
	for _, h := range []string{"Retry-After", "RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
		if r.header.Get(h) == "" {
			t.Errorf("429 without %s: %v", h, r.header)
		}
	}
	if !strings.Contains(r.header.Get("RateLimit-Policy"), `"`+rule+`"`) {
		t.Errorf("RateLimit-Policy %q does not name rule %s", r.header.Get("RateLimit-Policy"), rule)
	}
}

// TestEnvoyGateway runs Sluice through Envoy Gateway as its users do, on
// one running gateway, changing the resources as a user applies changes:
// the HTTP policy (a burst refused with Sluice's 429), the Image policy
// (replacing it), two configuration updates (one that keeps every rule, one
// that changes a rule), and a global rule with the rate-limit service's
// cluster added by an EnvoyPatchPolicy.
func TestEnvoyGateway(t *testing.T) {
	t.Parallel()
	start := time.Now()
	f := startEG(t, true, func(f *egFixture) map[string]string {
		return map[string]string{"sluice.yaml": f.httpPolicy()}
	})
	steps := []struct {
		name string
		run  func(*testing.T, *egFixture)
	}{
		{"HTTPSource", egHTTPSource},
		{"ImageSource", egImageSource},
		{"UpdateKeepingRules", egUpdateKeepingRules},
		{"UpdateChangingARule", egUpdateChangingARule},
		{"InvalidUpdateFailOpenFalse", func(t *testing.T, f *egFixture) { egInvalidUpdate(t, f, false) }},
		{"InvalidUpdateFailOpenTrue", func(t *testing.T, f *egFixture) { egInvalidUpdate(t, f, true) }},
		{"GlobalRule", egGlobalRule},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { f.t = t; s.run(t, f) }) {
			break
		}
	}
	f.t = t
	t.Logf("Envoy Gateway test: %v in all", time.Since(start).Round(100*time.Millisecond))
}

// egHTTPSource: the shipped HTTP policy (per-client: 1200 per minute, burst
// 200, on the HTTPRoute) loaded by a fresh gateway; a burst from one client
// ends in Sluice's 429.
func egHTTPSource(t *testing.T, f *egFixture) {
	took, seen := f.waitFor("the HTTP policy in force", 3*time.Minute,
		func() egResponse { return f.do("GET", "/", nil) }, hasPolicy("per-client", 1200))
	t.Logf("gateway started, module fetched over HTTP (%d downloads): limited after %v; before: %v",
		f.wasmHits.Load(), took.Round(100*time.Millisecond), seen)
	// The listener binds only once the module is loaded: nothing passes unlimited.
	onlyKinds(t, "while the gateway started", seen, "connection refused")
	if f.wasmHits.Load() < 1 {
		t.Errorf("the module server saw no download")
	}
	admitted, rejected, last, elapsed := f.concurrentBurst("GET", "/burst", nil, 400, 8)
	// Token bucket: at most the burst (200) plus what refilled meanwhile (20/s).
	if max := 200 + int(20*elapsed.Seconds()) + 1; admitted > max || rejected == 0 {
		t.Fatalf("400 requests in %v: %d admitted, %d refused; want at most %d admitted and the rest refused", elapsed, admitted, rejected, max)
	}
	checkRejection(t, last, "per-client")
	if n := f.up.Count("/burst"); n != admitted {
		t.Errorf("the upstream saw %d requests, the client %d admitted", n, admitted)
	}
	t.Logf("burst of 400 (8 at once) in %v: %d admitted, %d refused; a 429: Retry-After %s, RateLimit %q, RateLimit-Policy %q",
		elapsed.Round(time.Millisecond), admitted, rejected, last.header.Get("Retry-After"), last.header.Get("RateLimit"), last.header.Get("RateLimit-Policy"))
}

// concurrentBurst sends n requests with workers at once and returns the
// admitted and refused counts, one 429 and the time it took; any other
// status fails the test.
func (f *egFixture) concurrentBurst(method, path string, h http.Header, n, workers int) (admitted, rejected int, last egResponse, elapsed time.Duration) {
	var ok, no, next atomic.Int64
	var one atomic.Value
	done := make(chan struct{})
	start := time.Now()
	for w := 0; w < workers; w++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for next.Add(1) <= int64(n) {
				r := f.do(method, path, h)
				switch {
				case r.err != nil:
					f.t.Errorf("%s %s: %v", method, path, r.err)
					return
				case r.status == 200:
					ok.Add(1)
				case r.status == 429:
					no.Add(1)
					one.Store(r)
				default:
					f.t.Errorf("%s %s: %v", method, path, r)
					return
				}
			}
		}()
	}
	for w := 0; w < workers; w++ {
		<-done
	}
	elapsed = time.Since(start)
	if r, isResp := one.Load().(egResponse); isResp {
		last = r
	}
	return int(ok.Load()), int(no.Load()), last, elapsed
}

// untilRefused sends requests one after the other until one is refused
// (at most max) and returns how many were admitted and the refusal.
func (f *egFixture) untilRefused(method, path string, h http.Header, max int) (int, egResponse) {
	f.t.Helper()
	for i := 0; i < max; i++ {
		r := f.do(method, path, h)
		switch {
		case r.err != nil:
			f.t.Fatalf("%s %s: %v", method, path, r.err)
		case r.status == 429:
			return i, r
		case r.status != 200:
			f.t.Fatalf("%s %s: %v", method, path, r)
		}
	}
	f.t.Fatalf("%s %s: %d admitted, none refused", method, path, max)
	return 0, egResponse{}
}

// egImageSource: the shipped Image policy (on the Gateway, three rules)
// replaces the HTTP one on the running gateway; POST /login (sliding window,
// 10 per minute) admits 10.
func egImageSource(t *testing.T, f *egFixture) {
	// A new client: the HTTP step's burst left 127.0.0.1 with an empty
	// per-client bucket, which would be the rule the headers report.
	f.from.Store("127.0.0.2")
	if err := f.gw.Apply("sluice.yaml", f.imagePolicy("envoyextensionpolicy.yaml")); err != nil {
		t.Fatal(err)
	}
	took, seen := f.waitFor("the Image policy in force", 2*time.Minute,
		func() egResponse { return f.do("POST", "/login", nil) }, hasPolicy("login", 10))
	t.Logf("Image policy applied to the running gateway: in force after %v; before: %v", took.Round(100*time.Millisecond), seen)
	onlyKinds(t, "while the policy was replaced", seen, " limited")
	n, r := f.untilRefused("POST", "/login", nil, 20)
	checkRejection(t, r, "login")
	if n != 9 {
		t.Fatalf("POST /login: %d admitted after the first, want 9 (10 per minute)", n)
	}
	t.Logf("POST /login: 10 admitted, then %v, Retry-After %s", r, r.header.Get("Retry-After"))
}

// setConfig rewrites the running Image policy with edit applied to the
// shipped file's text.
func (f *egFixture) setConfig(edits ...[2]string) {
	f.t.Helper()
	p := f.imagePolicy("envoyextensionpolicy.yaml")
	for _, e := range edits {
		p = replaceOnce(f.t, p, e[0], e[1], "envoyextensionpolicy.yaml")
	}
	if err := f.gw.Apply("sluice.yaml", p); err != nil {
		f.t.Fatal(err)
	}
}

// egUpdateKeepingRules: a configuration change that keeps every rule
// (headers: both → draft) takes effect on the running gateway, and the
// clients' state survives it: /login stays refused.
func egUpdateKeepingRules(t *testing.T, f *egFixture) {
	f.setConfig([2]string{"headers: both", "headers: draft"})
	took, seen := f.waitFor("headers: draft in force", 2*time.Minute,
		func() egResponse { return f.do("GET", "/", nil) },
		func(r egResponse) bool {
			return r.err == nil && r.header.Get("RateLimit-Policy") != "" && r.header.Get("X-RateLimit-Limit") == ""
		})
	t.Logf("update (headers: draft) in force after %v; before: %v", took.Round(100*time.Millisecond), seen)
	onlyKinds(t, "while the configuration changed", seen, " limited")
	if r := f.do("POST", "/login", nil); r.status != 429 {
		t.Fatalf("POST /login after an update that kept the rule: %v, want 429 (its state kept)", r)
	}
}

// egUpdateChangingARule: changing the login rule's limit (10 → 12) takes
// effect, and the changed rule starts clean: 12 admitted.
func egUpdateChangingARule(t *testing.T, f *egFixture) {
	f.setConfig([2]string{"headers: both", "headers: draft"}, [2]string{"limit: 10\n", "limit: 12\n"})
	took, seen := f.waitFor("login limit 12 in force", 2*time.Minute,
		func() egResponse { return f.do("POST", "/login", nil) }, hasPolicy("login", 12))
	t.Logf("update (login limit 12) in force after %v; before: %v", took.Round(100*time.Millisecond), seen)
	onlyKinds(t, "while the configuration changed", seen, " limited")
	n, r := f.untilRefused("POST", "/login", nil, 20)
	if n != 11 {
		t.Fatalf("POST /login after the change: %d admitted after the first, want 11 (the changed rule starts clean at 12)", n)
	}
	t.Logf("POST /login after the change: 12 admitted, then %v", r)
}

// egGlobalRule: envoyextensionpolicy-global.yaml (partner-api: 100 per
// minute per API key, scope global) with ratelimit-cluster.yaml's
// EnvoyPatchPolicy adding the service's cluster, against envoyproxy/ratelimit
// on Redis: the 101st request of a key in a minute is refused by the service.
func egGlobalRule(t *testing.T, f *egFixture) {
	_, rls := envoytest.FleetT(t, map[string]string{"sluice.yaml": shippedRLSConfig(t)})
	host, port, _ := net.SplitHostPort(rls.GRPCAddr)
	cluster := replaceOnce(t, shippedEG(t, "ratelimit-cluster.yaml"),
		"socket_address: {address: ratelimit.ratelimit.svc.cluster.local, port_value: 8081}",
		"socket_address: {address: "+host+", port_value: "+port+"}", "ratelimit-cluster.yaml")
	if err := f.gw.Apply("ratelimit-cluster.yaml", cluster); err != nil {
		t.Fatal(err)
	}
	if err := f.gw.Apply("sluice.yaml", f.imagePolicy("envoyextensionpolicy-global.yaml")); err != nil {
		t.Fatal(err)
	}
	probe := http.Header{"X-Api-Key": {"probe"}}
	took, seen := f.waitFor("the global policy in force", 2*time.Minute,
		func() egResponse { return f.do("GET", "/api/orders", probe) }, hasPolicy("partner-api", 100))
	t.Logf("global policy and cluster applied: in force after %v; before: %v", took.Round(100*time.Millisecond), seen)
	onlyKinds(t, "while the policy was replaced", seen, " limited")
	// One window of the service counts the burst; a burst that crossed the
	// top of a minute is sent again, for a fresh key.
	base := fmt.Sprintf("k%d", time.Now().UnixNano())
	oneWindow(t, 10*time.Second, func(attempt string) func() {
		key := http.Header{"X-Api-Key": {base + attempt}}
		admitted, rejected, last, elapsed := f.concurrentBurst("GET", "/api/orders", key, 130, 4)
		return func() {
			if admitted != 100 || rejected != 30 {
				t.Fatalf("130 requests of one key in one minute: %d admitted, %d refused; want 100 and 30", admitted, rejected)
			}
			checkRejection(t, last, "partner-api")
			t.Logf("130 requests of one API key in %v: %d admitted, %d refused by the service; a 429: %q",
				elapsed.Round(time.Millisecond), admitted, rejected, last.header.Get("RateLimit-Policy"))
		}
	})
}

// badConfig is the typo the failOpen scenarios apply: an algorithm name
// Sluice does not know, which it rejects at start with the field named.
var badConfig = [2]string{"algorithm: sliding_window", "algorithm: sliding_windw"}

// egRejectedLogged counts Envoy Gateway's log line for an update its Envoy
// rejected (a NACK).
func (f *egFixture) egRejectedLogged() int {
	return strings.Count(f.gw.Logs(), "Envoy rejected the last update")
}

// egInvalidUpdate: a configuration Sluice rejects (an algorithm misspelt),
// applied to the running gateway with failOpen false or true. Measured:
// Envoy rejects the listener update (Sluice refuses to start in the canary
// VM), whatever failOpen, and keeps the last good configuration: /login is
// still limited by the previous step's rule (12 per minute, exhausted).
func egInvalidUpdate(t *testing.T, f *egFixture, failOpen bool) {
	invalid, nacks := f.invalidLogged(), f.egRejectedLogged()
	edits := [][2]string{{"headers: both", "headers: draft"}, {"limit: 10\n", "limit: 12\n"}, badConfig}
	if failOpen {
		edits = append(edits, [2]string{"failOpen: false", "failOpen: true"})
	}
	f.setConfig(edits...)
	start := time.Now()
	for f.invalidLogged() == invalid || f.egRejectedLogged() == nacks {
		if time.Since(start) > time.Minute {
			t.Fatalf("after a minute: Sluice's rejection logged %d times, Envoy's NACK %d times (before: %d, %d)",
				f.invalidLogged(), f.egRejectedLogged(), invalid, nacks)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("failOpen %v: Sluice rejected the configuration and Envoy the update after %v", failOpen, time.Since(start).Round(100*time.Millisecond))
	seen := map[string]int{}
	for i := 0; i < 5; i++ {
		r := f.do("POST", "/login", nil)
		seen[r.kind()]++
		if r.status != 429 || !hasPolicy("login", 12)(r) {
			t.Fatalf("failOpen %v, POST /login after the rejected update: %v; want the last good configuration's 429 (login, 12 per minute)", failOpen, r)
		}
	}
	t.Logf("failOpen %v: the last good configuration stays in force: POST /login ×5 → %v", failOpen, seen)
}

// TestEnvoyGatewayInvalidConfigAtStart: an Envoy that starts with a
// configuration Sluice rejects (a new gateway, a new replica, a restart),
// with the HTTP policy's window misspelt. Measured: the listener is
// accepted (the module arrives after the listener, from Envoy Gateway's
// wasm server), and then failOpen false answers every request on the
// policy's routes with 503 (wasm_fail_stream), failOpen true passes every
// request with no limit at all.
func TestEnvoyGatewayInvalidConfigAtStart(t *testing.T) {
	t.Parallel()
	for _, failOpen := range []bool{false, true} {
		t.Run(fmt.Sprintf("failOpen=%v", failOpen), func(t *testing.T) {
			f := startEG(t, false, func(f *egFixture) map[string]string {
				p := replaceOnce(t, f.httpPolicy(), "window: 1m", "window: 1mn", "envoyextensionpolicy-http.yaml")
				if failOpen {
					p = replaceOnce(t, p, "failOpen: false", "failOpen: true", "envoyextensionpolicy-http.yaml")
				}
				return map[string]string{"sluice.yaml": p}
			})
			took, seen := f.waitFor("the listener answering", 3*time.Minute,
				func() egResponse { return f.do("GET", "/", nil) },
				func(r egResponse) bool { return r.err == nil && f.invalidLogged() > 0 })
			t.Logf("failOpen %v: the listener answers %v after start, Sluice's rejection logged; before: %v", failOpen, took.Round(100*time.Millisecond), seen)
			if failOpen {
				egAllUnlimited(t, f)
			} else {
				egAllRefused(t, f)
			}
		})
	}
}

// invalidLogged counts Sluice's rejections of a configuration in the Envoy
// log (Envoy Gateway's output).
func (f *egFixture) invalidLogged() int {
	return strings.Count(f.gw.Logs(), "sluice: invalid configuration: rules[0].")
}

// egAllRefused: every request is answered 503 by Envoy, none reaches the
// upstream, and no Sluice header is on them.
func egAllRefused(t *testing.T, f *egFixture) {
	codes, last := f.burst("GET", "/closed", nil, 20)
	for i, c := range codes {
		if c != 503 {
			t.Fatalf("failOpen false, request %d: %d, want 503 (every request refused): %v", i, c, codes)
		}
	}
	if last.header.Get("RateLimit-Policy") != "" || f.up.Count("/closed") != 0 {
		t.Fatalf("failOpen false: RateLimit-Policy %q, upstream saw %d; want no Sluice and no request through", last.header.Get("RateLimit-Policy"), f.up.Count("/closed"))
	}
	t.Logf("failOpen false: 20 of 20 requests answered 503, none reached the upstream")
}

// egAllUnlimited: 250 requests from one client in a moment all pass (the
// per-client rule, burst 200, would refuse some) with no Sluice header.
func egAllUnlimited(t *testing.T, f *egFixture) {
	admitted, rejected, _, elapsed := f.concurrentBurst("GET", "/open", nil, 250, 8)
	if admitted != 250 || rejected != 0 || f.up.Count("/open") != 250 {
		t.Fatalf("failOpen true: %d admitted, %d refused, upstream saw %d; want all 250 through", admitted, rejected, f.up.Count("/open"))
	}
	if r := f.do("GET", "/open", nil); r.header.Get("RateLimit-Policy") != "" || r.header.Get("X-RateLimit-Limit") != "" {
		t.Fatalf("failOpen true: Sluice headers on a response: %v", r.header)
	}
	t.Logf("failOpen true: 250 of 250 requests from one client in %v passed, no rate-limit header (unlimited)", elapsed.Round(time.Millisecond))
}
