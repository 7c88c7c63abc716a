package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// overflowConfig: a global rule of 20 a minute per client whose share of
// the table is 9 states at each Envoy (one bucket of 8 and the overflow
// state), so that 8 clients fill it.
const overflowConfig = `{
  "rules": [
    {"name": "ov", "scope": "global", "limit": 20, "window": "1m", "key": ["header:x-client"], "max_keys": 9}
  ],
  "global": {"cluster": "ratelimit", "domain": "sluice", "timeout": "500ms"},
  "on_error": "deny"
}`

const (
	overflowLimit = 20
	// overflowGap spaces the client's requests at the Envoy where it is on
	// the overflow lease: more than a tick (20 ms) and a round trip of the
	// service, so that each worker there admits at most one request whose
	// debt the service has not answered when the client's budget runs out.
	overflowGap = 150 * time.Millisecond
	tickPeriod  = 20 * time.Millisecond
)

// TestFleetOverflowClientWithinItsLimit: three Sluice Envoys (two workers
// each), the real service on Redis. At the first Envoy 8 other clients
// fill the rule's share, so the client is decided there on the rule's
// overflow lease; at the two others it has its own lease. It sends 60
// requests one after another, round robin over the three: across the
// fleet it is admitted at most its limit plus, for each worker of the
// first Envoy, what it sent there between a tick and the service's answer
// to the debt that tick sent (docs/fleet.md). Counting the overflow apart
// from its own budget admitted its limit twice (20 on the overflow, 20 on
// its own leases).
func TestFleetOverflowClientWithinItsLimit(t *testing.T) {
	_, rls := envoytest.FleetT(t, map[string]string{"sluice.yaml": shippedRLSConfig(t)})
	f := startFleet(t, rls, overflowConfig)
	a := f.members[0]
	oneWindow(t, 30*time.Second, func(attempt string) func() {
		run := fmt.Sprint(time.Now().UnixNano(), attempt)
		for i := 0; i < 8; i++ {
			if ok, _ := getAs(t, a, fmt.Sprint(run, "-filler-", i)); !ok {
				t.Fatalf("filler %d refused", i)
			}
		}
		time.Sleep(1200 * time.Millisecond) // the plugin publishes its counters every second
		ov0 := statOf(t, a, "wasmcustom.sluice.rule.ov.overflow")
		got := spendRoundRobin(t, f, run+"-client", 3*overflowLimit)
		return func() { checkOverflowBound(t, f, got, ov0) }
	})
}

// roundRobin is what spendRoundRobin saw: the client's admissions at each
// Envoy, the smallest gap between its requests at the first Envoy and the
// slowest answer it got (an answer that waited for a call includes the
// service's round trip).
type roundRobin struct {
	admitted [3]int
	sentToA  int
	minGap   time.Duration
	slowest  time.Duration
}

// spendRoundRobin sends n requests of client one after another, round
// robin over the fleet's members, each request to the first at least
// overflowGap after the previous one there.
func spendRoundRobin(t *testing.T, f *fleet, client string, n int) roundRobin {
	t.Helper()
	return roundRobinBy(t, f, n, overflowGap, nil, func(e *envoytest.Envoy) bool {
		ok, _ := getAs(t, e, client)
		return ok
	})
}

// roundRobinBy sends n requests one after another with send, round robin
// over the fleet's members, each to the first at least gap after the
// previous one there (and after beforeFirst(i), when set).
func roundRobinBy(t *testing.T, f *fleet, n int, gap time.Duration, beforeFirst func(i int), send func(*envoytest.Envoy) bool) roundRobin {
	t.Helper()
	var rr roundRobin
	var lastA time.Time
	for i := 0; i < n; i++ {
		m := i % len(f.members)
		if m == 0 {
			if beforeFirst != nil {
				beforeFirst(i)
			}
			if !lastA.IsZero() {
				time.Sleep(gap - time.Since(lastA))
				if g := time.Since(lastA); rr.minGap == 0 || g < rr.minGap {
					rr.minGap = g
				}
			}
			lastA = time.Now()
			rr.sentToA++
		}
		start := time.Now()
		ok := send(f.members[m])
		rr.slowest = max(rr.slowest, time.Since(start))
		if ok {
			rr.admitted[m]++
		}
	}
	return rr
}

// checkOverflowBound checks the client's admissions across the fleet
// against its limit (ov0: the first Envoy's overflow decisions before).
func checkOverflowBound(t *testing.T, f *fleet, rr roundRobin, ov0 uint64) {
	time.Sleep(1200 * time.Millisecond) // the plugin publishes its counters every second
	ov := statOf(t, f.members[0], "wasmcustom.sluice.rule.ov.overflow") - ov0
	denied := f.sum(t, "wasmcustom.sluice.on_error.denied")
	total := rr.admitted[0] + rr.admitted[1] + rr.admitted[2]
	// Each worker of the first Envoy admits on the overflow at most what
	// the client sent there from a tick to the answer to that tick's debt.
	// The slowest answer the client got bounds the service's round trip.
	perWorker := int((tickPeriod + rr.slowest + rr.minGap - 1) / rr.minGap)
	bound := overflowLimit + 2*perWorker
	t.Logf("admitted %v (%d in all) of %d sent, %d to the first Envoy (%d decisions on its overflow lease), smallest gap there %v, slowest answer %v; on_error denied %d; bound %d",
		rr.admitted, total, 3*overflowLimit, rr.sentToA, ov, rr.minGap.Round(time.Millisecond), rr.slowest.Round(time.Millisecond), denied, bound)
	if ov < uint64(rr.sentToA) {
		t.Fatalf("%d of the client's %d requests at the first Envoy were decided on its overflow lease: the test does not set up what it checks", ov, rr.sentToA)
	}
	if total > bound {
		t.Errorf("the client was admitted %d times across the fleet (%d on the overflow lease at the first Envoy, %d and %d on its own leases), want at most %d (its limit %d, plus %d per worker of the first Envoy)",
			total, rr.admitted[0], rr.admitted[1], rr.admitted[2], bound, overflowLimit, perWorker)
	}
	if denied == 0 && total < overflowLimit*8/10 {
		t.Errorf("the client was admitted %d times, want about its limit %d", total, overflowLimit)
	}
}

// getAs sends one request of client to e: admitted or not (a 429), and
// the status.
func getAs(t *testing.T, e *envoytest.Envoy, client string) (bool, int) {
	t.Helper()
	return getCosting(t, e, "/", client, 0)
}

// getCosting is getAs on path, for a request whose response (from the
// token upstream) says it cost tokens (none if 0).
func getCosting(t *testing.T, e *envoytest.Envoy, path, client string, tokens int) (bool, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := http.Header{"X-Client": {client}}
	if tokens > 0 {
		h.Set("X-Want-Tokens", strconv.Itoa(tokens))
	}
	resp, _, err := e.Get(ctx, path, h)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 && resp.StatusCode != 429 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	return resp.StatusCode == 200, resp.StatusCode
}

// statOf reads one stat of e.
func statOf(t *testing.T, e *envoytest.Envoy, name string) uint64 {
	t.Helper()
	n, err := e.Stat(name)
	if err != nil {
		t.Fatalf("stat %s: %v", name, err)
	}
	return n
}

// overflowCostConfig: a global rule of 200 tokens a minute per client,
// charged from the response (max 20), with the same share as overflowConfig.
const overflowCostConfig = `{
  "rules": [
    {"name": "ovcost", "scope": "global", "limit": 200, "window": "1m", "key": ["header:x-client"], "max_keys": 9,
     "cost": {"response_header": "x-tokens-used", "max": 20}}
  ],
  "global": {"cluster": "ratelimit", "domain": "sluice", "timeout": "500ms"},
  "on_error": "deny"
}`

const (
	overflowCostLimit = 200
	overflowCost      = 20 // the client's requests; the fillers' cost 1
	// overflowCostGap is overflowGap for the cost rule: a response at the
	// first Envoy is held until the service counted its debt, so the
	// client's slowest answer there is a round trip of the service, which
	// on a loaded machine reached 400 ms.
	overflowCostGap = 600 * time.Millisecond
)

// TestFleetOverflowCostWithinItsLimit is TestFleetOverflowClientWithinItsLimit
// for a rule charged after the response: the client's requests cost 20
// tokens, and before each of them at the first Envoy clients with a state
// there send two that cost 1, so that the Envoy's deposit (what its
// requests have been costing) stays well under 20. The client is charged
// across the fleet at most its limit plus max - 1 (requests one after
// another) plus, for each worker of the first Envoy, the cost of what it
// sent there between a tick and the answer to that tick's debt. Owing its
// own descriptor only the deposits, it was charged well over that; counting
// the overflow apart, about twice its limit.
func TestFleetOverflowCostWithinItsLimit(t *testing.T) {
	_, rls := envoytest.FleetT(t, map[string]string{"sluice.yaml": shippedRLSConfig(t)})
	up := startTokenUpstream(t)
	f := startFleetOn(t, rls, overflowCostConfig, up.addr)
	a := f.members[0]
	oneWindow(t, 40*time.Second, func(attempt string) func() {
		run := fmt.Sprint(time.Now().UnixNano(), attempt)
		for i := 0; i < 8; i++ {
			if ok, _ := getCosting(t, a, "/", fmt.Sprint(run, "-filler-", i), 1); !ok {
				t.Fatalf("filler %d refused", i)
			}
		}
		time.Sleep(1200 * time.Millisecond) // the plugin publishes its counters every second
		ov0 := statOf(t, a, "wasmcustom.sluice.rule.ovcost.overflow")
		got := spendCostRoundRobin(t, f, run, 3*overflowCostLimit/overflowCost)
		return func() { checkOverflowCostBound(t, f, got, ov0) }
	})
}

// spendCostRoundRobin is spendRoundRobin for the cost rule: n requests of
// the client (run + "-client") costing overflowCost, each at the first
// Envoy overflowCostGap after the previous one there and after two
// fillers' requests costing 1.
func spendCostRoundRobin(t *testing.T, f *fleet, run string, n int) roundRobin {
	t.Helper()
	fillers := func(i int) {
		for j := 0; j < 2; j++ {
			getCosting(t, f.members[0], "/", fmt.Sprint(run, "-filler-", (i+j)%8), 1)
		}
	}
	return roundRobinBy(t, f, n, overflowCostGap, fillers, func(e *envoytest.Envoy) bool {
		ok, _ := getCosting(t, e, "/", run+"-client", overflowCost)
		return ok
	})
}

// checkOverflowCostBound checks the tokens the client was charged across
// the fleet (ov0: the first Envoy's overflow decisions before).
func checkOverflowCostBound(t *testing.T, f *fleet, rr roundRobin, ov0 uint64) {
	time.Sleep(1200 * time.Millisecond) // the plugin publishes its counters every second
	ov := statOf(t, f.members[0], "wasmcustom.sluice.rule.ovcost.overflow") - ov0
	denied := f.sum(t, "wasmcustom.sluice.on_error.denied")
	charged := overflowCost * (rr.admitted[0] + rr.admitted[1] + rr.admitted[2])
	perWorker := int((tickPeriod + rr.slowest + rr.minGap - 1) / rr.minGap)
	bound := overflowCostLimit + overflowCost - 1 + 2*perWorker*overflowCost
	t.Logf("charged %d tokens (admitted %v) of %d sent, %d to the first Envoy (%d decisions on its overflow lease), smallest gap there %v, slowest answer %v; on_error denied %d; bound %d",
		charged, rr.admitted, 3*overflowCostLimit/overflowCost, rr.sentToA, ov, rr.minGap.Round(time.Millisecond), rr.slowest.Round(time.Millisecond), denied, bound)
	if ov < uint64(rr.sentToA) {
		t.Fatalf("%d of the client's %d requests at the first Envoy were decided on its overflow lease: the test does not set up what it checks", ov, rr.sentToA)
	}
	if charged > bound {
		t.Errorf("the client was charged %d tokens across the fleet (admitted %v), want at most %d (its limit %d, max - 1, and %d of its requests per worker of the first Envoy)",
			charged, rr.admitted, bound, overflowCostLimit, perWorker)
	}
	if denied == 0 && charged < overflowCostLimit*8/10 {
		t.Errorf("the client was charged %d tokens, want about its limit %d", charged, overflowCostLimit)
	}
}
