package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// The fleet tests: three Envoys with Sluice behind a round-robin front
// Envoy, global rules kept by the real envoyproxy/ratelimit service on a
// real Redis (started by the test on loopback).

// shippedRLSConfig is envoy/ratelimit/config/sluice.yaml: the service's
// configuration that only declares the domain.
func shippedRLSConfig(t testing.TB) string {
	t.Helper()
	b := repoFile(t, "envoy", "ratelimit", "config", "sluice.yaml")
	return string(b)
}

// shippedCluster is envoy/ratelimit/cluster.yaml, the Envoy cluster entry
// users add, pointed at addr: the tests reach the service through it.
func shippedCluster(t testing.TB, addr string) string {
	t.Helper()
	b := repoFile(t, "envoy", "ratelimit", "cluster.yaml")
	host, port, _ := strings.Cut(addr, ":")
	const want = "socket_address: {address: ratelimit, port_value: 8081}"
	if !strings.Contains(string(b), want) {
		t.Fatalf("cluster.yaml no longer has %q", want)
	}
	return strings.Replace(string(b), want, "socket_address: {address: "+host+", port_value: "+port+"}", 1)
}

// fleet is three Sluice Envoys and a front Envoy balancing over them.
type fleet struct {
	members []*envoytest.Envoy
	front   *envoytest.Envoy
}

func startFleet(t *testing.T, rls *envoytest.RLS, cfg string) *fleet {
	t.Helper()
	up, err := envoytest.StartUpstream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	return startFleetOn(t, rls, cfg, up.Addr())
}

// startFleetOn is startFleet with the members' upstream at upstream.
func startFleetOn(t *testing.T, rls *envoytest.RLS, cfg, upstream string) *fleet {
	t.Helper()
	return startFleetWith(t, shippedCluster(t, rls.GRPCAddr), cfg, upstream)
}

// startFleetWith is startFleetOn with the members' cluster of the service
// given (YAML for static_resources.clusters).
func startFleetWith(t *testing.T, cluster, cfg, upstream string) *fleet {
	t.Helper()
	// The three start at once: most of a start is V8 compiling the plugin,
	// which runs in parallel on the machine's cores.
	f := &fleet{members: make([]*envoytest.Envoy, 3)}
	errs := make([]error, 3)
	wasm := sluiceWasm(t)
	bin := envoytest.RequireEnvoy(t)
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	var wg sync.WaitGroup
	for i := range f.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			f.members[i], errs[i] = envoytest.Start(ctx, envoytest.Options{
				Bin:               bin,
				Dir:               dirs[i],
				Upstream:          upstream,
				Concurrency:       2,
				ExtraClustersYAML: cluster,
				StartTimeout:      150 * time.Second, // V8 compiles the plugin for every VM: slow on a loaded machine
				Wasm:              &envoytest.Wasm{File: wasm, Config: cfg},
			})
		}()
	}
	wg.Wait()
	var addrs []string
	for i, e := range f.members {
		if e == nil {
			continue
		}
		t.Cleanup(func() {
			if err := e.Stop(); err != nil {
				t.Errorf("envoy %d exited with an error before Stop: %v", i, err)
			}
			if t.Failed() {
				t.Logf("envoy %d (%s) log tail:\n%s", i, e.Dir(), tail(e.Logs(), 40))
			}
		})
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(e.Port()))
	}
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	f.front = envoytest.StartT(t, envoytest.Options{UpstreamEndpoints: addrs, Concurrency: 1})
	return f
}

// sum adds a stat over the members.
func (f *fleet) sum(t *testing.T, name string) uint64 {
	var n uint64
	for _, e := range f.members {
		v, err := e.Stat(name)
		if err != nil {
			t.Fatalf("stat %s: %v", name, err)
		}
		n += v
	}
	return n
}

// inOneWindow waits, if needed, so that a run of up to need fits in the
// current wall-clock minute (the service's fixed windows are aligned on
// it), and returns the minute it starts in.
func inOneWindow(t *testing.T, need time.Duration) int64 {
	now := time.Now()
	if left := now.Truncate(time.Minute).Add(time.Minute).Sub(now); left < need {
		t.Logf("waiting %v for the next minute window", left.Round(time.Millisecond))
		time.Sleep(left + 100*time.Millisecond)
	}
	return time.Now().Unix() / 60
}

// oneWindow runs a check that must fit in one minute window of the
// service: run sends (its key includes attempt, so that each attempt
// starts on a fresh counter) and returns the assertions, which are made
// only if the sending stayed within one minute. A run that crossed the
// top of a minute met two windows and is sent again, after waiting for
// room of twice what it took: a busy machine makes runs slow, not the
// rule wrong.
func oneWindow(t *testing.T, need time.Duration, run func(attempt string) (check func())) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		minute := inOneWindow(t, need)
		start := time.Now()
		check := run(fmt.Sprint("-", attempt))
		elapsed := time.Since(start)
		if time.Now().Unix()/60 == minute {
			check()
			return
		}
		if attempt == 3 {
			t.Fatalf("three runs crossed a minute window (the last took %v)", elapsed)
		}
		t.Logf("the run crossed a minute window (took %v): again, on a fresh key", elapsed.Round(time.Millisecond))
		need = max(need, 2*elapsed)
	}
}

// send sends n requests for client to path through the front, with
// workers concurrent senders, and returns the admitted count and one 429.
func send(t *testing.T, f *fleet, path, client string, n, workers int) (int, *http.Response) {
	t.Helper()
	var admitted, next atomic.Int64
	var mu sync.Mutex
	var rejected *http.Response
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp, _, err := f.front.Get(ctx, path, http.Header{"X-Client": {client}})
				cancel()
				if err != nil {
					t.Error(err)
					return
				}
				switch resp.StatusCode {
				case 200:
					admitted.Add(1)
				case 429:
					mu.Lock()
					rejected = resp
					mu.Unlock()
				default:
					t.Errorf("status %d", resp.StatusCode)
				}
			}
		}()
	}
	wg.Wait()
	return int(admitted.Load()), rejected
}

// fleetConfig has one rule per scenario, each on its own path, so that one
// fleet serves every fleet test (an Envoy start is slow: V8 compiles the
// plugin). /plain matches no rule.
const fleetConfig = `{
  "rules": [
    {"name": "global", "scope": "global", "match": {"path_prefix": "/global"}, "limit": 100, "window": "1m", "key": ["header:x-client"]},
    {"name": "local", "algorithm": "fixed_window", "match": {"path_prefix": "/local"}, "limit": 100, "window": "1m", "key": ["header:x-client"]},
    {"name": "api", "scope": "global", "match": {"path_prefix": "/api"}, "limit": 20, "window": "1m", "key": ["header:x-client"]},
    {"name": "queued", "scope": "global", "match": {"path_prefix": "/queued"}, "limit": 30, "window": "1m", "key": ["header:x-client"]},
    {"name": "queued_slots", "algorithm": "concurrency", "match": {"path_prefix": "/queued"}, "limit": 1, "key": ["path"], "max_delay": "10s"}
  ],
  "global": {"cluster": "ratelimit", "domain": "sluice", "timeout": "500ms"},
  "on_error": "allow"
}`

// fleetTimeout is global.timeout of fleetConfig: long enough that calls on
// a loaded machine answer in time (a call past it would be decided by
// on_error and spoil the accuracy figures).
const fleetTimeout = 500 * time.Millisecond

// TestFleet runs three Sluice Envoys behind a round-robin front, with the
// real service on a real Redis, through the shipped cluster entry and
// service configuration.
func TestFleet(t *testing.T) {
	redis, rls := envoytest.FleetT(t, map[string]string{"sluice.yaml": shippedRLSConfig(t)})
	f := startFleet(t, rls, fleetConfig)
	if !t.Run("limit", func(t *testing.T) { fleetLimit(t, f) }) {
		return
	}
	t.Run("outage", func(t *testing.T) { fleetOutage(t, f, redis, rls) })
}

// fleetLimit: one client, 300 requests round-robin over three Envoys: a
// global rule of 100 per minute admits between 90 and 100 of them,
// sequentially and with 50 concurrent senders; a local rule of 100 per
// minute admits about 300 (each Envoy its own 100).
func fleetLimit(t *testing.T, f *fleet) {
	run := fmt.Sprint(time.Now().UnixNano())

	for _, c := range []struct {
		name    string
		workers int
	}{{"sequential", 1}, {"concurrent-50", 50}} {
		oneWindow(t, 5*time.Second, func(attempt string) func() {
			callsBefore := f.sum(t, "cluster.ratelimit.upstream_rq_total")
			decided := func() uint64 {
				return f.sum(t, "wasmcustom.sluice.rule.global.allowed") + f.sum(t, "wasmcustom.sluice.rule.global.rejected")
			}
			decidedBefore := decided()
			start := time.Now()
			admitted, rej := send(t, f, "/global", run+c.name+attempt, 300, c.workers)
			elapsed := time.Since(start)
			return func() { checkFleetLimit(t, f, c.name, admitted, rej, elapsed, callsBefore, decided, decidedBefore) }
		})
	}

	// A global rule with a concurrency queue in front of it: the requests
	// that wait for a slot are counted by the global rule too.
	oneWindow(t, 5*time.Second, func(attempt string) func() {
		delayedBefore := f.sum(t, "wasmcustom.sluice.rule.queued_slots.delayed")
		admitted, _ := send(t, f, "/queued", run+"queued"+attempt, 90, 20)
		return func() {
			var delayed uint64
			pollUntil(func() bool { // the plugin publishes its counters every second
				delayed = f.sum(t, "wasmcustom.sluice.rule.queued_slots.delayed") - delayedBefore
				return delayed > 0
			})
			t.Logf("global 30/1m behind a concurrency queue of 1 slot per Envoy, 20 senders: admitted %d of 90 (%d after waiting for a slot)", admitted, delayed)
			if admitted < 27 || admitted > 30 || delayed == 0 {
				t.Errorf("queued: admitted %d, want 27..30 (%d after a wait: want some)", admitted, delayed)
			}
		}
	})

	oneWindow(t, 5*time.Second, func(attempt string) func() {
		admitted, _ := send(t, f, "/local", run+"local"+attempt, 300, 1)
		return func() {
			t.Logf("local 100/1m, sequential: admitted %d of 300 (each Envoy counts alone)", admitted)
			if admitted < 270 {
				t.Errorf("local: admitted %d, want about 300", admitted)
			}
		}
	})
}

// checkFleetLimit checks one run of 300 requests against the global rule
// of 100 per minute.
func checkFleetLimit(t *testing.T, f *fleet, name string, admitted int, rej *http.Response, elapsed time.Duration,
	callsBefore uint64, decided func() uint64, decidedBefore uint64) {
	t.Helper()
	calls := f.sum(t, "cluster.ratelimit.upstream_rq_total") - callsBefore
	pollUntil(func() bool { return decided()-decidedBefore >= 300 }) // the plugin publishes its counters every second
	if n := f.sum(t, "wasmcustom.sluice.on_error.allowed"); n > 0 {
		t.Errorf("%s: %d requests decided by on_error (call failures: %d)", name, n, f.sum(t, "wasmcustom.sluice.global.call_failures"))
	}
	t.Logf("global 100/1m, %s: admitted %d of 300 in %v; %d calls to the service (%.3f per request)",
		name, admitted, elapsed.Round(time.Millisecond), calls, float64(calls)/300)
	if admitted < 90 || admitted > 100 {
		t.Errorf("%s: admitted %d, want 90..100", name, admitted)
	}
	if rej == nil {
		t.Fatalf("%s: no 429", name)
	}
	ra, err := strconv.Atoi(rej.Header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 60 {
		t.Errorf("%s: Retry-After %q", name, rej.Header.Get("Retry-After"))
	}
	if got := rej.Header.Get("X-RateLimit-Limit"); got != "100" {
		t.Errorf("%s: X-RateLimit-Limit %q", name, got)
	}
	if got := rej.Header.Get("RateLimit-Policy"); got != `"global";q=100;w=60` {
		t.Errorf("%s: RateLimit-Policy %q", name, got)
	}
}

// fleetOutage: with Redis stopped mid-run, and then with the service hung,
// no request waits longer than the timeout, on_error decides and is
// counted; with both back the global limit holds again within 5 s, without
// a restart.
func fleetOutage(t *testing.T, f *fleet, redis *envoytest.Redis, rls *envoytest.RLS) {
	const timeout = fleetTimeout
	run := fmt.Sprint(time.Now().UnixNano())
	onErr0 := f.sum(t, "wasmcustom.sluice.on_error.allowed")
	if a, _ := send(t, f, "/api", run+"warm", 5, 1); a != 5 {
		t.Fatalf("warm-up: admitted %d of 5", a)
	}

	// The same chain without a rule, for what the machine itself adds.
	timed := func(path, client string) (time.Duration, int) {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, _, err := f.front.Get(ctx, path, http.Header{"X-Client": {client}})
		if err != nil {
			t.Fatal(err)
		}
		return time.Since(start), resp.StatusCode
	}
	var baseline time.Duration
	for i := 0; i < 60; i++ {
		d, _ := timed("/plain", run+"plain")
		baseline = max(baseline, d)
	}

	// A service that hangs: every call runs into the timeout (then the
	// circuit opens and requests stop waiting at all).
	if err := rls.Freeze(); err != nil {
		t.Fatal(err)
	}
	var slowest time.Duration
	for i := 0; i < 30; i++ {
		d, code := timed("/api", fmt.Sprintf("%shung%d", run, i%6))
		slowest = max(slowest, d)
		if code != 200 {
			t.Errorf("service hung: status %d, want 200 (on_error allow)", code)
		}
	}
	if err := rls.Thaw(); err != nil {
		t.Fatal(err)
	}
	t.Logf("service hung: slowest of 30 requests %v (timeout %v)", slowest.Round(time.Millisecond), timeout)
	if slowest < timeout/2 || slowest > timeout+baseline+100*time.Millisecond {
		t.Errorf("service hung: slowest request %v, want about the timeout %v (at most + %v + 100ms)", slowest, timeout, baseline)
	}

	redis.Stop()
	slowest = 0
	admitted := 0
	for i := 0; i < 60; i++ {
		d, code := timed("/api", fmt.Sprintf("%sdown%d", run, i%6))
		slowest = max(slowest, d)
		if code == 200 {
			admitted++
		}
	}
	pollUntil(func() bool { return f.sum(t, "wasmcustom.sluice.on_error.allowed")-onErr0 >= 60 })
	onErr, failures, short := f.sum(t, "wasmcustom.sluice.on_error.allowed")-onErr0, f.sum(t, "wasmcustom.sluice.global.call_failures"), f.sum(t, "wasmcustom.sluice.global.short_circuited")
	t.Logf("Redis down: %d of 60 admitted by on_error allow, slowest request %v (timeout %v; slowest of 60 requests without a rule %v); since the outage began: on_error.allowed %d, call_failures %d, short_circuited %d",
		admitted, slowest.Round(time.Millisecond), timeout, baseline.Round(time.Millisecond), onErr, failures, short)
	if admitted != 60 || onErr < 60 || failures == 0 {
		t.Errorf("on_error not applied or not counted")
	}
	// The timeout plus what the machine adds through two Envoys (measured
	// above without a rule; the machine is shared and loaded).
	if slowest > timeout+baseline+100*time.Millisecond {
		t.Errorf("a request took %v: more than the timeout %v plus the slowest request without a rule %v (+100ms)", slowest, timeout, baseline)
	}

	// The recovery is measured within one minute window of the service.
	inOneWindow(t, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := redis.Start(ctx); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	for i := 0; ; i++ {
		minute := time.Now().Unix() / 60
		a, rej := send(t, f, "/api", fmt.Sprintf("%sback%d", run, i), 40, 1)
		if time.Now().Unix()/60 != minute {
			t.Logf("Redis back +%v: a round crossed a minute window (admitted %d of 40): not counted", time.Since(back).Round(time.Millisecond), a)
			continue
		}
		if a >= 18 && a <= 20 && rej != nil {
			t.Logf("Redis back: the global limit holds again after %v (admitted %d of 40, limit 20)", time.Since(back).Round(time.Millisecond), a)
			break
		}
		t.Logf("Redis back +%v: admitted %d of 40", time.Since(back).Round(time.Millisecond), a)
		if time.Since(back) > 5*time.Second {
			t.Fatalf("the global limit does not hold %v after Redis came back (admitted %d of 40, limit 20)", time.Since(back), a)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
