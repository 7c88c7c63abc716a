package wasmtest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

// Every configuration field, through the compiled plugin.

func admitted(rs []*wasmhost.Result) int {
	n := 0
	for _, r := range rs {
		if r.Status == 200 {
			n++
		}
	}
	return n
}

func repeat(n int, f func(i int) *wasmhost.Result) []*wasmhost.Result {
	var rs []*wasmhost.Result
	for i := 0; i < n; i++ {
		rs = append(rs, f(i))
	}
	return rs
}

func TestKeys(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, `{"rules":[
		{"name":"per-key","match":{"path_prefix":"/api"},"key":["header:X-Api-Key"],"limit":2,"window":"1m"},
		{"name":"per-path","match":{"path_prefix":"/p"},"key":["path"],"limit":1,"window":"1m"},
		{"name":"per-ip-method","match":{"path_prefix":"/m"},"key":["client_ip","method"],"limit":1,"window":"1m"}]}`)
	key := func(k string) [2]string { return [2]string{"x-api-key", k} }
	// Same API key from many addresses: one budget.
	if n := admitted(repeat(5, func(i int) *wasmhost.Result { return get(vms[i%2], "/api", fmt.Sprintf("10.0.0.%d:1", i), key("k1")) })); n != 2 {
		t.Errorf("api key k1 from 5 addresses: %d admitted, want 2", n)
	}
	if n := admitted(repeat(3, func(i int) *wasmhost.Result { return get(vms[i%2], "/api", "10.0.0.1:1", key("k2")) })); n != 2 {
		t.Errorf("api key k2: %d admitted, want 2", n)
	}
	// Without the header: keyed by client IP.
	if n := admitted(repeat(4, func(i int) *wasmhost.Result { return get(vms[i%2], "/api", fmt.Sprintf("10.9.0.%d:1", i/2)) })); n != 4 {
		t.Errorf("header-less clients: %d admitted, want 4 (2 addresses x 2)", n)
	}
	// path: every client shares one budget per path (query ignored).
	if n := admitted(repeat(3, func(i int) *wasmhost.Result {
		return get(vms[i%2], "/p/a?x="+fmt.Sprint(i), fmt.Sprintf("10.1.0.%d:1", i))
	})); n != 1 {
		t.Errorf("path key: %d admitted, want 1", n)
	}
	if r := get(vms[0], "/p/b", "10.1.0.1:1"); r.Status != 200 {
		t.Errorf("another path: %d", r.Status)
	}
	// client_ip + method.
	if r := send(vms[0], "GET", "/m", "10.2.0.1:1"); r.Status != 200 {
		t.Fatal(r.Status)
	}
	if r := send(vms[1], "POST", "/m", "10.2.0.1:1"); r.Status != 200 {
		t.Errorf("other method shares the budget: %d", r.Status)
	}
	if r := send(vms[1], "GET", "/m", "10.2.0.1:1"); r.Status != 429 {
		t.Errorf("same ip+method: %d", r.Status)
	}
}

func TestClientIPFields(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, `{"rules":[{"name":"r","limit":1,"window":"1m"}],
		"client_ip":{"xff_trusted_hops":2,"ipv6_prefix":48},"exempt_cidrs":["192.168.0.0/16","2001:db8:ffff::/48"]}`)
	// The load balancer 10.0.0.254 connects to Envoy, which (with
	// use_remote_address: true) appends it to what the balancer sent: the
	// balancer's own entry is the 2nd from the right.
	peer := "10.0.0.254:9"
	xff := func(v string) [2]string { return [2]string{"x-forwarded-for", v + ", 10.0.0.254"} }
	if r := get(vms[0], "/", peer, xff("203.0.113.1")); r.Status != 200 {
		t.Fatal(r.Status)
	}
	// Spoofed leading entries do not change the key (the two rightmost are trusted).
	if r := get(vms[1], "/", peer, xff("9.9.9.9, 203.0.113.1")); r.Status != 429 {
		t.Errorf("spoofed XFF got a new budget: %d", r.Status)
	}
	// Garbage or missing XFF falls back to source.address.
	if r := get(vms[0], "/", "10.7.7.7:1", [2]string{"x-forwarded-for", "not-an-ip"}); r.Status != 200 {
		t.Fatal(r.Status)
	}
	if r := get(vms[1], "/", "10.7.7.7:1"); r.Status != 429 {
		t.Errorf("missing XFF not keyed by source.address: %d", r.Status)
	}
	// ipv6_prefix 48: two /64s inside one /48 share.
	if r := get(vms[0], "/", peer, xff("2001:db8:1:1::1")); r.Status != 200 {
		t.Fatal(r.Status)
	}
	if r := get(vms[1], "/", peer, xff("2001:db8:1:2::1")); r.Status != 429 {
		t.Errorf("same /48: %d", r.Status)
	}
	// Exempt v4 and v6, unlimited, no headers.
	for _, c := range []string{"192.168.1.2", "2001:db8:ffff:1::5"} {
		rs := repeat(5, func(i int) *wasmhost.Result { return get(vms[i%2], "/", peer, xff(c)) })
		if admitted(rs) != 5 || rs[0].Headers.Has("x-ratelimit-limit") {
			t.Errorf("exempt %s: %d admitted", c, admitted(rs))
		}
	}
}

func TestHeaderModesStatusAndShadow(t *testing.T) {
	for _, c := range []struct {
		mode          string
		legacy, draft bool
	}{{"legacy", true, false}, {"draft", false, true}, {"both", true, true}, {"none", false, false}} {
		t.Run(c.mode, func(t *testing.T) {
			h := newHost(t)
			vm := workers(t, h, 1, fmt.Sprintf(`{"rules":[{"name":"r","limit":1,"window":"10s"}],"headers":%q,"status":503}`, c.mode))[0]
			ok := get(vm, "/", "10.0.0.1:1")
			rej := get(vm, "/", "10.0.0.1:1")
			if rej.Status != 503 || rej.Headers.Value("retry-after") != "10" {
				t.Errorf("rejection: %d retry-after %q", rej.Status, rej.Headers.Value("retry-after"))
			}
			for _, r := range []*wasmhost.Result{ok, rej} {
				if r.Headers.Has("x-ratelimit-limit") != c.legacy || r.Headers.Has("ratelimit-policy") != c.draft {
					t.Errorf("%s: headers %v", c.mode, r.Headers)
				}
			}
		})
	}
	t.Run("shadow", func(t *testing.T) {
		h := newHost(t)
		vm := workers(t, h, 1, `{"rules":[{"name":"trial","limit":2,"window":"1m","shadow":true}]}`)[0]
		rs := repeat(4, func(int) *wasmhost.Result { return get(vm, "/", "10.0.0.1:1") })
		if admitted(rs) != 4 {
			t.Fatalf("shadow rejected: %d admitted", admitted(rs))
		}
		if rs[1].Headers.Has("x-ratelimit-shadow") || rs[2].Headers.Value("x-ratelimit-shadow") != `"trial";retry-after=30` {
			t.Errorf("shadow marks: %q %q", rs[1].Headers.Value("x-ratelimit-shadow"), rs[2].Headers.Value("x-ratelimit-shadow"))
		}
		h.AdvanceClock(1100 * time.Millisecond) // publish counters
		if got := h.Metrics().Counter("sluice.rule.trial.shadow_rejected"); got != 2 {
			t.Errorf("shadow_rejected = %d, want 2", got)
		}
	})
}

// TestMaxKeysAndOnError: with max_keys 18 each of two rules has one bucket
// of 8 slots and its overflow state. Clients past the eighth of rule a share
// a's overflow state (limited together, not by on_error); a client of rule
// b still gets a slot and its own limit, whatever on_error says.
func TestMaxKeysAndOnError(t *testing.T) {
	for _, mode := range []string{"allow", "deny"} {
		t.Run(mode, func(t *testing.T) {
			h := newHost(t)
			vm := workers(t, h, 1, fmt.Sprintf(`{"rules":[
				{"name":"a","match":{"path_prefix":"/a"},"limit":1,"window":"1h"},
				{"name":"b","match":{"path_prefix":"/b"},"limit":5,"window":"1h"}],"max_keys":18,"on_error":%q}`, mode))[0]
			statuses := map[int]int{}
			for i := 0; i < 20; i++ {
				statuses[get(vm, "/a", fmt.Sprintf("10.0.0.%d:1", i)).Status]++
			}
			// 8 clients on their own slots, one more on the overflow state.
			if statuses[200] != 9 || statuses[429] != 11 {
				t.Errorf("20 clients of a with 8 slots and a shared overflow: %v, want 9 admitted", statuses)
			}
			for i := 0; i < 6; i++ {
				want := 200
				if i == 5 {
					want = 429
				}
				if r := get(vm, "/b", "10.1.0.1:1"); r.Status != want {
					t.Errorf("client of b, request %d: %d, want %d", i+1, r.Status, want)
				}
			}
			h.AdvanceClock(1100 * time.Millisecond)
			m := h.Metrics()
			if got := m.Counter("sluice.table.full") + m.Counter("sluice.on_error.allowed") + m.Counter("sluice.on_error.denied"); got != 0 {
				t.Errorf("full or on_error counted %d times: a full share is not an error", got)
			}
			if got := m.Counter("sluice.table.overflow"); got != 12 {
				t.Errorf("sluice.table.overflow = %d, want 12", got)
			}
		})
	}
}

// TestOverflowMetricsAndOneLogLine: two workers flood rule a past its
// share. The rule's overflow counter counts the decisions, its
// active_states gauge the states it holds (rule b's stay its own), and one
// warning, on one worker, says the rule's share is full; a flood that goes
// on does not repeat it.
func TestOverflowMetricsAndOneLogLine(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, `{"rules":[
		{"name":"a","match":{"path_prefix":"/a"},"key":["header:x-key"],"limit":1,"window":"1h"},
		{"name":"b","match":{"path_prefix":"/b"},"limit":5,"window":"1h"}],"max_keys":36}`)
	n := 0
	for round := 0; round < 3; round++ {
		for i := 0; i < 40; i++ {
			get(vms[n%2], "/a", "10.0.0.1:1", [2]string{"x-key", fmt.Sprint("k", n)})
			n++
		}
		h.AdvanceClock(1100 * time.Millisecond)
	}
	get(vms[0], "/b", "10.1.0.1:1")
	h.AdvanceClock(6 * time.Second) // census: a fifth of the table a second
	m := h.Metrics()
	// a: 2 buckets of 8 slots (share 18); 120 keys, 16 on slots.
	if got := m.Counter("sluice.rule.a.overflow"); got != 120-16 {
		t.Errorf("sluice.rule.a.overflow = %d, want %d", got, 120-16)
	}
	if got := m.Counter("sluice.rule.b.overflow"); got != 0 {
		t.Errorf("sluice.rule.b.overflow = %d, want 0", got)
	}
	if a, b := m.Gauge("sluice.rule.a.active_states"), m.Gauge("sluice.rule.b.active_states"); a != 17 || b != 1 {
		t.Errorf("active_states a %d (want 16 slots + overflow), b %d (want 1)", a, b)
	}
	lines := 0
	for _, vm := range vms {
		lines += strings.Count(vm.LogText(), "sluice: rule a: its share of the state table is full (17 client states)")
	}
	if lines != 1 {
		t.Errorf("%d overflow warnings, want 1:\n%s\n%s", lines, vms[0].LogText(), vms[1].LogText())
	}
}
