package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// floodMaxKeys is small so that a flood of 5x max_keys stays quick: each of
// the five rules keeps 90 states (11 buckets of 8 and its overflow state).
const floodMaxKeys = 450

// floodCase is one key a client controls: the flooding rule keyed by it,
// and how request i of the flood (or the old client, i < 0) sets it.
type floodCase struct {
	name string
	rule string // match and key of the flooding rule
	set  func(i int, r *http.Request)
}

func floodCases() []floodCase {
	const flooder = "198.51.100.1"
	return []floodCase{
		{"header", `"match":{"path_prefix":"/k"},"key":["header:x-api-key"]`, func(i int, r *http.Request) {
			r.URL.Path = "/k"
			r.Header.Set("X-Forwarded-For", flooder)
			r.Header.Set("X-Api-Key", fmt.Sprint("key-", i))
		}},
		{"path", `"match":{"path_prefix":"/p/"},"key":["path"]`, func(i int, r *http.Request) {
			r.URL.Path = fmt.Sprint("/p/", i)
			r.Header.Set("X-Forwarded-For", flooder)
		}},
		{"ipv6", `"match":{"path_prefix":"/v6"}`, func(i int, r *http.Request) {
			r.URL.Path = "/v6"
			r.Header.Set("X-Forwarded-For", envoytest.ClientIPv6(i+1)) // a /64 each
		}},
		{"xff", `"match":{"path_prefix":"/x"}`, func(i int, r *http.Request) {
			r.URL.Path = "/x"
			r.Header.Set("X-Forwarded-For", envoytest.ClientIP(i+1))
		}},
	}
}

// TestFloodOnOneRuleLeavesOthersAlone floods one rule with 5x max_keys
// distinct values of a key the client controls (a header, the path, IPv6
// /64s, X-Forwarded-For entries behind a trusted hop), through Envoy with
// two workers, one rule after the other. After each flood, four new clients
// of another rule each get exactly their burst (with on_error deny too:
// they are served, not locked out), a client of the flooding rule that held
// a slot before the flood keeps its state, and the flooding rule's new
// values are limited together on its overflow state.
//
// The client address is the X-Forwarded-For entry the trusted hop (the
// test, posing as a proxy) wrote: Envoy appends its own entry, so it is the
// second from the right (xff_trusted_hops 2); IPv6 clients are grouped by
// /64.
func TestFloodOnOneRuleLeavesOthersAlone(t *testing.T) {
	var rules strings.Builder
	for _, fc := range floodCases() {
		fmt.Fprintf(&rules, `{"name":"flood-%s",%s,"limit":2,"window":"1h","burst":2},`, fc.name, fc.rule)
	}
	for _, onError := range []string{"allow", "deny"} {
		t.Run("on_error="+onError, func(t *testing.T) {
			cfg := fmt.Sprintf(`{"rules":[%s
				{"name":"login","match":{"path_prefix":"/login"},"limit":2,"window":"1h","burst":2}],
				"max_keys":%d,"on_error":%q,"client_ip":{"xff_trusted_hops":2}}`, rules.String(), floodMaxKeys, onError)
			e := startSluice(t, 2, cfg, func(o *envoytest.Options) { o.XFFNumTrustedHops = 1 })
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for k, fc := range floodCases() {
				t.Run(fc.name, func(t *testing.T) { checkFloodIsolation(ctx, t, e, fc, k) })
			}
			checkFloodStats(t, e, len(floodCases()))
		})
	}
}

func checkFloodIsolation(ctx context.Context, t *testing.T, e *envoytest.Envoy, fc floodCase, k int) {
	const old = 5*floodMaxKeys + 1000 // the old client's value, never flooded
	send := func(n, conc int, value func(i int) int) envoytest.LoadResult {
		return envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Requests: n, Concurrency: conc,
			Request: func(i int, r *http.Request) { fc.set(value(i), r) }})
	}
	if res := send(1, 1, func(int) int { return old }); res.Count(200) != 1 {
		t.Fatalf("old client before the flood: %v", res)
	}
	start := time.Now()
	flood := send(5*floodMaxKeys, 16, func(i int) int { return i })
	t.Logf("flood of %d values: %v", 5*floodMaxKeys, flood)
	if flood.Errors > 0 {
		t.Fatalf("flood: %d errors (%v)", flood.Errors, flood.FirstErr)
	}
	// One admission per value that got a slot (88 in the rule's share, one
	// held by the old client), and the overflow state's burst of 2 for all
	// the others together.
	if got := flood.Count(200); got > 87+2 {
		t.Errorf("flood: %d admitted, want at most 87 (a slot each) + 2 (the overflow state)", got)
	}
	if late := send(20, 4, func(i int) int { return 5*floodMaxKeys + i }); late.Count(200) != 0 || late.Count(429) != 20 {
		t.Errorf("20 new values after the flood: %v, want all limited on the spent overflow state", late.Status)
	}
	if res := send(2, 1, func(int) int { return old }); res.Count(200) != 1 || res.Count(429) != 1 {
		t.Errorf("old client after the flood: %v, want 1 admitted (its state kept) then 1 rejected", res.Status)
	}
	for c := 0; c < 4; c++ {
		res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Path: "/login", Requests: 10, Concurrency: 1,
			XForwardedFor: func(int) string { return fmt.Sprintf("203.0.113.%d", 4*k+c+1) }})
		if res.Count(200) != 2 || res.Count(429) != 8 {
			t.Errorf("new client %d of login after the flood: %v, want its burst of 2 admitted", c, res.Status)
		}
	}
	t.Logf("%s: flood and checks in %v", fc.name, time.Since(start).Round(time.Millisecond))
}

// checkFloodStats: no decision fell to on_error, every flooding rule
// decided on its own overflow state (per-rule counter) and said so in one
// log line, and the other rule never did.
func checkFloodStats(t *testing.T, e *envoytest.Envoy, rules int) {
	var st map[string]uint64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		st, _ = e.Stats(`sluice\.`)
		done := true // every worker has published its decisions
		for _, fc := range floodCases() {
			done = done && st["wasmcustom.sluice.rule.flood-"+fc.name+".overflow"] >= 5*floodMaxKeys-90
		}
		if done {
			break
		}
	}
	if n := st["wasmcustom.sluice.on_error.allowed"] + st["wasmcustom.sluice.on_error.denied"] + st["wasmcustom.sluice.table.full"]; n != 0 {
		t.Errorf("on_error or table-full decisions: %d, want none (stats %v)", n, st)
	}
	logs := e.Logs()
	for _, fc := range floodCases() {
		name := "flood-" + fc.name
		if st["wasmcustom.sluice.rule."+name+".overflow"] == 0 {
			t.Errorf("rule %s: no decision counted on its overflow state", name)
		}
		if n := strings.Count(logs, "sluice: rule "+name+": its share of the state table is full"); n != 1 {
			t.Errorf("rule %s: %d overflow log lines, want 1", name, n)
		}
	}
	if n := st["wasmcustom.sluice.rule.login.overflow"]; n != 0 || strings.Contains(logs, "rule login: its share") {
		t.Errorf("rule login decided %d times on its overflow state", n)
	}
	t.Logf("per-rule overflow decisions: header %d, path %d, ipv6 %d, xff %d, login %d (%d rules flooded)",
		st["wasmcustom.sluice.rule.flood-header.overflow"], st["wasmcustom.sluice.rule.flood-path.overflow"],
		st["wasmcustom.sluice.rule.flood-ipv6.overflow"], st["wasmcustom.sluice.rule.flood-xff.overflow"],
		st["wasmcustom.sluice.rule.login.overflow"], rules)
}

// TestRuleStatesSurviveRuleChanges: a rule keeps its clients' states when
// another rule is added and when one is removed. With its own max_keys its
// keys do not move at all; without, its share changes (1000, 666, 1000
// states) and the clients whose bucket moved are found in the previous
// layout.
func TestRuleStatesSurviveRuleChanges(t *testing.T) {
	for _, pin := range []string{`,"max_keys":900`, ``} {
		name := map[bool]string{true: "pinned", false: "shared"}[pin != ""]
		t.Run(name, func(t *testing.T) { checkStatesSurviveRuleChanges(t, pin) })
	}
}

func checkStatesSurviveRuleChanges(t *testing.T, pin string) {
	kept := `{"name":"kept","match":{"path_prefix":"/kept"},"limit":3,"window":"1h"` + pin + `}`
	one := `{"rules":[` + kept + `,{"name":"a","match":{"path_prefix":"/a"},"limit":3,"window":"1h"}],"max_keys":2000}`
	two := `{"rules":[{"name":"b","match":{"path_prefix":"/b"},"limit":3,"window":"1h"},` + kept + `,{"name":"a","match":{"path_prefix":"/a"},"limit":3,"window":"1h"}],"max_keys":2000}`
	three := `{"rules":[{"name":"b","match":{"path_prefix":"/b"},"limit":3,"window":"1h"},` + kept + `],"max_keys":2000}`
	e := startSluice(t, 2, one, func(o *envoytest.Options) { o.DynamicListeners = true; o.XFFNumTrustedHops = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const clients = 20
	spend := func() envoytest.LoadResult {
		return envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Path: "/kept", Requests: clients, Concurrency: 1,
			XForwardedFor: func(i int) string { return envoytest.ClientIP(i) }})
	}
	if res := spend(); res.Count(200) != clients {
		t.Fatalf("before: %v", res.Status)
	}
	for _, c := range []struct{ name, cfg string }{{"rule added", two}, {"rule removed", three}} {
		if err := e.SetPluginConfig(ctx, c.cfg); err != nil {
			t.Fatal(err)
		}
		if res := spend(); res.Count(200) != clients {
			t.Errorf("%s: %v, want each of %d clients admitted once more", c.name, res.Status, clients)
		}
	}
	// 3 spent by every client if no state was lost: all limited now.
	if res := spend(); res.Count(429) != clients {
		t.Errorf("after the updates: %v, want every client limited (a client admitted had lost its state)", res.Status)
	}
}
