package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// TestGlobalFloodStaysOnItsRule floods a global rule keyed by a header with
// 5x max_keys new values, through Envoy (two workers) and the real
// rate-limit service on Redis. Past the rule's share of the table, the new
// values are counted together on the rule's overflow lease (one descriptor
// at the service): they cost a few calls, not one each, and share one
// budget. Then new clients of another global rule each get exactly their
// limit, none decided by on_error (deny).
func TestGlobalFloodStaysOnItsRule(t *testing.T) {
	const maxKeys = 36 // two rules: 18 states each, 16 slots and the overflow state
	_, rls := envoytest.FleetT(t, map[string]string{"sluice.yaml": shippedRLSConfig(t)})
	cfg := fmt.Sprintf(`{"rules":[
		{"name":"keys","scope":"global","match":{"path_prefix":"/k"},"key":["header:x-api-key"],"limit":2,"window":"1h"},
		{"name":"login","scope":"global","match":{"path_prefix":"/login"},"limit":2,"window":"1h"}],
		"global":{"cluster":"ratelimit","domain":"sluice","timeout":"500ms"},"on_error":"deny","max_keys":%d}`, maxKeys)
	e := startSluice(t, 2, cfg, func(o *envoytest.Options) {
		o.XFFNumTrustedHops = 1
		o.ExtraClustersYAML = shippedCluster(t, rls.GRPCAddr)
		o.StartTimeout = 150 * time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	calls := func() uint64 { n, _ := e.Stat("cluster.ratelimit.upstream_rq_total"); return n }
	run := fmt.Sprint(time.Now().UnixNano())
	calls0 := calls()
	const senders = 8
	flood := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Path: "/k", Requests: 5 * maxKeys, Concurrency: senders,
		Request: func(i int, r *http.Request) { r.Header.Set("X-Api-Key", fmt.Sprint(run, "-", i)) }})
	floodCalls := calls() - calls0
	t.Logf("flood of %d new values: %v; %d calls to the service", 5*maxKeys, flood, floodCalls)
	if flood.Errors > 0 {
		t.Fatalf("flood: %d errors (%v)", flood.Errors, flood.FirstErr)
	}
	// A value with a slot of its own is admitted once (its first call);
	// the rest share the overflow lease's budget of 2 at the service. A
	// slot is written when the service answers, so values whose call is in
	// flight when their bucket fills (at most the 8 senders, for each of the
	// rule's 2 buckets of 8 slots) may each still be admitted on a call of
	// their own, within their own budget at the service.
	const buckets = 2
	if got := flood.Count(200); got > 16+2+buckets*senders {
		t.Errorf("flood: %d admitted, want at most 16 (a slot each) + 2 (the overflow lease) + %d (calls in flight as each bucket fills)", got, buckets*senders)
	}
	if floodCalls > 16+20 {
		t.Errorf("flood: %d calls for %d values, want about one per slot and a few for the overflow lease", floodCalls, 5*maxKeys)
	}
	for c := 0; c < 4; c++ {
		res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Path: "/login", Requests: 5, Concurrency: 1,
			XForwardedFor: func(int) string { return fmt.Sprintf("203.0.113.%d", c+1) }})
		if res.Count(200) != 2 || res.Count(429) != 3 {
			t.Errorf("new client %d of login after the flood: %v, want its limit of 2 admitted", c, res.Status)
		}
	}
	var st map[string]uint64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if st, _ = e.Stats(`sluice\.`); st["wasmcustom.sluice.rule.keys.overflow"] >= 5*maxKeys-16 {
			break
		}
	}
	t.Logf("stats: keys overflow %d, login overflow %d, on_error denied %d, calls %d",
		st["wasmcustom.sluice.rule.keys.overflow"], st["wasmcustom.sluice.rule.login.overflow"],
		st["wasmcustom.sluice.on_error.denied"], st["wasmcustom.sluice.global.calls"])
	if st["wasmcustom.sluice.on_error.denied"] != 0 || st["wasmcustom.sluice.rule.login.overflow"] != 0 {
		t.Errorf("on_error denied %d, login's overflow decisions %d: want none", st["wasmcustom.sluice.on_error.denied"], st["wasmcustom.sluice.rule.login.overflow"])
	}
	if st["wasmcustom.sluice.rule.keys.overflow"] == 0 {
		t.Error("the flood was not decided on the rule's overflow lease")
	}
}
