package engine

import (
	"strings"
	"testing"
)

// TestRuleWideKey: `"key": []` is one budget for the whole rule, whatever
// the client, path or header, for every algorithm and across workers,
// while an absent key keeps one budget per client IP.
func TestRuleWideKey(t *testing.T) {
	rules := map[string]string{
		"token_bucket":   `"limit":3,"window":"1h"`,
		"fixed_window":   `"algorithm":"fixed_window","limit":3,"window":"1h"`,
		"sliding_window": `"algorithm":"sliding_window","limit":3,"window":"1h"`,
		"leaky_bucket":   `"algorithm":"leaky_bucket","limit":3,"window":"1h"`,
		"concurrency":    `"algorithm":"concurrency","limit":3`,
		"adaptive":       `"algorithm":"adaptive_concurrency","min_limit":3,"max_limit":3`,
	}
	for name, body := range rules {
		t.Run(name, func(t *testing.T) {
			store := newMemStore()
			cfg := mustConfig(t, `{"rules":[{"name":"r","key":[],`+body+`}]}`)
			workers := []*Engine{New(cfg, store, 9, wallClock), New(cfg, store, 9, wallClock)}
			admitted := 0
			for i := 0; i < 12; i++ {
				path := []string{"/a", "/b", "/c?q=1"}[i%3]
				client := "10.0.0." + string(rune('1'+i%7)) + ":1"
				if workers[i%2].Decide(req(path, "GET", client, "x-api-key", path), t0).Outcome == Allow {
					admitted++
				}
			}
			// What one client on one path gets of the rule is what all of
			// them get together.
			one := New(cfg, newMemStore(), 9, wallClock)
			want := 0
			for i := 0; i < 12; i++ {
				if one.Decide(req("/a", "GET", "10.0.0.1:1"), t0).Outcome == Allow {
					want++
				}
			}
			if admitted != want || want == 0 {
				t.Errorf("rule-wide key: %d of 12 requests from 7 clients on 3 paths admitted, want the rule's %d", admitted, want)
			}
			// Without key: one budget per client IP, so 7 clients get more.
			per := mustConfig(t, `{"rules":[{"name":"r",`+body+`}]}`)
			e := New(per, newMemStore(), 9, wallClock)
			admitted = 0
			for i := 0; i < 12; i++ {
				client := "10.0.0." + string(rune('1'+i%7)) + ":1"
				if e.Decide(req("/a", "GET", client), t0).Outcome == Allow {
					admitted++
				}
			}
			if admitted <= want {
				t.Errorf("absent key: %d admitted, want one budget per client IP (more than %d)", admitted, want)
			}
		})
	}
}

// TestRuleWideKeyGlobalDescriptor: a global rule with `"key": []` asks the
// service about one descriptor whatever the client, the same on every
// Envoy (seed), and different from a client_ip rule's.
func TestRuleWideKeyGlobalDescriptor(t *testing.T) {
	doc := `{"rules":[{"name":"g","scope":"global","limit":100,"window":"1m","key":[]}],"global":{"cluster":"ratelimit"}}`
	call := func(seed uint64, client, d string) string {
		e := New(mustConfig(t, d), newMemStore(), seed, wallClock)
		svc := &fakeService{limit: 100}
		e.SetGlobal(svc, func(*Pending, *Verdict) {})
		e.Decide(req("/x", "GET", client, "x-client", client), t0)
		if len(svc.bodies) != 1 {
			t.Fatal("no call")
		}
		return string(svc.bodies[0])
	}
	a, b := call(1, "10.0.0.1:1", doc), call(2, "10.9.9.9:2", doc)
	if a != b {
		t.Error("rule-wide key: two clients on two Envoys ask about different descriptors")
	}
	perIP := strings.Replace(doc, `"key":[]`, `"key":["client_ip"]`, 1)
	if call(1, "10.0.0.1:1", perIP) == a {
		t.Error("a client_ip rule asks about the rule-wide descriptor")
	}
}
