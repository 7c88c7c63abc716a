package main

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/envoyconf"
	"github.com/sluicehq/sluice/plugin/config"
)

func TestValidateEnvoyCaseAndRoutes(t *testing.T) {
	code, out, _ := sluice(t, "", "validate", "-envoy", "testdata/envoy-case.yaml", "-strict")
	if code != 1 {
		t.Errorf("exit %d with warnings and -strict, want 1", code)
	}
	for _, want := range []string{
		`warning: rule "login": Envoy route "login" (virtual host "app", prefix /login) matches ignoring letter case, the rule's path does not`,
		`warning: rule "api-users": the rule ignores letter case (match.case_sensitive: false), Envoy route "api" (virtual host "app", prefix /api) does not`,
		`warning: rule "checkout": match.route names "checkout", which no route of this connection manager has`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "warning:"); n != 3 {
		t.Errorf("%d warnings, want 3 (none for the rule that agrees with its route, nor for the catch-all /):\n%s", n, out)
	}
}

func TestRouteWarningsAgree(t *testing.T) {
	c, err := config.Parse([]byte(`{"rules":[
		{"name":"a","match":{"path_prefix":"/Login/x","case_sensitive":false},"limit":1,"window":"1s"},
		{"name":"b","match":{"path_exact":"/other"},"limit":1,"window":"1s"},
		{"name":"c","match":{"route":["login"]},"limit":1,"window":"1s"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	routes := []envoyconf.RoutePath{
		{Name: "login", Path: "/login", CaseInsensitive: true},
		{Name: "other", Path: "/Other", Exact: true, CaseInsensitive: true},
		{Name: "root", Path: "/"},
	}
	w := routeWarnings(c, routes)
	if len(w) != 1 || !strings.Contains(w[0], `rule "b"`) {
		t.Errorf("warnings %q, want one, for rule b (/other is case-sensitive, its route /Other is not)", w)
	}
}

// TestCoversCaseAndRoutes: a client_ip rule covers a header-keyed rule's
// requests only if it matches them in every letter case the other does,
// and on every route the other names.
func TestCoversCaseAndRoutes(t *testing.T) {
	m := func(doc string) *config.Match {
		c, err := config.Parse([]byte(`{"rules":[{"name":"r","match":` + doc + `,"limit":1,"window":"1s"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		return &c.Rules[0].Match
	}
	for _, c := range []struct {
		cover, rule string
		want        bool
	}{
		{`{"path_prefix":"/api"}`, `{"path_prefix":"/api/x"}`, true},
		{`{"path_prefix":"/API","case_sensitive":false}`, `{"path_prefix":"/api/x"}`, true},
		{`{"path_prefix":"/api"}`, `{"path_prefix":"/api/x","case_sensitive":false}`, false},
		{`{}`, `{"path_prefix":"/api/x","case_sensitive":false}`, true},
		{`{"route":["a","b"]}`, `{"route":["a"]}`, true},
		{`{"route":["a"]}`, `{"route":["a","c"]}`, false},
		{`{"route":["a"]}`, `{"path_prefix":"/x"}`, false},
		{`{"path_prefix":"/x"}`, `{"route":["a"],"path_prefix":"/x/y"}`, true},
	} {
		if got := covers(m(c.cover), m(c.rule)); got != c.want {
			t.Errorf("covers(%s, %s) = %v, want %v", c.cover, c.rule, got, c.want)
		}
	}
}
