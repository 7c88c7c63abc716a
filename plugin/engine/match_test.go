package engine

import (
	"testing"
)

// spellings of /login that an upstream routing as ASP.NET Core does takes
// for its login page (written out here, not produced by the folding).
var loginSpellings = []string{"/login", "/LOGIN", "/Login", "/lOgIn/x", "/%4Cogin", "//LOGIN", "/log%C4%B1n"}

func admitted(e *Engine, paths []string, source string, now int64) int {
	n := 0
	for _, p := range paths {
		if e.Decide(req(p, "GET", source), now).Outcome == Allow {
			n++
		}
	}
	return n
}

func TestCaseInsensitivePrefix(t *testing.T) {
	ci := mustConfig(t, `{"rules":[{"name":"login","match":{"path_prefix":"/login","case_sensitive":false},"limit":2,"window":"1h"}]}`)
	e := New(ci, newMemStore(), 1, wallClock)
	if got := admitted(e, loginSpellings, "10.0.0.1:1", t0); got != 2 {
		t.Errorf("case_sensitive false: %d of %d spellings admitted, want 2", got, len(loginSpellings))
	}
	if v := e.Decide(req("/logout", "GET", "10.0.0.1:1"), t0); v.Report != nil {
		t.Error("/logout matched the /login rule")
	}
	cs := mustConfig(t, `{"rules":[{"name":"login","match":{"path_prefix":"/login"},"limit":2,"window":"1h"}]}`)
	e = New(cs, newMemStore(), 1, wallClock)
	// Case-sensitive: of the spellings only "/login" matches the rule.
	if got := admitted(e, loginSpellings, "10.0.0.1:1", t0); got != len(loginSpellings) {
		t.Errorf("case_sensitive true: %d of %d spellings admitted, want all", got, len(loginSpellings))
	}
}

func TestCaseInsensitivePathKey(t *testing.T) {
	// One budget for every spelling of a path, per path.
	cfg := mustConfig(t, `{"rules":[{"name":"pages","match":{"case_sensitive":false},"key":["path"],"limit":2,"window":"1h"}]}`)
	e := New(cfg, newMemStore(), 1, wallClock)
	exact := []string{"/login", "/LOGIN", "/Login", "/%4Cogin", "//LOGIN", "/log%C4%B1n"}
	if got := admitted(e, exact, "10.0.0.1:1", t0); got != 2 {
		t.Errorf("path key, case_sensitive false: %d admitted, want 2", got)
	}
	if got := admitted(e, []string{"/other", "/OTHER", "/Other"}, "10.0.0.1:1", t0); got != 2 {
		t.Errorf("another path: %d admitted, want its own 2", got)
	}
	cs := mustConfig(t, `{"rules":[{"name":"pages","key":["path"],"limit":2,"window":"1h"}]}`)
	e = New(cs, newMemStore(), 1, wallClock)
	if got := admitted(e, []string{"/login", "/LOGIN", "/Login", "/login"}, "10.0.0.1:1", t0); got != 4 {
		t.Errorf("path key, case-sensitive: %d admitted, want 4 (three paths)", got)
	}
}

type routeRequest struct {
	*fakeRequest
	route  string
	routes int
}

func (r *routeRequest) RouteName() string { r.routes++; return r.route }

func TestRouteMatch(t *testing.T) {
	cfg := mustConfig(t, `{"rules":[{"name":"co","match":{"route":["checkout","cart"]},"limit":1,"window":"1h"},{"name":"all","limit":100,"window":"1h"}]}`)
	e := New(cfg, newMemStore(), 1, wallClock)
	r := &routeRequest{fakeRequest: req("/x", "GET", "10.0.0.1:1"), route: "checkout"}
	if e.Decide(r, t0).Outcome != Allow || e.Decide(r, t0).Outcome != Reject {
		t.Fatal("route checkout: want 1 admitted then rejected")
	}
	if r.routes != 2 {
		t.Errorf("route read %d times for 2 requests, want once each", r.routes)
	}
	other := &routeRequest{fakeRequest: req("/x", "GET", "10.0.0.1:1"), route: "home"}
	for i := 0; i < 2; i++ {
		if e.Decide(other, t0).Outcome != Allow {
			t.Errorf("route home, request %d: limited by a rule for checkout", i+1)
		}
	}
	// No route rule: the property is never read.
	e = New(mustConfig(t, `{"rules":[{"name":"all","limit":100,"window":"1h"}]}`), newMemStore(), 1, wallClock)
	r.routes = 0
	e.Decide(r, t0)
	if r.routes != 0 {
		t.Errorf("route read %d times without a route rule", r.routes)
	}
}

func TestMatchNoAllocCaseInsensitive(t *testing.T) {
	cfg := mustConfig(t, `{"rules":[{"name":"login","match":{"path_prefix":"/login","case_sensitive":false},"key":["path"],"limit":1000000,"window":"1h"}]}`)
	e := New(cfg, newMemStore(), 1, wallClock)
	// A clean path (CleanPath copies one it cleans, as before): what
	// folding adds allocates nothing.
	r := req("/Login/Caf\u00e9", "GET", "10.0.0.1:1")
	e.Decide(r, t0)
	n := testing.AllocsPerRun(50, func() { ri := requestInfo{req: r}; e.matchRules(&ri) })
	if n != 0 {
		t.Errorf("matching allocates %v times per request", n)
	}
}
