package wasmtest

import (
	"testing"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

// TestRuleWideKeyAcrossWorkers: `"key": []` gives the whole rule one
// budget in the compiled plugin: every client, on every path and worker,
// draws from it (a rate rule and a concurrency rule), while the default
// key still gives each client IP its own.
func TestRuleWideKeyAcrossWorkers(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, `{"rules":[
	  {"name":"rate","match":{"path_prefix":"/r"},"key":[],"limit":3,"window":"1h"},
	  {"name":"slots","match":{"path_prefix":"/s"},"key":[],"algorithm":"concurrency","limit":2},
	  {"name":"perip","match":{"path_prefix":"/p"},"limit":1,"window":"1h"}]}`)
	clients := []string{"10.0.0.1:1", "10.0.0.2:1", "192.168.1.9:7", "[2001:db8::1]:9"}
	ok := 0
	for i := 0; i < 8; i++ {
		r := get(vms[i%2], []string{"/r/a", "/r/b"}[i%2], clients[i%len(clients)])
		switch r.Status {
		case 200:
			ok++
		case 429:
		default:
			t.Fatalf("request %d: status %d", i, r.Status)
		}
	}
	if ok != 3 {
		t.Errorf("rate rule with key []: %d of 8 from 4 clients admitted, want 3", ok)
	}
	var held []*wasmhost.Stream
	for i := 0; i < 4; i++ {
		s := open(t, vms[i%2], []string{"/s/x", "/s/y"}[i%2], clients[i])
		if state(s) == wasmhost.StreamUpstream {
			held = append(held, s)
		} else if r := s.Result(); r.Status != 429 {
			t.Fatalf("slot request %d: %v %d", i, state(s), r.Status)
		}
	}
	if len(held) != 2 {
		t.Errorf("concurrency rule with key []: %d of 4 from 4 clients in flight, want 2", len(held))
	}
	respond(t, held[0])
	if s := open(t, vms[1], "/s/z", "10.1.1.1:1"); state(s) != wasmhost.StreamUpstream {
		t.Errorf("a freed slot of the rule-wide key: %v", state(s))
	}
	// The default key: one budget per client IP.
	for _, c := range clients {
		if r := get(vms[0], "/p", c); r.Status != 200 {
			t.Errorf("client_ip key: first request of %s: %d", c, r.Status)
		}
	}
}
