package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// costFleetConfig: a global rule charged after the response, in tokens the
// upstream reports, 2,000 a minute per client across the fleet.
const costFleetConfig = `{
  "rules": [
    {"name": "fleet_tokens", "scope": "global", "match": {"path_prefix": "/tokens"}, "limit": 2000, "window": "1m",
     "key": ["header:x-client"], "cost": {"response_header": "x-tokens-used", "max": 100}}
  ],
  "global": {"cluster": "ratelimit", "domain": "sluice", "timeout": "500ms"},
  "on_error": "allow"
}`

// TestCostFleet: three Sluice Envoys behind a round-robin front, the real
// service on Redis, one client spending tokens with 20 concurrent senders.
// The fleet's charge (the Envoys' metrics) equals what the upstream
// reported for the requests it served; the service counted that plus the
// hits leased and not used and those of the lease calls it refused; admission stops, and the charge past the limit
// stays within the documented bound (docs/cost.md): at most max - 1 per
// request in flight or leased when the budget ran out.
func TestCostFleet(t *testing.T) {
	redis, rls := envoytest.FleetT(t, map[string]string{"sluice.yaml": shippedRLSConfig(t)})
	up := startTokenUpstream(t)
	f := startFleetOn(t, rls, costFleetConfig, up.addr)
	const workers, maxCost = 20, 100
	// Every Envoy worker opens its connection to the service on its first
	// call; on a busy machine that can take longer than the rule's 500 ms
	// timeout, and on_error would then decide the run's first requests.
	// So each connects first, for a client of its own.
	reported0, charged0 := warmCostFleet(t, f, up, fmt.Sprint("warm", time.Now().UnixNano()))
	// A run that crosses the top of a minute meets two windows of the
	// service: it is sent again on a fresh client (oneWindow).
	oneWindow(t, 20*time.Second, func(attempt string) func() {
		onError0 := f.sum(t, "wasmcustom.sluice.on_error.allowed") // the run's own are counted below
		client := fmt.Sprint("c", time.Now().UnixNano(), attempt)
		admitted, refused := spendTokens(t, f, client, workers, maxCost)
		// Admission has stopped on every Envoy (asked within the run's
		// minute).
		var after []string
		for i := 0; i < 3; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			resp, _, err := f.front.Get(ctx, "/tokens", http.Header{"X-Client": {client}, "X-Want-Tokens": {"1"}})
			cancel()
			if err != nil || resp.StatusCode != 429 {
				after = append(after, fmt.Sprint(resp, err))
			}
		}
		reported := uint64(up.reported.Load()) - reported0
		charged := settledCharge(t, f, reported+charged0) - charged0
		reported0, charged0 = reported0+reported, charged0+charged // the next attempt's start
		onError := f.sum(t, "wasmcustom.sluice.on_error.allowed") - onError0
		return func() {
			checkCostFleet(t, redis, costFleetRun{uint64(admitted), uint64(refused), reported, charged, onError, after}, f)
		}
	})
}

// spendTokens sends 400 requests of client to the fleet's /tokens with
// workers concurrent senders, each wanting 1..maxCost tokens, and returns
// how many were admitted and refused.
func spendTokens(t *testing.T, f *fleet, client string, workers, maxCost int64) (admitted, refused int64) {
	var adm, ref, sent atomic.Int64
	var wg sync.WaitGroup
	for w := int64(0); w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := sent.Add(1); i <= 400; i = sent.Add(1) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				h := http.Header{"X-Client": {client}, "X-Want-Tokens": {strconv.FormatInt(i*37%maxCost+1, 10)}}
				resp, _, err := f.front.Get(ctx, "/tokens", h)
				cancel()
				switch {
				case err != nil:
					t.Error(err)
					return
				case resp.StatusCode == 200:
					adm.Add(1)
				case resp.StatusCode == 429:
					ref.Add(1)
				default:
					t.Errorf("status %d", resp.StatusCode)
				}
			}
		}()
	}
	wg.Wait()
	return adm.Load(), ref.Load()
}

// costFleetRun is what a run of TestCostFleet measured.
type costFleetRun struct {
	admitted, refused, reported, charged, onError uint64
	after                                         []string // answers other than 429 once the budget was spent
}

// checkCostFleet asserts TestCostFleet's bounds on run.
func checkCostFleet(t *testing.T, redis *envoytest.Redis, run costFleetRun, f *fleet) {
	t.Helper()
	const workers, limit, maxCost = 20, 2000, 100
	// The service's count holds the warm-up's (and an earlier attempt's)
	// too while its keys live (their window's length): at least the run's
	// either way.
	counted, err := redisSum(redis.Addr(), "*fleet_tokens*")
	if err != nil {
		t.Fatal(err)
	}
	over := int64(run.charged) - limit
	t.Logf("global 2000 tokens/1m, costs 1..%d, %d senders: admitted %d, refused %d; the upstream reported %d tokens, the Envoys charged %d; the service counted %d (%d more: hits leased and not used, and hits of lease calls it refused, which it counts too); charged past the limit: %d (%.1f requests' worth of max-1); charge calls %d, calls %d",
		maxCost, workers, run.admitted, run.refused, run.reported, run.charged, counted, int64(counted)-int64(run.charged), over,
		float64(over)/float64(maxCost-1), f.sum(t, "wasmcustom.sluice.global.charge_calls"), f.sum(t, "wasmcustom.sluice.global.calls"))
	if run.charged != run.reported {
		t.Fatalf("the fleet charged %d, the upstream reported %d", run.charged, run.reported)
	}
	if counted < run.charged {
		t.Errorf("the service counted %d, less than the %d charged", counted, run.charged)
	}
	if run.refused == 0 {
		t.Fatal("the budget was never spent")
	}
	// The bound: past the limit, at most max-1 for each request in flight
	// (workers) or served from hits leased before the budget ran out; the
	// leases of three Envoys near the limit are one hit each.
	if bound := int64(maxCost-1) * (workers + 3); over > bound {
		t.Errorf("charged %d past the limit, more than the bound %d", over, bound)
	}
	if run.onError > 0 {
		t.Errorf("%d requests decided by on_error", run.onError)
	}
	if len(run.after) > 0 {
		t.Errorf("after the run: %v, want 429", run.after)
	}
}

// warmCostFleet sends 40 requests for client to every member, each on a
// new connection (the kernel spreads those over a member's workers: all 40
// on one of two is a chance of 2^-39), and returns what the upstream
// reported and the fleet charged for them.
func warmCostFleet(t *testing.T, f *fleet, up *tokenUpstream, client string) (reported, charged uint64) {
	t.Helper()
	for i, e := range f.members {
		for n := 0; n < 40; n++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			// A new connection each time: the kernel spreads them over the
			// workers.
			resp, _, err := e.Do(ctx, http.MethodGet, "/tokens", http.Header{"X-Client": {client}, "X-Want-Tokens": {"1"}, "Connection": {"close"}}, nil)
			cancel()
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("warm-up, Envoy %d: %v %v", i, resp, err)
			}
		}
	}
	reported = uint64(up.reported.Load())
	if charged = settledCharge(t, f, reported); charged != reported {
		t.Fatalf("warm-up: the fleet charged %d, the upstream reported %d", charged, reported)
	}
	return reported, charged
}

// settledCharge waits until the fleet's charge metric reaches want (the
// debts go out on the tick, the metrics every second), or 6.5 s, and
// returns it.
func settledCharge(t *testing.T, f *fleet, want uint64) uint64 {
	time.Sleep(1500 * time.Millisecond)
	var charged uint64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if charged = f.sum(t, "wasmcustom.sluice.rule.fleet_tokens.charged"); charged == want {
			break
		}
	}
	return charged
}

// redisSum adds the integer values of the Redis keys matching pattern
// (the service's counters).
func redisSum(addr, pattern string) (uint64, error) {
	keys, err := envoytest.RedisDo(addr, "KEYS", pattern)
	if err != nil {
		return 0, err
	}
	var sum uint64
	for _, k := range keys {
		v, err := envoytest.RedisDo(addr, "GET", k)
		if err != nil || len(v) != 1 {
			return 0, fmt.Errorf("GET %s: %v %v", k, v, err)
		}
		n, err := strconv.ParseUint(v[0], 10, 64)
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, nil
}
