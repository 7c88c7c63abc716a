package e2e_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// TestMetricsAfterKnownTraffic reads Sluice's counters from Envoy's /stats and
// /stats/prometheus after traffic whose outcome is known exactly.
func TestMetricsAfterKnownTraffic(t *testing.T) {
	const cfg = `{"rules":[
	  {"name":"checkout","match":{"path_prefix":"/checkout"},"limit":3,"window":"1h"},
	  {"name":"login","match":{"path_prefix":"/login"},"limit":10,"window":"1s","burst":2,"max_delay":"1s"},
	  {"name":"trial","match":{"path_prefix":"/checkout"},"limit":1,"window":"1h","shadow":true}],
	  "exempt_cidrs":["198.51.100.0/24"]}`
	e := startSluice(t, 2, cfg, func(o *envoytest.Options) { o.XFFNumTrustedHops = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	one := func(int) string { return "203.0.113.5" }
	// checkout: 3 allowed, 7 rejected; of the 3 admitted, the shadow rule
	// would have admitted 1 and rejected 2 (it is charged only when the
	// request is admitted).
	envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Path: "/checkout", Requests: 10, Concurrency: 1, XForwardedFor: one})
	// login: 4 at once: 2 allowed at once, 2 delayed (100ms, 200ms).
	envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Path: "/login", Requests: 4, Concurrency: 4, XForwardedFor: one})
	// exempt: 5.
	envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Path: "/checkout", Requests: 5, Concurrency: 1, XForwardedFor: func(int) string { return "198.51.100.7" }})

	want := map[string]uint64{
		"wasmcustom.sluice.rule.checkout.allowed":      3,
		"wasmcustom.sluice.rule.checkout.rejected":     7,
		"wasmcustom.sluice.rule.trial.shadow_rejected": 2,
		"wasmcustom.sluice.rule.trial.allowed":         1,
		"wasmcustom.sluice.rule.login.allowed":         2,
		"wasmcustom.sluice.rule.login.delayed":         2,
		"wasmcustom.sluice.rule.login.rejected":        0,
		"wasmcustom.sluice.exempt":                     5,
		"wasmcustom.sluice.cas.exhausted":              0,
		"wasmcustom.sluice.on_error.allowed":           0,
		"wasmcustom.sluice.held_requests":              0,
	}
	for name, v := range want {
		waitStat(t, e, name, v)
	}
	// Tracked client states: the census takes about 10 ticks for a full pass.
	// checkout and trial each hold one state for 203.0.113.5 for an hour;
	// login's state (10/s) has fully recovered within a second and no longer
	// counts.
	waitStatWithin(t, e, "wasmcustom.sluice.table.active_states", 2, 20*time.Second)

	resp, err := http.Get(e.AdminURL() + "/stats/prometheus")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	prom := string(body)
	for _, line := range []string{
		`sluice_rule_rejected{sluice_rule="checkout"} 7`,
		`sluice_rule_allowed{sluice_rule="checkout"} 3`,
		`sluice_rule_delayed{sluice_rule="login"} 2`,
		`sluice_exempt{} 5`,
	} {
		if !strings.Contains(prom, line) {
			t.Errorf("/stats/prometheus lacks %q", line)
		}
	}
	if t.Failed() {
		for _, l := range strings.Split(prom, "\n") {
			if strings.Contains(l, "sluice") {
				t.Log(l)
			}
		}
	}
}
