package wasmtest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

func filterState(t *testing.T, r *wasmhost.Result) (decision, rule string) {
	t.Helper()
	d, ok1 := r.Stream.FilterState("sluice_decision")
	n, ok2 := r.Stream.FilterState("sluice_rule")
	if !ok1 || !ok2 {
		t.Errorf("filter state not set: decision %q (%v), rule %q (%v)", d, ok1, n, ok2)
	}
	return d, n
}

// TestFilterStateAndProblem: every decided request sets sluice_decision
// and sluice_rule; a rejection answers the problem document naming every
// rule that refused, with t = Retry-After.
func TestFilterStateAndProblem(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[
		{"name":"outer","match":{"path_prefix":"/a"},"limit":1,"window":"1h"},
		{"name":"inner","match":{"path_prefix":"/a/b"},"limit":1,"window":"1h"},
		{"name":"watch","match":{"path_prefix":"/s"},"limit":1,"window":"1h","shadow":true}]}`)[0]
	for _, c := range []struct {
		path           string
		status         int
		decision, rule string
	}{
		{"/free", 200, "allowed", ""},
		{"/a/b", 200, "allowed", ""},
		{"/a/b", 429, "rejected", "outer"},
		{"/s", 200, "allowed", ""},
		{"/s", 200, "shadow_rejected", "watch"},
	} {
		r := get(vm, c.path, "10.0.0.1:1")
		d, n := filterState(t, r)
		if r.Status != c.status || d != c.decision || n != c.rule {
			t.Errorf("%s: %d %q %q, want %d %q %q", c.path, r.Status, d, n, c.status, c.decision, c.rule)
		}
		if r.Status != 429 {
			continue
		}
		if ct := r.Headers.Value("content-type"); ct != "application/problem+json" {
			t.Errorf("content-type %q", ct)
		}
		var doc struct {
			Violated   []string `json:"violated-policies"`
			RetryAfter int      `json:"retry-after"`
		}
		if err := json.Unmarshal(r.Body, &doc); err != nil || strings.Join(doc.Violated, ",") != "outer,inner" {
			t.Errorf("body %s (%v), want outer and inner violated", r.Body, err)
		}
		ra := r.Headers.Value("retry-after")
		if !strings.HasSuffix(r.Headers.Value("ratelimit"), ";t="+ra) {
			t.Errorf("ratelimit %q, retry-after %q: want t = Retry-After", r.Headers.Value("ratelimit"), ra)
		}
	}
}
