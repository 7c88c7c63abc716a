package wasmtest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

// Who a request counts against (exempt_cidrs, X-Forwarded-For, matching)
// and how long a client's state is kept across configuration updates,
// checked against docs/configuration.md and docs/operations.md.

// TestExemptSingleIPv6HostIsNeverLimited: exempt_cidrs takes "CIDRs or
// single addresses", and its clients are never limited. The exemption is
// decided on the client's own address, not on its ipv6_prefix group (the
// identity rules key on), so a single IPv6 host listed as a /128 (a health
// checker) is exempt.
func TestExemptSingleIPv6HostIsNeverLimited(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[{"name":"r","limit":1,"window":"1m"}],"exempt_cidrs":["2001:db8::10/128"]}`)[0]
	rs := repeat(3, func(int) *wasmhost.Result { return get(vm, "/", "[2001:db8::10]:1") })
	if n := admitted(rs); n != 3 {
		t.Errorf("client 2001:db8::10 inside exempt 2001:db8::10/128: %d of 3 admitted, want 3 (never limited)", n)
	}
	healthy(t, vm)
}

// TestIPv6ClientOutsideNarrowExemptRangeIsLimited: an exempt range
// narrower than ipv6_prefix exempts only the addresses inside it; another
// address of the same /64 is limited like any client (exempt_cidrs are the
// clients never limited, nobody else is).
func TestIPv6ClientOutsideNarrowExemptRangeIsLimited(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[{"name":"r","limit":1,"window":"1m"}],"exempt_cidrs":["2001:db8::/120"]}`)[0]
	// 2001:db8::1:5 is not in 2001:db8::/120 (2001:db8::0 .. 2001:db8::ff).
	rs := repeat(3, func(int) *wasmhost.Result { return get(vm, "/", "[2001:db8::1:5]:1") })
	if n := admitted(rs); n != 1 {
		t.Errorf("client 2001:db8::1:5 outside exempt 2001:db8::/120: %d of 3 admitted, want 1 (limit 1)", n)
	}
	healthy(t, vm)
}

// TestXFFEntryForms: xff_trusted_hops picks the N-th entry from the right
// with spaces, ports, brackets and IPv6; fewer entries than N, an empty or
// garbled N-th entry fall back to source.address (docs/configuration.md,
// Client addresses).
func TestXFFEntryForms(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[{"name":"r","limit":1,"window":"1h"}],"client_ip":{"xff_trusted_hops":2}}`)[0]
	xff := func(v string) [2]string { return [2]string{"x-forwarded-for", v} }
	// Each pair: the first request spends the budget of the key, the second
	// must find it spent (same key) or not (other key).
	for i, c := range []struct {
		a, b     string
		src      string
		sameKeys bool
	}{
		{"9.9.9.9, 203.0.113.1 ,10.0.0.1", "203.0.113.1:4444,  10.0.0.2", "10.7.0.1:1", true},
		{"[2001:db8:1::1]:80, 10.0.0.1", "2001:db8:1::2,10.0.0.1", "10.7.0.2:1", true},                         // same /64
		{"2001:db8:2::1, 10.0.0.1", "2001:db8:2:1::1, 10.0.0.1", "10.7.0.3:1", false},                          // other /64
		{"::ffff:198.51.100.1, 10.0.0.1", "198.51.100.1, 10.0.0.1", "10.7.0.4:1", true},                        // mapped
		{"10.0.0.1", "198.51.100.99, 10.0.0.1", "10.7.0.5:1", false},                                           // too short: source
		{", 10.0.0.1", "garbage, 10.0.0.1", "10.7.0.6:1", true},                                                // both fall back to source
		{"198.51.100.7, 10.0.0.1, 10.0.0.2, 10.0.0.3", "198.51.100.8, 10.0.0.2, 10.0.0.3", "10.7.0.7:1", true}, // 10.0.0.2 both
	} {
		if r := get(vm, "/", c.src, xff(c.a)).Must(t); r.Status != 200 {
			t.Errorf("case %d first %q: %d", i, c.a, r.Status)
			continue
		}
		want := 200
		if c.sameKeys {
			want = 429
		}
		if r := get(vm, "/", c.src, xff(c.b)).Must(t); r.Status != want {
			t.Errorf("case %d: %q then %q: second %d, want %d", i, c.a, c.b, r.Status, want)
		}
	}
	healthy(t, vm)
}

// TestMatchIgnoresQueryAndMethodCase: path_exact and path_prefix ignore
// the query; methods in the configuration are case-insensitive
// (upper-cased).
func TestMatchIgnoresQueryAndMethodCase(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[
		{"name":"exact","match":{"path_exact":"/login","methods":["post"]},"limit":1,"window":"1h"}]}`)[0]
	if r := send(vm, "POST", "/login?next=/a", "10.0.0.1:1").Must(t); r.Status != 200 || r.Headers.Value("x-ratelimit-limit") != "1" {
		t.Errorf("POST /login?next: %d limit %q", r.Status, r.Headers.Value("x-ratelimit-limit"))
	}
	if r := send(vm, "POST", "/login", "10.0.0.1:1").Must(t); r.Status != 429 {
		t.Errorf("POST /login second: %d, want 429", r.Status)
	}
	if r := send(vm, "GET", "/login", "10.0.0.1:1").Must(t); r.Status != 200 || r.Headers.Has("x-ratelimit-limit") {
		t.Errorf("GET /login matched a POST rule: %d", r.Status)
	}
	healthy(t, vm)
}

// TestRuleReorderKeepsState: docs/operations.md, "Upgrading the
// configuration without losing state": rules whose name, match, key,
// algorithm, limit, window and burst are unchanged keep their clients'
// state when rules are added, removed or reordered, and max_delay,
// shadow, headers, status can change freely.
func TestRuleReorderKeepsState(t *testing.T) {
	h := newHost(t)
	old := workers(t, h, 1, `{"rules":[
		{"name":"tb","match":{"path_prefix":"/t"},"limit":3,"window":"1m","max_keys":1000},
		{"name":"fw","match":{"path_prefix":"/f"},"algorithm":"fixed_window","limit":3,"window":"1m","max_keys":1000},
		{"name":"sw","match":{"path_prefix":"/s"},"algorithm":"sliding_window","limit":3,"window":"1m","max_keys":1000},
		{"name":"lb","match":{"path_prefix":"/l"},"algorithm":"leaky_bucket","limit":3,"window":"1m","burst":1,"max_keys":1000}]}`)
	for i := 0; i < 3; i++ {
		get(old[0], "/t", "10.0.0.1:1").Must(t)
	}
	for _, p := range []string{"/f", "/s", "/l"} {
		if r := get(old[0], p, "10.0.0.1:1").Must(t); r.Status != 200 {
			t.Fatalf("%s: %d", p, r.Status)
		}
	}
	h.AdvanceClock(time.Second)
	nu := workers(t, h, 1, `{"rules":[
		{"name":"new","match":{"path_prefix":"/zzz"},"limit":1,"window":"1s","max_keys":500},
		{"name":"lb","match":{"path_prefix":"/l"},"algorithm":"leaky_bucket","limit":3,"window":"1m","burst":1,"max_keys":1000,"max_delay":"30s"},
		{"name":"sw","match":{"path_prefix":"/s"},"algorithm":"sliding_window","limit":3,"window":"1m","max_keys":1000,"shadow":false},
		{"name":"fw","match":{"path_prefix":"/f"},"algorithm":"fixed_window","limit":3,"window":"60s","max_keys":1000},
		{"name":"tb","match":{"path_prefix":"/t"},"limit":3,"window":"1m","max_keys":1000,"max_delay":"0s"}],"status":503,"headers":"legacy"}`)
	if r := get(nu[0], "/t", "10.0.0.1:1").Must(t); r.Status != 503 {
		t.Errorf("tb after the update: %d, want 503 (3 of 3 spent before)", r.Status)
	}
	for _, p := range []string{"/f", "/s"} {
		rs := repeat(3, func(int) *wasmhost.Result { return get(nu[0], p, "10.0.0.1:1").Must(t) })
		if rs[0].Status != 200 || rs[1].Status != 200 || rs[2].Status != 503 {
			t.Errorf("%s after the update: %d %d %d, want 200 200 503 (1 of 3 spent before)", p, rs[0].Status, rs[1].Status, rs[2].Status)
		}
	}
	// lb: the next departure is at 20s: a request now waits 19s in the queue.
	r := get(nu[0], "/l", "10.0.0.1:1").Must(t)
	if !r.Paused {
		t.Errorf("lb after the update: %d, want held (the previous request left at 0s, one every 20s)", r.Status)
	} else {
		r.Stream.Close()
	}
	healthy(t, append(old, nu...)...)
}

// TestShareChangeKeepsActiveClientsState: when a rule's share of the state
// table changes (docs/operations.md, "Keys and configuration updates"),
// every client keeps its state: those whose bucket was added or dropped
// are found in the previous layout and moved into their current bucket on
// their next write. A client that keeps sending at the sustained rate
// stays active long past the time the previous layout is read (a state's
// life, two minutes here): it must still find its bucket empty (no fresh
// burst).
func TestShareChangeKeepsActiveClientsState(t *testing.T) {
	h := newHost(t)
	// Rule a's share: 18 (2 buckets) beside b, 36 (4 buckets) alone.
	old := workers(t, h, 1, `{"rules":[
		{"name":"a","match":{"path_prefix":"/a"},"limit":10,"window":"1m"},
		{"name":"b","match":{"path_prefix":"/b"},"limit":1,"window":"1m"}],"max_keys":36}`)
	const clients = 8 // never more than a bucket holds: no overflow state involved
	client := func(i int) string { return fmt.Sprintf("10.0.%d.1:1", i) }
	for i := 0; i < clients; i++ {
		for j := 0; j < 10; j++ { // the whole burst
			if r := get(old[0], "/a", client(i)).Must(t); r.Status != 200 {
				t.Fatalf("client %d request %d: %d", i, j, r.Status)
			}
		}
	}
	h.AdvanceClock(time.Second)
	nu := workers(t, h, 1, `{"rules":[{"name":"a","match":{"path_prefix":"/a"},"limit":10,"window":"1m"}],"max_keys":36}`)
	// One request every 6s (the sustained rate, 10/1m) for two minutes:
	// each admitted, and a second one at once refused (the bucket stays
	// empty).
	var fresh []string
	for at := 6; at <= 150; at += 6 {
		h.AdvanceClock(6 * time.Second)
		for i := 0; i < clients; i++ {
			if r := get(nu[0], "/a", client(i)).Must(t); r.Status != 200 {
				t.Fatalf("client %d at %ds: %d, want 200 (one token a 6s)", i, at, r.Status)
			}
			if r := get(nu[0], "/a", client(i)).Must(t); r.Status != 429 {
				fresh = append(fresh, fmt.Sprintf("client %d at %ds", i, at))
			}
		}
	}
	if len(fresh) > 0 {
		t.Errorf("a second request admitted at once (a fresh budget) after the update: %v; "+
			"a client that stays active must keep its state, whichever bucket it is in now", fresh)
	}
	healthy(t, append(old, nu...)...)
}

// TestShareChangeOldAndNewWorkersShareState: while Envoy drains the
// connections of the previous configuration, its VMs still decide
// requests beside the new ones; both must decide a client on one state,
// also once a new VM has moved it into its bucket of the new layout.
func TestShareChangeOldAndNewWorkersShareState(t *testing.T) {
	h := newHost(t)
	old := workers(t, h, 1, `{"rules":[
		{"name":"a","match":{"path_prefix":"/a"},"limit":5,"window":"1h"},
		{"name":"b","match":{"path_prefix":"/b"},"limit":1,"window":"1h"}],"max_keys":36}`)[0]
	const clients = 8
	client := func(i int) string { return fmt.Sprintf("10.0.%d.1:1", i) }
	for i := 0; i < clients; i++ {
		for j := 0; j < 3; j++ {
			get(old, "/a", client(i)).Must(t)
		}
	}
	h.AdvanceClock(time.Second)
	nu := workers(t, h, 1, `{"rules":[{"name":"a","match":{"path_prefix":"/a"},"limit":5,"window":"1h"}],"max_keys":36}`)[0]
	for i := 0; i < clients; i++ {
		admitted := 0
		for j := 0; j < 3; j++ {
			for _, vm := range []*wasmhost.VM{nu, old} {
				if r := get(vm, "/a", client(i)).Must(t); r.Status == 200 {
					admitted++
				}
			}
		}
		if admitted != 2 {
			t.Errorf("client %d: %d of 6 admitted by the new and the old VM in turn, want 2 (3 of 5 spent before the update)", i, admitted)
		}
	}
	healthy(t, old, nu)
}

// TestNewClientsSeeANewConfiguration: a worker of the previous
// configuration that has decided new clients (its view of the layouts
// read) and has not ticked since another configuration with another share
// started on another worker learns of it before its next new client's
// state, from the count of layout record writes
// (sluice.table.layout_writes), not its once a second renewal: the two
// decide each client on one state. The other worker's VM is reused for the
// new configuration (an update that keeps the vm_config), so the count
// changes only by the new layout's record. Rule a has 12 buckets before,
// 24 after (half of the clients move), room for every client.
func TestNewClientsSeeANewConfiguration(t *testing.T) {
	newClientsSeeANewConfiguration(t, newHost(t), true)
}

// TestNewClientsSeeANewConfigurationUncounted: the same with the count
// rejected by a stats matcher (Envoy's stats_config), which hands out a
// counter that never moves: the plugin sees it does not count and reads
// the layout record before every fresh state instead.
func TestNewClientsSeeANewConfigurationUncounted(t *testing.T) {
	m := wasmhost.NewMetrics()
	m.Reject("sluice.table.layout_writes")
	h := newHost(t, wasmhost.WithMetrics(m))
	newClientsSeeANewConfiguration(t, h, false)
	for _, vm := range h.VMs() {
		if !strings.Contains(vm.LogText(), "sluice.table.layout_writes does not count") {
			t.Errorf("VM %d did not log that the count is rejected:\n%s", vm.ID(), vm.LogText())
		}
	}
}

func newClientsSeeANewConfiguration(t *testing.T, h *wasmhost.Host, counted bool) {
	vms := workers(t, h, 2, `{"rules":[
		{"name":"a","match":{"path_prefix":"/a"},"limit":5,"window":"1h"},
		{"name":"b","match":{"path_prefix":"/b"},"limit":1,"window":"1h"}],"max_keys":200}`)
	old, nu := vms[0], vms[1]
	for i := 0; i < 4; i++ {
		for _, vm := range vms {
			get(vm, "/a", fmt.Sprintf("10.1.%d.%d:1", i, vm.ID())).Must(t)
		}
	}
	before := h.Metrics().Counter("sluice.table.layout_writes")
	if err := nu.Reconfigure([]byte(`{"rules":[{"name":"a","match":{"path_prefix":"/a"},"limit":5,"window":"1h"}],"max_keys":200}`)); err != nil {
		t.Fatal(err)
	}
	if after := h.Metrics().Counter("sluice.table.layout_writes"); counted != (after > before) {
		t.Fatalf("sluice.table.layout_writes %d after a new layout was recorded, was %d (counted: %v)", after, before, counted)
	}
	for i := 0; i < 16; i++ {
		admitted := 0
		for j := 0; j < 6; j++ {
			for _, vm := range []*wasmhost.VM{nu, old} {
				if r := get(vm, "/a", fmt.Sprintf("10.0.%d.1:1", i)).Must(t); r.Status == 200 {
					admitted++
				}
			}
		}
		if admitted != 5 {
			t.Errorf("new client %d: %d of 12 admitted by the new and the old configuration in turn, want 5 (one budget)", i, admitted)
		}
	}
	healthy(t, old, nu)
}
