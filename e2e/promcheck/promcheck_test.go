// Package promcheck checks Sluice's Grafana dashboard
// (envoy/dashboards/sluice.json) and Prometheus alerting rules
// (envoy/alerts/sluice.rules.yaml) against reality: every expression parses
// with Prometheus' own parsers (model/rulefmt, promql/parser), and every
// metric they read exists in the /stats/prometheus of a real Envoy running
// the real plugin after known traffic.
//
// It is a module of its own so that Prometheus (a large dependency) stays
// out of the main go.mod; `make test` runs it (`make promcheck`).
package promcheck

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/sluicehq/sluice/internal/envoytest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	envoytest.StopAll()
	os.Exit(code)
}

func repoFile(t *testing.T, parts ...string) []byte {
	t.Helper()
	root, err := envoytest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(append([]string{root}, parts...)...))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// query is one PromQL expression and where it comes from.
type query struct {
	where, expr string
}

// alertQueries parses the alerting rules with Prometheus' rule-file parser
// (which also parses each expression and checks the templates).
func alertQueries(t *testing.T, p parser.Parser) []query {
	t.Helper()
	groups, errs := rulefmt.Parse(repoFile(t, "envoy", "alerts", "sluice.rules.yaml"), false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("envoy/alerts/sluice.rules.yaml: %v", err)
	}
	if groups == nil {
		t.FailNow()
	}
	var qs []query
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: wants a severity label, a summary and a description", r.Alert)
			}
			qs = append(qs, query{"alert " + r.Alert, r.Expr})
		}
	}
	if len(qs) < 5 {
		t.Errorf("%d alerts", len(qs))
	}
	return qs
}

// grafanaVars replaces the dashboard's variables by what they stand for in
// PromQL, so that Prometheus' parser reads the expression Grafana sends.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "1m", "${rule}", ".*", "$rule", ".*")

// labelValuesRE reads a Grafana label_values(metric, label) variable query.
var labelValuesRE = regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)

// dashboardQueries reads every target expression and variable query of the
// dashboard; labelQueries are the variables' (metric, label) pairs.
func dashboardQueries(t *testing.T) (qs []query, labelQueries [][2]string) {
	t.Helper()
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(repoFile(t, "envoy", "dashboards", "sluice.json"), &d); err != nil {
		t.Fatalf("envoy/dashboards/sluice.json: %v", err)
	}
	for _, p := range d.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for i, tg := range p.Targets {
			qs = append(qs, query{fmt.Sprintf("panel %q target %d", p.Title, i), grafanaVars.Replace(tg.Expr)})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		s, _ := q["query"].(string)
		m := labelValuesRE.FindStringSubmatch(s)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(metric, label)", v.Name, s)
			continue
		}
		labelQueries = append(labelQueries, [2]string{m[1], m[2]})
	}
	if len(qs) < 10 {
		t.Errorf("%d dashboard queries", len(qs))
	}
	return qs, labelQueries
}

// selectors parses each query and returns, by metric name, the label
// names its selectors match on (besides __name__) and the labels an
// aggregation groups it by (`sum by (sluice_rule, sluice_class) (...)`).
func selectors(t *testing.T, p parser.Parser, qs []query) map[string]map[string]bool {
	t.Helper()
	out := map[string]map[string]bool{}
	for _, q := range qs {
		e, err := p.ParseExpr(q.expr)
		if err != nil {
			t.Errorf("%s: %v\n%s", q.where, err, q.expr)
			continue
		}
		for _, ms := range parser.ExtractSelectors(e) {
			name := selectorName(ms)
			if name == "" {
				t.Errorf("%s: a selector without a metric name", q.where)
				continue
			}
			if out[name] == nil {
				out[name] = map[string]bool{}
			}
			for _, m := range ms {
				if m.Name != model.MetricNameLabel {
					out[name][m.Name] = true
				}
			}
		}
		parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
			if a, ok := n.(*parser.AggregateExpr); ok && !a.Without {
				for _, ms := range parser.ExtractSelectors(a.Expr) {
					if name := selectorName(ms); name != "" {
						for _, l := range a.Grouping {
							out[name][l] = true
						}
					}
				}
			}
			return nil
		})
	}
	return out
}

// selectorName is the metric a selector's matchers name ("" for none).
func selectorName(ms []*labels.Matcher) string {
	for _, m := range ms {
		if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
			return m.Value
		}
	}
	return ""
}

// TestQueriesParse needs no Envoy: the rules and the dashboard parse.
func TestQueriesParse(t *testing.T) {
	p := parser.NewParser(parser.Options{})
	qs := alertQueries(t, p)
	dq, _ := dashboardQueries(t)
	sel := selectors(t, p, append(qs, dq...))
	for name := range sel {
		if !strings.HasPrefix(name, "sluice_") {
			t.Errorf("metric %s is not one of Sluice's", name)
		}
	}
}

// whyConfig has a rule of every kind whose metrics the dashboard shows: a
// refusing one, a shadow one, a throttling one, a concurrency one, a
// global one whose service is down (so on_error decides and the circuit
// opens), an adaptive one, one with a cost and a store-wide concurrency
// rule with a priority class (its /shop requests go to a slow upstream).
const whyConfig = `{
  "rules": [
    {"name": "strict", "match": {"path_prefix": "/strict"}, "limit": 1, "window": "1h"},
    {"name": "watch", "match": {"path_prefix": "/shadow"}, "limit": 1, "window": "1h", "shadow": true},
    {"name": "slow", "match": {"path_prefix": "/slow"}, "limit": 5, "window": "1s", "burst": 1, "max_delay": "2s"},
    {"name": "slots", "match": {"path_prefix": "/slots"}, "algorithm": "concurrency", "limit": 1, "max_delay": "2s"},
    {"name": "fleet", "match": {"path_prefix": "/fleet"}, "scope": "global", "limit": 100, "window": "1m"},
    {"name": "learnt", "match": {"path_prefix": "/learnt"}, "algorithm": "adaptive_concurrency", "max_delay": "1s"},
    {"name": "tokens", "match": {"path_prefix": "/tokens"}, "limit": 100, "window": "1m", "cost": {"request_header": "x-cost", "max": 50}},
    {"name": "shop", "match": {"path_prefix": "/shop"}, "algorithm": "concurrency", "limit": 2, "key": [],
     "classes": [{"name": "login", "match": {"path_prefix": "/shop/login"}, "reserve": 0.5}]}
  ],
  "global": {"cluster": "ratelimit", "timeout": "100ms"},
  "exempt_cidrs": ["127.0.0.2/32"]
}`

// TestMetricsExistInEnvoy runs known traffic through a real Envoy with the
// plugin and checks that every metric (and label) the dashboard and the
// rules read is in its /stats/prometheus, with the counts of that traffic.
func TestMetricsExistInEnvoy(t *testing.T) {
	p := parser.NewParser(parser.Options{})
	qs := alertQueries(t, p)
	dq, lq := dashboardQueries(t)
	want := selectors(t, p, append(qs, dq...))
	for _, l := range lq {
		if want[l[0]] == nil {
			want[l[0]] = map[string]bool{}
		}
		want[l[0]][l[1]] = true
	}

	root, err := envoytest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	wasm := filepath.Join(root, "build", "sluice.wasm")
	if _, err := os.Stat(wasm); err != nil {
		t.Fatalf("%s is missing: run `make build` (make test does): %v", wasm, err)
	}
	dead, err := envoytest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// The shop's upstream holds every request until its client goes away.
	shop, err := envoytest.StartUpstream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shop.Close() })
	shop.SetDelay(time.Hour)
	e := envoytest.StartT(t, envoytest.Options{
		Concurrency:   2,
		Wasm:          &envoytest.Wasm{File: wasm, Config: whyConfig},
		Clusters:      map[string]string{"ratelimit": "127.0.0.1:" + strconv.Itoa(dead), "shop": shop.Addr()},
		HTTP2Clusters: []string{"ratelimit"},
		Routes:        []envoytest.Route{{Name: "shop", Prefix: "/shop", Cluster: "shop"}, {Name: "default", Prefix: "/"}},
	})
	for _, path := range []string{"/strict", "/strict", "/shadow", "/shadow", "/slow", "/slow", "/slots", "/fleet", "/fleet", "/learnt", "/tokens"} {
		if _, _, err := e.Get(t.Context(), path, http.Header{"x-cost": {"7"}}); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	holdShop(t, e, shop)

	// Counters are published about once a second per worker: wait for the
	// traffic's counts, then check every queried series is there.
	expect := map[string]float64{
		`sluice_rule_rejected{sluice_rule="strict"}`:       1,
		`sluice_rule_shadow_rejected{sluice_rule="watch"}`: 1,
		`sluice_rule_delayed{sluice_rule="slow"}`:          1,
		`sluice_rule_allowed{sluice_rule="slots"}`:         1,
		`sluice_on_error_allowed`:                          2,
		`sluice_rule_charged{sluice_rule="tokens"}`:        7,
		// The class metrics carry the rule and the class as labels.
		`sluice_class_refused{sluice_rule="shop",sluice_class="default"}`:   1,
		`sluice_class_refused{sluice_rule="shop",sluice_class="login"}`:     0,
		`sluice_class_in_flight{sluice_rule="shop",sluice_class="default"}`: 1,
		`sluice_class_in_flight{sluice_rule="shop",sluice_class="login"}`:   1,
	}
	var series map[string]map[string]float64
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := e.Admin(t.Context(), "/stats/prometheus")
		if err != nil {
			t.Fatal(err)
		}
		series = parseExposition(t, string(b))
		missing := ""
		for s, v := range expect {
			if got := sumSeries(series, s); got != v {
				missing = fmt.Sprintf("%s = %v, want %v", s, got, v)
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: %s", missing)
		}
		time.Sleep(250 * time.Millisecond)
	}
	for n, byLabels := range series {
		if strings.HasPrefix(n, "sluice_class_") && n != "sluice_class_in_flight" && n != "sluice_class_queued" && n != "sluice_class_refused" {
			t.Errorf("%s %v: a class metric whose rule or class name was not taken out into a label", n, keys(byLabels))
		}
	}
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		byLabels, ok := series[n]
		if !ok {
			t.Errorf("%s: queried by the dashboard or the alerts, not in Envoy's /stats/prometheus", n)
			continue
		}
		for l := range want[n] {
			found := false
			for ls := range byLabels {
				if strings.Contains(ls, l+`="`) {
					found = true
				}
			}
			if !found {
				t.Errorf("%s: queried with label %s, which Envoy's series %v lack", n, l, keys(byLabels))
			}
		}
	}
	if !t.Failed() {
		t.Logf("%d metrics queried by the dashboard and the alerts, all in Envoy's /stats/prometheus", len(names))
	}
}

// parseExposition reads Prometheus' text format: metric name -> label set
// (as written, "" for none) -> value.
func parseExposition(t *testing.T, text string) map[string]map[string]float64 {
	t.Helper()
	out := map[string]map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest := line, ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		ls, val := "", strings.TrimSpace(rest)
		if strings.HasPrefix(rest, "{") {
			j := strings.LastIndex(rest, "}")
			ls, val = rest[1:j], strings.TrimSpace(rest[j+1:])
		}
		if f := strings.Fields(val); len(f) > 0 {
			val = f[0]
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			t.Fatalf("unreadable exposition line %q", line)
		}
		if out[name] == nil {
			out[name] = map[string]float64{}
		}
		out[name][ls] = v
	}
	return out
}

// sumSeries sums the series of sel: `name` or `name{l="v",...}` (the
// series that have every one of those labels, in any order). A selector
// no series matches sums to -1, so that a wanted 0 tells an absent series
// from a zero one.
func sumSeries(series map[string]map[string]float64, sel string) float64 {
	name, want := sel, ""
	if i := strings.IndexByte(sel, '{'); i >= 0 {
		name, want = sel[:i], strings.TrimSuffix(sel[i+1:], "}")
	}
	sum, found := 0.0, false
	for ls, v := range series[name] {
		have := strings.Split(ls, ",")
		match := true
		for _, l := range strings.Split(want, ",") {
			match = match && (l == "" || slices.Contains(have, l))
		}
		if match {
			sum, found = sum+v, true
		}
	}
	if !found {
		return -1
	}
	return sum
}

// holdShop sends the shop rule (2 slots, a login class keeping half of
// them) a buy that the shop holds, then a second buy, which the default
// class's single slot refuses, and a login, which takes the slot kept for
// logins; the buy and the login stay in flight until the test ends.
func holdShop(t *testing.T, e *envoytest.Envoy, shop *envoytest.Upstream) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	hold := func(path string, n int) {
		go func() { _, _, _ = e.Get(ctx, path, nil) }()
		deadline := time.Now().Add(30 * time.Second)
		for shop.InFlight().Now < n {
			if time.Now().After(deadline) {
				t.Fatalf("GET %s: the shop has %d requests in flight after 30s, want %d", path, shop.InFlight().Now, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	hold("/shop/buy", 1)
	resp, _, err := e.Get(t.Context(), "/shop/buy", nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a second buy with the buys' one slot taken: status %d, want 429", resp.StatusCode)
	}
	hold("/shop/login", 2)
}

func keys(m map[string]float64) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
