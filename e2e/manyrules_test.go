package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// manyRulesConfig: a per-route rule of 3 for each listed route
// (/r/NNNN/), then a catch-all of 10 per client.
func manyRulesConfig(routes []int, extra string) string {
	var b strings.Builder
	b.WriteString(`{"rules":[`)
	for _, i := range routes {
		fmt.Fprintf(&b, `{"name":"route-%04d","match":{"path_prefix":"/r/%04d/"},"limit":3,"window":"1h"},`, i, i)
	}
	b.WriteString(`{"name":"all","limit":10,"window":"1h"}]` + extra + `}`)
	return b.String()
}

func seq(from, to int, skip ...int) []int {
	var l []int
	for i := from; i < to; i++ {
		if !containsInt(skip, i) {
			l = append(l, i)
		}
	}
	return l
}

func containsInt(l []int, x int) bool {
	for _, y := range l {
		if x == y {
			return true
		}
	}
	return false
}

// TestManyRules: 1,000 per-route rules and a catch-all in one Envoy. The
// first, a middle and the last route each admit exactly their limit; the
// catch-all still limits; a configuration update that adds one rule and
// removes another keeps the state of every other rule's clients.
func TestManyRules(t *testing.T) {
	before := manyRulesConfig(seq(0, 1000), "")
	started := time.Now()
	e := startSluice(t, 2, before, func(o *envoytest.Options) {
		o.DynamicListeners = true
		o.XFFNumTrustedHops = 1 // each test client poses as its own address
	})
	t.Logf("Envoy with 1001 rules ready in %v", time.Since(started).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// send sends n requests for path from client c (one at a time) and
	// returns how many were admitted.
	send := func(c int, path string, n int) int {
		res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Path: path, Requests: n, Concurrency: 1,
			XForwardedFor: func(int) string { return envoytest.ClientIP(c) }})
		if res.Count(200)+res.Count(429) != n {
			t.Fatalf("%s: %v", path, res.Status)
		}
		return res.Count(200)
	}
	for k, r := range []int{0, 500, 999} {
		if got := send(k, fmt.Sprintf("/r/%04d/x", r), 5); got != 3 {
			t.Errorf("route %d: %d of 5 admitted, want its limit 3", r, got)
		}
	}
	if got := send(10, "/other", 12); got != 10 {
		t.Errorf("catch-all: %d of 12 admitted, want 10", got)
	}
	// A busy route: 400 clients, where the route's own share of max_keys
	// (100000 over 1001 rules, half of it kept as the spill pool) is 49
	// states. Each client's first request must be decided on a state of its
	// own (admitted), not on the rule's overflow state with the others.
	busy := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Path: "/r/0600/x", Requests: 400, Concurrency: 8,
		XForwardedFor: func(i int) string { return envoytest.ClientIP(1000 + i) }})
	t.Logf("busy route: %v for 400 clients' first requests", busy.Status)
	if busy.Count(200) < 380 {
		t.Errorf("busy route: %d of 400 clients admitted, want nearly all (states in the spill pool)", busy.Count(200))
	}
	// State to keep: client 20 has 1 left on route 250, client 21 has 9
	// left on the catch-all.
	if send(20, "/r/0250/x", 2) != 2 || send(21, "/r/0777/y", 1) != 1 {
		t.Fatal("fresh clients refused before the update")
	}
	stats, _ := e.Stats(`^wasmcustom\.sluice\.`)
	rss, _ := e.ResidentMemory()
	t.Logf("before the update: %d sluice series in /stats, Envoy RSS %d MiB", len(stats), rss>>20)

	// Add route-1000, remove route-0001.
	after := manyRulesConfig(append(seq(0, 1000, 1), 1000), "")
	updated := time.Now()
	if err := e.SetPluginConfig(ctx, after); err != nil {
		t.Fatal(err)
	}
	t.Logf("configuration update applied in %v", time.Since(updated).Round(time.Millisecond))
	if got := send(20, "/r/0250/x", 3); got != 1 {
		t.Errorf("route 250 after the update: %d admitted, want the 1 its client had left", got)
	}
	for k, r := range []int{0, 500, 999} {
		if got := send(k, fmt.Sprintf("/r/%04d/x", r), 2); got != 0 {
			t.Errorf("route %d after the update: %d admitted to a client that had used its limit", r, got)
		}
	}
	if got := send(10, "/other", 2); got != 0 {
		t.Errorf("catch-all after the update: %d admitted to a client that had used its limit", got)
	}
	if got := send(21, "/other", 12); got != 9 {
		t.Errorf("catch-all after the update: %d of 12 admitted, want the 9 client 21 had left", got)
	}
	if got := send(30, "/r/1000/x", 5); got != 3 {
		t.Errorf("added route-1000: %d of 5 admitted, want 3", got)
	}
	if got := send(31, "/r/0001/x", 5); got != 5 {
		t.Errorf("removed route-0001: %d of 5 admitted, want all (only the catch-all applies)", got)
	}
}

// TestManyRulesBoundedMetrics: with rule_metrics listing two of the 1,001
// rules, the others have no series of their own and are counted together
// in sluice.rules_other.*.
func TestManyRulesBoundedMetrics(t *testing.T) {
	started := time.Now()
	e := startSluice(t, 2, manyRulesConfig(seq(0, 1000), `,"rule_metrics":["route-0000","all"]`))
	t.Logf("Envoy with 1001 rules (2 with metrics) ready in %v", time.Since(started).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Path: "/r/0005/x", Requests: 5, Concurrency: 1})
	if res.Count(200) != 3 || res.Count(429) != 2 {
		t.Fatalf("route 5: %v, want 3 admitted", res.Status)
	}
	waitStat(t, e, "wasmcustom.sluice.rules_other.rejected", 2)
	stats, err := e.Stats(`^wasmcustom\.sluice\.`)
	if err != nil {
		t.Fatal(err)
	}
	for name := range stats {
		if strings.HasPrefix(name, "wasmcustom.sluice.rule.") && !strings.HasPrefix(name, "wasmcustom.sluice.rule.route-0000.") && !strings.HasPrefix(name, "wasmcustom.sluice.rule.all.") {
			t.Errorf("%s: a rule rule_metrics does not list has a series", name)
		}
	}
	if stats["wasmcustom.sluice.rule.all.allowed"] != 3 {
		t.Errorf("sluice.rule.all.allowed = %d, want 3", stats["wasmcustom.sluice.rule.all.allowed"])
	}
	rss, _ := e.ResidentMemory()
	t.Logf("%d sluice series in /stats, Envoy RSS %d MiB", len(stats), rss>>20)
}
