package wasmtest

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

// TestRuleMetricsBounded: rule_metrics lists the rules that keep metrics of
// their own; the decisions of the others are counted together in
// sluice.rules_other.*, and no sluice.rule.<name>.* series is defined for
// them.
func TestRuleMetricsBounded(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, `{"rule_metrics":["a"],"rules":[
 {"name":"a","match":{"path_prefix":"/a"},"limit":2,"window":"1h"},
 {"name":"b","match":{"path_prefix":"/b"},"limit":1,"window":"1h"},
 {"name":"c","match":{"route":["rc"]},"limit":3,"window":"1h"}]}`)
	for i := 0; i < 3; i++ {
		get(vms[i%2], "/a", "10.0.0.1:1")
		get(vms[i%2], "/b", "10.0.0.1:1")
		// No route: rule c does not apply.
		if r := get(vms[i%2], "/c", "10.0.0.1:1"); r.Status != 200 {
			t.Errorf("/c on no route: %d", r.Status)
		}
	}
	// Route rc: requests whose Envoy route is "rc".
	for i := 0; i < 4; i++ {
		req := routed("/c", "rc")
		if res := vms[i%2].Request(req); (i < 3) != (res.Status == 200) {
			t.Errorf("route rc request %d: %d", i, res.Status)
		}
	}
	h.AdvanceClock(2 * time.Second)
	metricWant(t, h.Metrics(), map[string]uint64{
		"sluice.rule.a.allowed": 2, "sluice.rule.a.rejected": 1,
		// b: 1 allowed, 2 rejected; c: 3 allowed, 1 rejected.
		"sluice.rules_other.allowed": 4, "sluice.rules_other.rejected": 3,
	}, nil)
	for _, m := range h.Metrics().Snapshot() {
		if strings.HasPrefix(m.Name, "sluice.rule.b.") || strings.HasPrefix(m.Name, "sluice.rule.c.") {
			t.Errorf("%s is defined though rule_metrics does not list its rule", m.Name)
		}
	}
	healthy(t, vms...)
}

// routed is a GET of path from 10.0.0.1 that Envoy routed by route.
func routed(path, route string) wasmhost.Request {
	r := wasmhost.HTTPRequest("GET", "shop.example", path)
	r.Properties = wasmhost.Properties{"source.address": "10.0.0.1:1", "xds.route_name": route}
	r.Response = &wasmhost.Response{Status: 200, Body: []byte("ok")}
	return r
}
