package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// The fleet when its parts come and go: a replica of the rate-limit
// service lost, an Envoy killed while it holds leases.

// replicasCluster is envoy/ratelimit/cluster-ha.yaml, the Envoy cluster of
// several replicas of the service users add, with its endpoint replaced by
// the replicas at a and b (STATIC: they are addresses).
func replicasCluster(t *testing.T, a, b string) string {
	y := string(repoFile(t, "envoy", "ratelimit", "cluster-ha.yaml"))
	const one = `
      - endpoint:
          address:
            socket_address: {address: ratelimit, port_value: 8081}`
	if !strings.Contains(y, one) || !strings.Contains(y, "type: STRICT_DNS") {
		t.Fatalf("cluster-ha.yaml no longer has %q", one)
	}
	ep := func(addr string) string {
		host, port, _ := strings.Cut(addr, ":")
		return strings.Replace(one, "address: ratelimit, port_value: 8081", "address: "+host+", port_value: "+port, 1)
	}
	y = strings.Replace(y, one, ep(a)+ep(b), 1)
	return strings.Replace(y, "type: STRICT_DNS", "type: STATIC", 1)
}

// TestFleetRLSReplicas: two replicas of the service on one Redis behind
// the Envoys' cluster (envoy/ratelimit/cluster-ha.yaml: health checks,
// outlier detection); one is killed (SIGKILL) while requests flow from five
// senders, each from a new client (each needs a call): the other serves,
// and no more requests are decided by on_error than were in flight at the
// kill (a call Envoy could not deliver to the dead replica is sent once
// more, to the live one).
func TestFleetRLSReplicas(t *testing.T) {
	redis, rls1 := envoytest.FleetT(t, map[string]string{"sluice.yaml": shippedRLSConfig(t)})
	rls2 := envoytest.RLST(t, map[string]string{"sluice.yaml": shippedRLSConfig(t)}, "REDIS_URL="+redis.Addr())
	up, err := envoytest.StartUpstream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	f := startFleetWith(t, replicasCluster(t, rls1.GRPCAddr, rls2.GRPCAddr), haConfig, up.Addr())
	awayFromTheHour(t, 30*time.Second)
	run := fmt.Sprint(time.Now().UnixNano())
	var sent, byService, byOnError atomic.Int64
	var killed atomic.Int64 // when the replica was killed (unix ns)
	var lateOnError atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 5; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// Each request from a new client: each needs a call.
				_, svc := haGet(t, f, "/probe", fmt.Sprintf("%s-%d-%d", run, w, i))
				sent.Add(1)
				if svc {
					byService.Add(1)
					continue
				}
				byOnError.Add(1)
				if k := killed.Load(); k > 0 && time.Since(time.Unix(0, k)) > 2*time.Second {
					lateOnError.Add(1)
				}
			}
		}()
	}
	time.Sleep(time.Second)
	before, beforeOnError := sent.Load(), byOnError.Load()
	rls1.Stop()
	killed.Store(time.Now().UnixNano())
	time.Sleep(4 * time.Second)
	close(stop)
	wg.Wait()
	healthy, _ := f.members[0].Stat("cluster.ratelimit.membership_healthy")
	t.Logf("two replicas, one killed after %d requests (%d by on_error before): %d requests in all, %d decided by the service, %d by on_error (%d of them later than 2 s after the kill); healthy replicas at the end (Envoy 0): %d",
		before, beforeOnError, sent.Load(), byService.Load(), byOnError.Load(), lateOnError.Load(), healthy)
	// What the plugin logged of the failed calls (once a second per worker).
	for i, e := range f.members {
		for _, line := range strings.Split(e.Logs(), "\n") {
			if j := strings.Index(line, "rate-limit service"); j >= 0 {
				t.Logf("envoy %d: %s", i, line[j:])
			}
		}
	}
	if healthy != 1 {
		t.Errorf("the cluster counts %d healthy replicas after one of two was killed", healthy)
	}
	if beforeOnError > 0 {
		t.Errorf("%d requests decided by on_error before the kill", beforeOnError)
	}
	if lateOnError.Load() > 0 {
		t.Errorf("%d requests decided by on_error later than 2 s after the kill: the live replica does not serve them", lateOnError.Load())
	}
	// Five senders: at most the five requests in flight at the kill.
	if n := byOnError.Load(); n > 5 {
		t.Errorf("%d requests decided by on_error after one replica of two was lost", n)
	}
}

// TestFleetEnvoyChurn: one client spends its budget (300 an hour) over the
// three Envoys; a fourth Envoy (one that autoscaling adds) is started
// mid-window, once they have spent half the budget, and one of the three
// is killed (SIGKILL) while it holds leases: while the new one starts the
// two live Envoys go on spending, then it takes its share of the traffic.
// Nothing is admitted (or granted) over the limit; the budget lost is at
// most the dead Envoy's unused leases (its granted hits less its
// admissions, read from its metrics just before the kill) plus what the
// service never granted (a refused lease call asked more than was left).
func TestFleetEnvoyChurn(t *testing.T) {
	const limit = 300
	cfg := strings.Replace(haConfig, `"limit": 200`, `"limit": 300`, 1)
	_, rls := envoytest.FleetT(t, map[string]string{"sluice.yaml": shippedRLSConfig(t)})
	up, err := envoytest.StartUpstream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	f := startFleetOn(t, rls, cfg, up.Addr())
	awayFromTheHour(t, 40*time.Second)
	client := fmt.Sprint(time.Now().UnixNano(), "churn")

	first := spendOver(t, f.members, client, 150, 6)
	// The new Envoy starts now, mid-window, with half the budget spent;
	// meanwhile one of the three is killed and the two others go on.
	joinStart := time.Now()
	joined := make(chan *envoytest.Envoy, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		e, err := envoytest.Start(ctx, envoytest.Options{
			Bin: envoytest.RequireEnvoy(t), Dir: t.TempDir(), Upstream: up.Addr(), Concurrency: 2,
			ExtraClustersYAML: shippedCluster(t, rls.GRPCAddr), StartTimeout: 100 * time.Second,
			Wasm: &envoytest.Wasm{File: sluiceWasm(t), Config: cfg},
		})
		if err != nil {
			t.Error(err)
		}
		joined <- e
	}()
	var joiner *envoytest.Envoy
	received := false
	t.Cleanup(func() { // also when the test ends before the start does
		if !received {
			joiner = <-joined
		}
		if joiner != nil {
			_ = joiner.Stop()
		}
	})
	time.Sleep(1500 * time.Millisecond) // the metrics are published every second
	dead := f.members[0]
	granted, err := dead.Stat("wasmcustom.sluice.global.granted")
	if err != nil {
		t.Fatal(err)
	}
	allowed, err := dead.Stat("wasmcustom.sluice.rule.ha_budget.allowed")
	if err != nil {
		t.Fatal(err)
	}
	unused := int64(granted) - int64(allowed)
	dead.Kill()
	live := []*envoytest.Envoy{f.members[1], f.members[2]}
	meanwhile := spendOver(t, live, client, 50, 2)
	joiner, received = <-joined, true
	if joiner == nil {
		t.FailNow()
	}
	joinTook := time.Since(joinStart)
	rest := spendOver(t, append(live, joiner), client, 3*limit, 6)
	admitted := first + meanwhile + rest
	time.Sleep(1200 * time.Millisecond) // the metrics are published every second
	// What the service granted and no Envoy admitted: the dead Envoy's
	// unused leases; what it never granted: the remainder a refused lease
	// call asked more than (the service counts a refused call's hits).
	grantedAll := granted
	for _, e := range append(live, joiner) {
		n, err := e.Stat("wasmcustom.sluice.global.granted")
		if err != nil {
			t.Fatal(err)
		}
		grantedAll += n
	}
	ungranted := int64(limit) - int64(grantedAll)
	t.Logf("Envoy churn: %d admitted before the kill; the killed Envoy held %d unused hits (granted %d, admitted %d); %d admitted over the two live Envoys while the new one started (%v); then over the two and the new one: %d; in all %d of %d (%d under the limit); granted by the service %d in all (%d of the budget never granted)",
		first, unused, granted, allowed, meanwhile, joinTook.Round(time.Second), rest, admitted, limit, limit-admitted, grantedAll, ungranted)
	if first != 150 || meanwhile != 50 {
		t.Errorf("before the new Envoy joined: admitted %d of 150 and %d of 50", first, meanwhile)
	}
	if admitted > limit || grantedAll > limit {
		t.Errorf("admitted %d, granted %d: over the limit %d", admitted, grantedAll, limit)
	}
	if under := int64(limit - admitted); under > unused+max(ungranted, 0) {
		t.Errorf("%d under the limit: more than the killed Envoy's %d unused hits and the %d never granted", under, unused, ungranted)
	}
	if ungranted > limit/20 {
		t.Errorf("%d of the budget never granted", ungranted)
	}
	if n, err := joiner.Stat("wasmcustom.sluice.rule.ha_budget.allowed"); err != nil || n == 0 {
		t.Errorf("the Envoy that joined admitted %d (%v): it took no share", n, err)
	}
}

// spendOver sends requests of client round-robin over envoys from senders
// at once: n in all, or (with n over the limit) until 30 in a row are
// refused; it returns how many were admitted.
func spendOver(t *testing.T, envoys []*envoytest.Envoy, client string, n, senders int) int {
	var admitted, next, refusedInRow atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < senders; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) || refusedInRow.Load() >= 30 {
					return
				}
				e := envoys[int(i)%len(envoys)]
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp, _, err := e.Get(ctx, "/budget", http.Header{"X-Client": {client}})
				cancel()
				switch {
				case err != nil:
					t.Error(err)
					return
				case resp.StatusCode == 200:
					admitted.Add(1)
					refusedInRow.Store(0)
				case resp.StatusCode == 429:
					refusedInRow.Add(1)
				default:
					t.Errorf("status %d", resp.StatusCode)
				}
			}
		}()
	}
	wg.Wait()
	return int(admitted.Load())
}
