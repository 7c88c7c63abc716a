package wasmtest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

// The documented metrics against what known traffic did.

func metricRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func metricWant(t *testing.T, m *wasmhost.Metrics, counters, gauges map[string]uint64) {
	t.Helper()
	keys := make([]string, 0, len(counters))
	for k := range counters {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if got := m.Counter(k); got != counters[k] {
			t.Errorf("counter %s = %d, want %d", k, got, counters[k])
		}
	}
	keys = keys[:0]
	for k := range gauges {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if got := m.Gauge(k); got != gauges[k] {
			t.Errorf("gauge %s = %d, want %d", k, got, gauges[k])
		}
	}
}

const metricMixed = `{"exempt_cidrs":["192.168.0.0/16"],"rules":[
 {"name":"rate","match":{"path_prefix":"/rate"},"key":["path"],"limit":3,"window":"1h"},
 {"name":"shadow","match":{"path_prefix":"/shadow"},"key":["path"],"limit":2,"window":"1h","shadow":true},
 {"name":"cost","match":{"path_prefix":"/cost"},"key":["path"],"limit":20,"window":"1h","cost":{"request_header":"x-cost"}},
 {"name":"thr","match":{"path_prefix":"/thr"},"key":["path"],"limit":1,"window":"1s","max_delay":"5s"}]}`

// TestMetricsCountersPerRuleAcrossWorkers: rate, shadow, cost, throttled,
// exempt and no-match traffic spread over 3 workers, counters exact and
// stable over many further ticks (no double counting).
func TestMetricsCountersPerRuleAcrossWorkers(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 3, metricMixed)
	w := func(i int) *wasmhost.VM { return vms[i%3] }
	// rate: 5 requests, 3 allowed, 2 rejected.
	for i := 0; i < 5; i++ {
		r := get(w(i), "/rate", "10.0.0.1:1")
		if (i < 3) != (r.Status == 200) {
			t.Fatalf("rate request %d: %d", i, r.Status)
		}
	}
	// exempt: 4 requests on /rate from an exempt client, all pass.
	for i := 0; i < 4; i++ {
		if r := get(w(i), "/rate", "192.168.1.1:1"); r.Status != 200 {
			t.Fatalf("exempt request %d: %d", i, r.Status)
		}
	}
	// no match: 3 requests.
	for i := 0; i < 3; i++ {
		if r := get(w(i), "/other", "10.0.0.1:1"); r.Status != 200 {
			t.Fatalf("no-match request %d: %d", i, r.Status)
		}
	}
	// shadow: 5 requests, all pass, 3 would have been refused.
	for i := 0; i < 5; i++ {
		if r := get(w(i), "/shadow", "10.0.0.1:1"); r.Status != 200 {
			t.Fatalf("shadow request %d: %d", i, r.Status)
		}
	}
	// cost: 3 + 4 + 5 = 12 charged, then 10 refused (8 left), then 8 passes.
	for i, c := range []string{"3", "4", "5", "10", "8"} {
		r := get(w(i), "/cost", "10.0.0.1:1", [2]string{"x-cost", c})
		if want := 200; i == 3 {
			if r.Status != 429 {
				t.Fatalf("cost %s: %d, want 429", c, r.Status)
			}
		} else if r.Status != want {
			t.Fatalf("cost %s: %d", c, r.Status)
		}
	}
	// throttled: 1 at once, 2 held then let go.
	var held []*wasmhost.Result
	for i := 0; i < 3; i++ {
		r := get(w(i), "/thr", "10.0.0.1:1")
		if i == 0 && r.Status != 200 {
			t.Fatalf("thr 0: %d", r.Status)
		}
		if i > 0 {
			if !r.Paused {
				t.Fatalf("thr %d not held", i)
			}
			held = append(held, r)
		}
	}
	h.AdvanceClock(500 * time.Millisecond)
	if g := h.Metrics().Gauge("sluice.held_requests"); g != 2 {
		t.Errorf("held_requests %d while 2 are held on 2 workers, want 2", g)
	}
	for step := 0; step < 40; step++ {
		h.AdvanceClock(100 * time.Millisecond)
	}
	for i, r := range held {
		if res := r.Stream.Finish(); res.Status != 200 || !res.Forwarded {
			t.Errorf("held %d: %d forwarded %v", i, res.Status, res.Forwarded)
		}
	}
	counters := map[string]uint64{
		"sluice.rule.rate.allowed": 3, "sluice.rule.rate.rejected": 2, "sluice.rule.rate.delayed": 0, "sluice.rule.rate.shadow_rejected": 0,
		"sluice.rule.shadow.shadow_rejected": 3, "sluice.rule.shadow.rejected": 0,
		"sluice.rule.cost.allowed": 4, "sluice.rule.cost.rejected": 1, "sluice.rule.cost.charged": 20,
		"sluice.rule.thr.allowed": 1, "sluice.rule.thr.delayed": 2, "sluice.rule.thr.rejected": 0,
		"sluice.exempt": 4, "sluice.on_error.allowed": 0, "sluice.on_error.denied": 0, "sluice.table.full": 0,
	}
	gauges := map[string]uint64{"sluice.held_requests": 0}
	metricWant(t, h.Metrics(), counters, gauges)
	// Many more ticks (every worker flushes again and again): nothing moves.
	for i := 0; i < 10; i++ {
		h.AdvanceClock(time.Second)
	}
	metricWant(t, h.Metrics(), counters, gauges)
	healthy(t, vms...)
}

// TestMetricsCostZeroCounted: a request whose cost header says 0 is admitted:
// it should be counted as allowed.
func TestMetricsCostZeroCounted(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, metricMixed)
	for i := 0; i < 3; i++ {
		if r := get(vms[i%2], "/cost", "10.0.0.1:1", [2]string{"x-cost", "0"}); r.Status != 200 {
			t.Fatalf("cost 0: %d", r.Status)
		}
	}
	h.AdvanceClock(1100 * time.Millisecond)
	m := h.Metrics()
	if got := m.Counter("sluice.rule.cost.allowed"); got != 3 {
		t.Errorf("cost.allowed %d after 3 admitted requests of cost 0, want 3", got)
	}
}

// TestMetricsConcurrencyGaugesSummed: a concurrency rule with a queue over 3
// workers: slots_held, waiting, in_flight, queued while busy; allowed,
// delayed, wait_ms exact after; gauges back to 0.
func TestMetricsConcurrencyGaugesSummed(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 3, `{"rules":[{"name":"store","algorithm":"concurrency","limit":2,"key":["path"],"max_delay":"5s"}]}`)
	a := open(t, vms[0], "/buy", "10.0.0.1:1")
	b := open(t, vms[1], "/buy", "10.0.0.1:2")
	var q []*wasmhost.Stream
	for i := 0; i < 3; i++ {
		s := open(t, vms[(i+2)%3], "/buy", "10.0.0.1:3")
		wantState(t, "waiter", s, wasmhost.StreamPaused)
		q = append(q, s)
	}
	h.AdvanceClock(1100 * time.Millisecond)
	metricWant(t, h.Metrics(), nil, map[string]uint64{
		"sluice.concurrency.slots_held": 2, "sluice.concurrency.waiting": 3,
		"sluice.rule.store.in_flight": 2, "sluice.rule.store.queued": 3,
	})
	// Free the slots one by one, 100 ms apart.
	inflight := []*wasmhost.Stream{a, b}
	for i := range q {
		respond(t, inflight[0])
		inflight = inflight[1:]
		h.AdvanceClock(100 * time.Millisecond)
		wantState(t, "next waiter", q[i], wasmhost.StreamUpstream)
		inflight = append(inflight, q[i])
	}
	for _, s := range inflight {
		respond(t, s)
	}
	h.AdvanceClock(1100 * time.Millisecond)
	m := h.Metrics()
	metricWant(t, m, map[string]uint64{
		"sluice.rule.store.allowed": 2, "sluice.rule.store.delayed": 3, "sluice.rule.store.rejected": 0,
	}, map[string]uint64{
		"sluice.concurrency.slots_held": 0, "sluice.concurrency.waiting": 0,
		"sluice.rule.store.in_flight": 0, "sluice.rule.store.queued": 0,
	})
	// Waits: 1100, 1200, 1300 ms (+ up to one 100 ms step each).
	if got := m.Counter("sluice.rule.store.wait_ms"); got < 3600 || got > 3900 {
		t.Errorf("wait_ms %d, want 3600..3900", got)
	}
	w0 := m.Counter("sluice.rule.store.wait_ms")
	for i := 0; i < 5; i++ {
		h.AdvanceClock(time.Second)
	}
	if got := m.Counter("sluice.rule.store.wait_ms"); got != w0 {
		t.Errorf("wait_ms moved from %d to %d with no traffic", w0, got)
	}
	healthy(t, vms...)
}

// TestMetricsAdaptiveGauges: an adaptive rule pinned at 2 publishes limit 2 and
// a no-queue latency matching the upstream's.
func TestMetricsAdaptiveGauges(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, `{"rules":[{"name":"ad","algorithm":"adaptive_concurrency","key":["path"],"min_limit":2,"max_limit":2,"max_delay":"5s"}]}`)
	for round := 0; round < 30; round++ {
		s1 := open(t, vms[round%2], "/buy", "10.0.0.1:1")
		s2 := open(t, vms[(round+1)%2], "/buy", "10.0.0.1:2")
		h.AdvanceClock(50 * time.Millisecond)
		respond(t, s1)
		respond(t, s2)
	}
	h.AdvanceClock(1100 * time.Millisecond)
	m := h.Metrics()
	if got := m.Gauge("sluice.rule.ad.limit"); got != 2 {
		t.Errorf("limit gauge %d, want 2", got)
	}
	if got := m.Gauge("sluice.rule.ad.latency_us"); got < 40000 || got > 70000 {
		t.Errorf("latency_us gauge %d, want about 50000", got)
	}
	metricWant(t, m, map[string]uint64{"sluice.rule.ad.allowed": 60, "sluice.rule.ad.delayed": 0, "sluice.rule.ad.rejected": 0},
		map[string]uint64{"sluice.concurrency.slots_held": 0, "sluice.rule.ad.in_flight": 0})
	healthy(t, vms...)
}

// TestMetricsActiveStates: 4 clients on a rule keyed by client_ip, spread over
// 3 workers; after the census went round, the per-rule and overall gauges
// say 4 (not a multiple of it, whichever worker counts).
func TestMetricsActiveStates(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 3, `{"rules":[{"name":"ip","key":["client_ip"],"limit":100,"window":"1h"}]}`)
	for i, c := range []string{"10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1", "10.0.0.4:1"} {
		get(vms[i%3], "/", c)
	}
	for i := 0; i < 7; i++ {
		h.AdvanceClock(time.Second)
	}
	metricWant(t, h.Metrics(), map[string]uint64{"sluice.rule.ip.allowed": 4},
		map[string]uint64{"sluice.rule.ip.active_states": 4, "sluice.table.active_states": 4})
}

// TestMetricsVMRestartNoDoubleCount: a worker replaced (new VM) does not
// publish again what the old one did; the new one's counts add up.
func TestMetricsVMRestartNoDoubleCount(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, metricMixed)
	for i := 0; i < 4; i++ {
		get(vms[i%2], "/rate", "10.0.0.1:1")
	}
	h.AdvanceClock(1100 * time.Millisecond)
	if err := vms[1].Kill(); err != nil {
		t.Fatal(err)
	}
	nvm, err := h.NewVM(nil, []byte(metricMixed))
	if err != nil {
		t.Fatal(err)
	}
	get(nvm, "/rate", "10.0.0.1:1")
	get(vms[0], "/rate", "10.0.0.1:1")
	for i := 0; i < 3; i++ {
		h.AdvanceClock(time.Second)
	}
	metricWant(t, h.Metrics(), map[string]uint64{"sluice.rule.rate.allowed": 3, "sluice.rule.rate.rejected": 3}, nil)
}

// --- names: docs, dashboard and alerts against plugin/metrics.go ---

var metricDefRe = regexp.MustCompile(`define(Counter|Gauge)(?:Checked)?\((?:(c?p) \+ )?"([^"]+)"\)`)

// metricDefined returns the metrics plugin/metrics.go defines, per-rule ones
// as sluice.rule.<rule>.<x>, with their kind.
func metricDefined(t *testing.T) map[string]string {
	b, err := os.ReadFile(filepath.Join(metricRoot(), "plugin", "metrics.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range metricDefRe.FindAllStringSubmatch(string(b), -1) {
		name := m[3]
		switch {
		case m[2] == "cp": // a priority class's (newRuleMetrics)
			name = "sluice.class.<rule>.<class>." + name
		case !strings.HasPrefix(name, "sluice."):
			name = "sluice.rule.<rule>." + name
		}
		out[name] = strings.ToLower(m[1])
	}
	return out
}

// metricProm maps a plugin metric name to its Prometheus name.
func metricProm(name string) string {
	// The stats_tags of envoy/envoy.yaml take the rule and class names
	// out into labels.
	name = strings.Replace(name, "sluice.rule.<rule>.", "sluice.rule.", 1)
	name = strings.Replace(name, "sluice.class.<rule>.<class>.", "sluice.class.", 1)
	return strings.ReplaceAll(name, ".", "_")
}

func TestMetricsDashboardAndAlertNames(t *testing.T) {
	def := metricDefined(t)
	if len(def) < 20 {
		t.Fatalf("parsed only %d definitions: %v", len(def), def)
	}
	prom := map[string]string{}
	for n, k := range def {
		prom[metricProm(n)] = k
	}
	var exprs []string
	d, err := os.ReadFile(filepath.Join(metricRoot(), "envoy", "dashboards", "sluice.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct{ Panels []json.RawMessage }
	if err := json.Unmarshal(d, &dash); err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`"expr":\s*"((?:[^"\\]|\\.)*)"`).FindAllStringSubmatch(string(d), -1) {
		var s string
		json.Unmarshal([]byte(`"`+m[1]+`"`), &s)
		exprs = append(exprs, s)
	}
	a, err := os.ReadFile(filepath.Join(metricRoot(), "envoy", "alerts", "sluice.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The alerts' expressions: every line mentioning a metric.
	for _, l := range strings.Split(string(a), "\n") {
		if strings.Contains(l, "sluice_") && !strings.Contains(l, "summary") && !strings.Contains(l, "description") {
			exprs = append(exprs, l)
		}
	}
	if len(exprs) < 40 {
		t.Fatalf("only %d expressions read", len(exprs))
	}
	nameRe := regexp.MustCompile(`\bsluice_[a-z_]+\b`)
	for _, e := range exprs {
		for _, loc := range nameRe.FindAllStringIndex(e, -1) {
			n := e[loc[0]:loc[1]]
			if n == "sluice_rule" || n == "sluice_class" {
				continue // the labels
			}
			k, ok := prom[n]
			if !ok {
				t.Errorf("%s (in %q) is not defined in plugin/metrics.go", n, e)
				continue
			}
			inRate := strings.HasSuffix(strings.TrimSpace(e[:loc[0]]), "rate(")
			if k == "counter" && !inRate {
				t.Errorf("counter %s used without rate() in %q", n, e)
			}
			if k == "gauge" && inRate {
				t.Errorf("gauge %s used in rate() in %q", n, e)
			}
		}
	}
}

func TestMetricsDocumentedNames(t *testing.T) {
	def := metricDefined(t)
	b, err := os.ReadFile(filepath.Join(metricRoot(), "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := map[string]string{}
	row := regexp.MustCompile("(?m)^\\| `([^`]+)`(?:, `([^`]+)`| / `([^`]+)`)? \\| (counter|gauge) \\|")
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		base := m[1]
		doc[base] = m[4]
		for _, x := range []string{m[2], m[3]} {
			if x == "" {
				continue
			}
			i := strings.LastIndex(base, ".")
			doc[base[:i]+x] = m[4]
		}
	}
	if len(doc) < 25 {
		t.Fatalf("only %d documented names read: %v", len(doc), doc)
	}
	for n, k := range doc {
		if dk, ok := def[n]; !ok {
			t.Errorf("documented %s (%s) is not defined", n, k)
		} else if dk != k {
			t.Errorf("documented %s as %s, defined as %s", n, k, dk)
		}
	}
	for n, k := range def {
		if strings.HasPrefix(n, "sluice.global.") {
			continue // docs/fleet.md
		}
		if _, ok := doc[n]; !ok {
			t.Errorf("defined %s (%s) is not in the operations.md table", n, k)
		}
	}
	f, _ := os.ReadFile(filepath.Join(metricRoot(), "docs", "fleet.md"))
	for _, m := range regexp.MustCompile("`(sluice\\.global\\.[a-z_]+)`").FindAllStringSubmatch(string(f), -1) {
		if _, ok := def[m[1]]; !ok {
			t.Errorf("fleet.md names %s, not defined", m[1])
		}
	}
	c, _ := os.ReadFile(filepath.Join(metricRoot(), "docs", "cost.md"))
	for _, m := range regexp.MustCompile("`(sluice\\.[a-z_.<>]+)`").FindAllStringSubmatch(string(c), -1) {
		n := strings.Replace(m[1], "<name>", "<rule>", 1)
		if _, ok := def[n]; !ok {
			t.Errorf("cost.md names %s, not defined", m[1])
		}
	}
}

// TestMetricsInFlightIdleSingleKey: the simplest idle case, 2 workers, one
// request each, both released (in either order): once published (after
// more than a second), in_flight is 0 at every tick.
func TestMetricsInFlightIdleSingleKey(t *testing.T) {
	for _, order := range []string{"a-then-b", "b-then-a"} {
		t.Run(order, func(t *testing.T) {
			h := newHost(t)
			vms := workers(t, h, 2, `{"rules":[{"name":"store","algorithm":"concurrency","limit":5,"key":["path"]}]}`)
			a := open(t, vms[0], "/buy", "10.0.0.1:1")
			b := open(t, vms[1], "/buy", "10.0.0.1:2")
			h.AdvanceClock(100 * time.Millisecond)
			if order == "a-then-b" {
				respond(t, a) // vms[0] sees 1 left in flight
				respond(t, b) // vms[1] sees 0
			} else {
				respond(t, b) // vms[1] sees 1 left in flight
				respond(t, a) // vms[0] sees 0
			}
			h.AdvanceClock(1500 * time.Millisecond)
			for i := 0; i < 4; i++ {
				h.AdvanceClock(500 * time.Millisecond)
				if g := h.Metrics().Gauge("sluice.rule.store.in_flight"); g != 0 {
					t.Errorf("tick %d: in_flight %d with nothing in flight", i, g)
				}
			}
		})
	}
}
