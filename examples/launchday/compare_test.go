package main

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/plugin/config"
)

// TestConfigurations: the demo's configuration and the one -compare runs
// against are valid Sluice configurations; the demo follows the shipped
// store-wide adaptive rule with its classes, and the hand rule of 18.
func TestConfigurations(t *testing.T) {
	for name, doc := range map[string]string{"sluice.json": defaultSluiceConfig, "limit18.json": defaultHandConfig} {
		if _, err := config.Parse([]byte(doc)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	shipped, ok := followedRule(defaultSluiceConfig)
	want := SlotRule{Name: "store", Adaptive: true, Classes: []string{"login", "home", "catalog", "default"}}
	if !ok || !reflect.DeepEqual(shipped, want) {
		t.Errorf("sluice.json: follows %+v, want %+v", shipped, want)
	}
	if strings.Contains(defaultSluiceConfig, `"limit"`) && strings.Count(defaultSluiceConfig, `"limit"`) != 2 {
		t.Errorf("sluice.json has a limit besides the two per-client rules': no capacity number belongs in it")
	}
	hand, ok := followedRule(defaultHandConfig)
	if !ok || !reflect.DeepEqual(hand, SlotRule{Name: "store_buys_18", Limit: 18}) {
		t.Errorf("limit18.json: follows %+v", hand)
	}
}

func TestWriteComparison(t *testing.T) {
	quiet := &RunResult{Records: []Record{{Endpoint: Login, Latency: ms(10), Outcome: Succeeded}}}
	var runs []pairRun
	for i, p := range []time.Duration{ms(20), ms(25), ms(40), ms(15)} {
		r := goalsRun(p, 0, nil)
		r.Learnt = []LimitSample{{At: 6100 * time.Millisecond, Limit: 17}, {At: 8 * time.Second, Limit: 19}}
		g, _ := MeasureGoals(r, quiet)
		g.Orders = int64(g.Capacity)
		runs = append(runs, pairRun{pair: i/2 + 1, config: []string{"shipped", "by hand"}[i%2], result: r, goals: g})
	}
	var b bytes.Buffer
	WriteComparison(&b, runs)
	out := b.String()
	for _, want := range []string{
		"17,-,19,-,-,-",
		"login p99 4.0x > 3x",
		"shipped: median orders 100% (target 85%), median login p99 3.0x (target 3x); 1 of 2 runs met every target",
		"by hand: median orders 100% (target 85%), median login p99 2.0x (target 3x); 2 of 2 runs met every target",
		"| 2 | shipped | 0.0 | 0 | 270 (100%) | 40.0ms / 10.0ms (4.0x) | 0 | 0 | missed: login p99 4.0x > 3x | 17,-,19,-,-,- |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("comparison lacks %q:\n%s", want, out)
		}
	}
}

func TestRulesSummary(t *testing.T) {
	got := rulesSummary(defaultSluiceConfig)
	for _, want := range []string{"store: every request, in flight at once per store (key [])", "classes login (reserve 0.05) above home (reserve 0.05) above catalog (reserve 0) above the rest", "buy_per_client: POST /buy, 2 per 10s burst 2 per client_ip"} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q: %s", want, got)
		}
	}
	if got := rulesSummary(defaultHandConfig); !strings.Contains(got, "store_buys_18: POST /buy, 18 in flight at once per store (key [])") {
		t.Errorf("hand summary: %s", got)
	}
}
