package engine

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/plugin/internal/ipaddr"
	"github.com/sluicehq/sluice/sdk/header"
)

type fakeRequest struct {
	headers map[string]string
	source  string
	calls   int
}

func (r *fakeRequest) Header(name string) (string, bool) {
	r.calls++
	v, ok := r.headers[name]
	return v, ok
}

func (r *fakeRequest) SourceAddress() string { r.calls++; return r.source }

func req(path, method, source string, kv ...string) *fakeRequest {
	h := map[string]string{":path": path, ":method": method}
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = kv[i+1]
	}
	return &fakeRequest{headers: h, source: source}
}

func mustConfig(t testing.TB, doc string) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixNano()

func TestBurstAcrossWorkersIsExact(t *testing.T) {
	for _, workers := range []int{2, 4} {
		t.Run(fmt.Sprint(workers), func(t *testing.T) {
			cfg := mustConfig(t, `{"rules":[{"name":"r","limit":100,"window":"1h","burst":100}]}`)
			store := newMemStore()
			var wg sync.WaitGroup
			var mu sync.Mutex
			admitted, retries := 0, uint64(0)
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					e := New(cfg, store, 42, wallClock)
					n := 0
					for i := 0; i < 2000/workers; i++ {
						if e.Decide(req("/", "GET", "10.0.0.1:1234"), t0).Outcome == Allow {
							n++
						}
					}
					mu.Lock()
					admitted += n
					retries += e.Table().Stats.CASRetries
					mu.Unlock()
				}()
			}
			wg.Wait()
			if admitted != 100 {
				t.Errorf("%d workers admitted %d of 2000, want exactly burst 100", workers, admitted)
			}
			t.Logf("%d workers: %d admitted, %d CAS retries", workers, admitted, retries)
		})
	}
}

// Two workers create the same missing bucket at once: a set on a missing key
// succeeds whatever cas in Envoy, so a naive create would let both succeed
// and lose one admission's charge.
func TestFirstRequestRaceOnMissingKey(t *testing.T) {
	cfg := mustConfig(t, `{"rules":[{"name":"r","limit":1,"window":"1h"}]}`)
	store := newMemStore()
	seedA, _ := LoadSeed(store)
	a, b := New(cfg, store, seedA, wallClock), New(cfg, store, seedA, wallClock)
	injected := false
	store.beforeSet = func(key string) {
		if injected || key == SeedKey {
			return
		}
		injected = true
		// Worker B's whole decision runs between A's get and A's set.
		store.beforeSet = nil
		if v := b.Decide(req("/", "GET", "10.0.0.9:1"), t0); v.Outcome != Allow {
			t.Errorf("worker B's first request: %v", v.Outcome)
		}
	}
	va := a.Decide(req("/", "GET", "10.0.0.9:1"), t0)
	if !injected {
		t.Fatal("race not injected")
	}
	if va.Outcome != Reject {
		t.Errorf("worker A admitted a second request of a limit of 1 (outcome %v)", va.Outcome)
	}
	if a.Table().Stats.CASRetries == 0 {
		t.Error("no CAS retry recorded")
	}
}

func TestRefillAndRetryAfter(t *testing.T) {
	cfg := mustConfig(t, `{"rules":[{"name":"r","limit":10,"window":"1s","burst":5}]}`)
	e := New(cfg, newMemStore(), 1, wallClock)
	for i := 0; i < 5; i++ {
		if v := e.Decide(req("/", "GET", "10.0.0.1:1"), t0); v.Outcome != Allow || v.Remaining != int64(4-i) {
			t.Fatalf("request %d: %+v", i, v)
		}
	}
	v := e.Decide(req("/", "GET", "10.0.0.1:1"), t0)
	if v.Outcome != Reject || v.RetryAfter != 100*time.Millisecond || v.Report.Name != "r" {
		t.Fatalf("sixth: %+v", v)
	}
	if v := e.Decide(req("/", "GET", "10.0.0.1:1"), t0+int64(100*time.Millisecond)); v.Outcome != Allow {
		t.Errorf("after refill: %v", v.Outcome)
	}
	// Another client is independent.
	if v := e.Decide(req("/", "GET", "10.0.0.2:1"), t0); v.Outcome != Allow || v.Remaining != 4 {
		t.Errorf("other client: %+v", v)
	}
	if got := e.Stats.Rules[0]; got.Allowed != 7 || got.Rejected != 1 {
		t.Errorf("stats %+v", got)
	}
}

func TestRulesPerRouteAndRefund(t *testing.T) {
	cfg := mustConfig(t, `{"rules":[
		{"name":"all","limit":100,"window":"1h"},
		{"name":"checkout","match":{"path_prefix":"/checkout","methods":["post"]},"limit":2,"window":"1h"}]}`)
	e := New(cfg, newMemStore(), 1, wallClock)
	c := "10.1.1.1:9"
	for i := 0; i < 2; i++ {
		v := e.Decide(req("/checkout/pay", "POST", c), t0)
		if v.Outcome != Allow || v.Report.Name != "checkout" {
			t.Fatalf("checkout %d: %+v", i, v)
		}
	}
	v := e.Decide(req("/checkout/pay?x=1", "POST", c), t0)
	if v.Outcome != Reject || v.Report.Name != "checkout" {
		t.Fatalf("third checkout: %+v", v)
	}
	// GET /checkout does not match the POST-only rule.
	if v := e.Decide(req("/checkout", "GET", c), t0); v.Outcome != Allow || v.Report.Name != "all" {
		t.Errorf("GET checkout: %+v", v)
	}
	// "all" was charged by 3 admitted requests only: the rejected one was refunded.
	v = e.Decide(req("/home", "GET", c), t0)
	if v.Remaining != 100-4 {
		t.Errorf("all remaining = %d, want 96 (rejected request refunded)", v.Remaining)
	}
}

func TestRejectReportsLongestWait(t *testing.T) {
	cfg := mustConfig(t, `{"rules":[
		{"name":"fast","limit":1,"window":"1s"},
		{"name":"slow","limit":1,"window":"1m"}]}`)
	e := New(cfg, newMemStore(), 1, wallClock)
	e.Decide(req("/", "GET", "10.0.0.1:1"), t0)
	v := e.Decide(req("/", "GET", "10.0.0.1:1"), t0)
	if v.Outcome != Reject || v.Report.Name != "slow" || v.RetryAfter != time.Minute {
		t.Errorf("got %s after %v, want slow after 1m", v.Report.Name, v.RetryAfter)
	}
}

func TestKeysAndHeaderFallback(t *testing.T) {
	cfg := mustConfig(t, `{"rules":[{"name":"api","key":["header:x-api-key"],"limit":1,"window":"1h"}]}`)
	e := New(cfg, newMemStore(), 1, wallClock)
	if e.Decide(req("/", "GET", "10.0.0.1:1", "x-api-key", "k1"), t0).Outcome != Allow {
		t.Fatal("k1 first")
	}
	// Same key from another address: same budget.
	if e.Decide(req("/", "GET", "10.0.0.2:1", "x-api-key", "k1"), t0).Outcome != Reject {
		t.Error("k1 from another IP got a new budget")
	}
	if e.Decide(req("/", "GET", "10.0.0.1:1", "x-api-key", "k2"), t0).Outcome != Allow {
		t.Error("k2 limited by k1")
	}
	// Without the header: keyed by client IP, so two addresses are separate.
	if e.Decide(req("/", "GET", "10.0.0.3:1"), t0).Outcome != Allow || e.Decide(req("/", "GET", "10.0.0.4:1"), t0).Outcome != Allow {
		t.Error("header-less clients lumped together")
	}
	if e.Decide(req("/", "GET", "10.0.0.3:1"), t0).Outcome != Reject {
		t.Error("header-less client not limited by IP")
	}
}

// fieldsRequest is a fakeRequest whose headers may have several fields
// (engine.FieldsRequest, as the plugin's requests are).
type fieldsRequest struct {
	*fakeRequest
	fields map[string][]string
}

func (r fieldsRequest) HeaderFields(name string) (string, int) {
	vs := r.fields[name]
	if len(vs) == 0 {
		return "", 0
	}
	return vs[0], min(len(vs), 2)
}

// TestRepeatedKeyedHeader: a keyed header sent more than once keys the
// request by its client IP, as an absent or empty one does: never by its
// first value (which Envoy hands the plugin while the upstream may read
// the last), so rotating the first value buys no fresh budget.
func TestRepeatedKeyedHeader(t *testing.T) {
	cfg := mustConfig(t, `{"rules":[{"name":"api","key":["header:x-api-key"],"limit":1,"window":"1h"}]}`)
	e := New(cfg, newMemStore(), 1, wallClock)
	fr := func(ip string, vals ...string) Request {
		return fieldsRequest{req("/", "GET", ip), map[string][]string{"x-api-key": vals}}
	}
	if e.Decide(fr("10.0.0.1:1", "r1", "real"), t0).Outcome != Allow {
		t.Fatal("first")
	}
	for i, r := range []Request{fr("10.0.0.1:1", "r2", "real"), fr("10.0.0.1:1", ""), fr("10.0.0.1:1"), req("/", "GET", "10.0.0.1:1")} {
		if e.Decide(r, t0).Outcome != Reject {
			t.Errorf("request %d from the same address got a fresh budget", i)
		}
	}
	// The key alone, and another address, have budgets of their own.
	if e.Decide(fr("10.0.0.1:1", "real"), t0).Outcome != Allow || e.Decide(fr("10.0.0.2:1", "r3", "real"), t0).Outcome != Allow {
		t.Error("a single key, or another address, was limited by the repeated-header requests")
	}
}

func TestClientIPResolution(t *testing.T) {
	cfg := mustConfig(t, `{"rules":[{"name":"r","limit":1,"window":"1h"}],"client_ip":{"xff_trusted_hops":2,"ipv6_prefix":64},"exempt_cidrs":["192.168.0.0/16"]}`)
	e := New(cfg, newMemStore(), 1, wallClock)
	// One trusted proxy appended 203.0.113.7; Envoy (use_remote_address)
	// appended the peer 127.0.0.1, which counts: 2 is the proxy's entry. A
	// client that prepends entries cannot change the result.
	if e.Decide(req("/", "GET", "127.0.0.1:1", "x-forwarded-for", "203.0.113.7, 127.0.0.1"), t0).Outcome != Allow {
		t.Fatal("first")
	}
	if e.Decide(req("/", "GET", "127.0.0.1:1", "x-forwarded-for", "1.1.1.1, 2.2.2.2, 203.0.113.7, 127.0.0.1"), t0).Outcome != Reject {
		t.Error("spoofed leading XFF entries changed the key")
	}
	// Without use_remote_address, source.address is the header's last entry
	// (port 0): it is still counted, so a prepended entry is never the key.
	cfg1 := mustConfig(t, `{"rules":[{"name":"r","limit":1,"window":"1h"}],"client_ip":{"xff_trusted_hops":1}}`)
	e1 := New(cfg1, newMemStore(), 1, wallClock)
	for i, xff := range []string{"198.51.100.7", "1.1.1.1, 198.51.100.7", "2.2.2.2, 3.3.3.3, 198.51.100.7", "9.9.9.9, 198.51.100.7"} {
		want := Reject
		if i == 0 {
			want = Allow
		}
		if v := e1.Decide(req("/", "GET", "198.51.100.7:0", "x-forwarded-for", xff), t0); v.Outcome != want {
			t.Errorf("issue 11: XFF %q: outcome %v, want %v (client %v)", xff, v.Outcome, want, v.Client)
		}
	}
	// A header shorter than N falls back to source.address.
	if v := e1.Decide(req("/", "GET", "10.1.1.1:5", "x-forwarded-for", ""), t0); v.Client.String() != "10.1.1.1" {
		t.Errorf("short header: client %v, want source.address", v.Client)
	}
	// IPv6 clients in one /64 share a budget.
	if e.Decide(req("/", "GET", "[2001:db8:1:2::1]:5", "x-forwarded-for", "2001:db8:1:2::1, ::1"), t0).Outcome != Allow {
		t.Fatal("v6 first")
	}
	if e.Decide(req("/", "GET", "[2001:db8:1:2::1]:5", "x-forwarded-for", "2001:db8:1:2:ffff::9, ::1"), t0).Outcome != Reject {
		t.Error("another address in the same /64 got a new budget")
	}
	// Exempt ranges are never limited.
	for i := 0; i < 5; i++ {
		v := e.Decide(req("/", "GET", "127.0.0.1:1", "x-forwarded-for", "192.168.3.4, 127.0.0.1"), t0)
		if v.Outcome != Allow || !v.Exempt {
			t.Fatalf("exempt client: %+v", v)
		}
	}
}

func TestParsers(t *testing.T) {
	for in, want := range map[string]string{
		"1.2.3.4:80": "1.2.3.4", "[2001:db8::1]:443": "2001:db8::1", "2001:db8::1": "2001:db8::1",
		"[::ffff:10.0.0.1]:1": "10.0.0.1", "10.0.0.1": "10.0.0.1",
	} {
		a, ok := ParseHostPort(in)
		if !ok || a.String() != want {
			t.Errorf("ParseHostPort(%q) = %v %v, want %s", in, a, ok, want)
		}
	}
	for _, in := range []string{"", "garbage", "[::1", "1.2.3.4:5:6x", "unix:/tmp/sock"} {
		if a, ok := ParseHostPort(in); ok {
			t.Errorf("ParseHostPort(%q) = %v, want failure", in, a)
		}
	}
	cases := []struct {
		xff  string
		n    int
		want string
	}{
		{"1.1.1.1", 1, "1.1.1.1"}, {"1.1.1.1, 2.2.2.2", 1, "2.2.2.2"}, {"1.1.1.1,2.2.2.2", 2, "1.1.1.1"},
		{"1.1.1.1", 2, ""}, {"x, 2.2.2.2", 2, ""}, {" 3.3.3.3 ,", 1, ""}, {"", 1, ""},
		// Every entry counts, Envoy's own (use_remote_address: true) included:
		// entries a client prepends never move the N-th from the right.
		{"203.0.113.7, 127.0.0.1", 1, "127.0.0.1"}, {"6.6.6.6, 203.0.113.7, 127.0.0.1", 2, "203.0.113.7"},
		{"6.6.6.6,,, 203.0.113.7", 1, "203.0.113.7"}, {"[2001:db8::1]:443, 10.0.0.1", 2, "2001:db8::1"},
	}
	for _, c := range cases {
		a, ok := XFFFromRight(c.xff, c.n)
		got := ""
		if ok {
			got = a.String()
		}
		if got != c.want {
			t.Errorf("XFFFromRight(%q, %d) = %q, want %q", c.xff, c.n, got, c.want)
		}
	}
	a, _ := ipaddr.ParseAddr("2001:db8:1:2:3:4:5:6")
	if g := GroupAddr(a, 48); g.String() != "2001:db8:1::" {
		t.Errorf("GroupAddr /48 = %v", g)
	}
}

func TestBoundedTableKeepsActiveClients(t *testing.T) {
	cfg := mustConfig(t, `{"rules":[{"name":"r","limit":3,"window":"1h"}],"max_keys":800}`)
	store := newMemStore()
	e := New(cfg, store, 7, wallClock)
	victim := "10.9.9.9:1"
	for i := 0; i < 3; i++ {
		e.Decide(req("/", "GET", victim), t0)
	}
	if e.Decide(req("/", "GET", victim), t0).Outcome != Reject {
		t.Fatal("victim not limited")
	}
	// A flood of 50,000 new addresses.
	for i := 0; i < 50000; i++ {
		addr := fmt.Sprintf("%d.%d.%d.%d:1", 11+i>>24&0x7f, i>>16&0xff, i>>8&0xff, i&0xff)
		e.Decide(req("/", "GET", addr), t0+int64(i))
	}
	if c := e.Table().Capacity(); c > 800 {
		t.Errorf("table holds %d states, more than max_keys 800", c)
	}
	// Buckets and overflow states, and per rule a layout and an episode key.
	if n, bound := store.keys(), e.Table().Keys()+2*e.Table().Regions(); n > bound {
		t.Errorf("store has %d keys, bound is %d", n, bound)
	}
	if e.Decide(req("/", "GET", victim), t0+int64(time.Second)).Outcome != Reject {
		t.Error("the flood reset an active client's budget")
	}
	st := e.Table().Stats
	if st.Overflow == 0 {
		t.Error("no overflow decisions counted under a flood past max_keys")
	}
	t.Logf("store: %d keys, %d bytes; table stats %+v", store.keys(), store.bytes(), st)
	// Once everything has recovered, slots are reused by new clients.
	later := t0 + int64(2*time.Hour)
	if e.Decide(req("/", "GET", "99.0.0.1:1"), later).Outcome != Allow {
		t.Error("recovered table does not admit a new client")
	}
}

func TestHeaderSet(t *testing.T) {
	cfg := mustConfig(t, `{"rules":[{"name":"checkout","limit":10,"window":"1m","burst":10}]}`)
	r := &cfg.Rules[0]
	v := Verdict{Outcome: Reject, Report: r, RetryAfter: 5500 * time.Millisecond, Reset: time.Minute}
	var h HeaderSet
	h.Build(&v, header.Both, true)
	want := [][2]string{
		{"retry-after", "6"}, {"x-ratelimit-limit", "10"}, {"x-ratelimit-remaining", "0"}, {"x-ratelimit-reset", "60"},
		// On a rejection t is Retry-After (6), not the reset of the whole
		// quota (60): the draft has Retry-After never earlier than t.
		{"ratelimit-policy", `"checkout";q=10;w=60`}, {"ratelimit", `"checkout";r=0;t=6`},
	}
	if fmt.Sprint(h.List()) != fmt.Sprint(want) {
		t.Errorf("headers\n got %v\nwant %v", h.List(), want)
	}
	h.Build(&v, header.None, true)
	if len(h.List()) != 1 {
		t.Errorf("mode none: %v", h.List())
	}
	v2 := Verdict{Report: r, Remaining: 3, Reset: 42 * time.Second}
	h.Build(&v2, header.Legacy, false)
	if fmt.Sprint(h.List()) != fmt.Sprint([][2]string{{"x-ratelimit-limit", "10"}, {"x-ratelimit-remaining", "3"}, {"x-ratelimit-reset", "42"}}) {
		t.Errorf("legacy admitted: %v", h.List())
	}
	allocs := testing.AllocsPerRun(100, func() { h.Build(&v, header.Both, true) })
	if allocs != 0 {
		t.Errorf("Build allocates %v", allocs)
	}
}

func TestDecideAllocatesNothing(t *testing.T) {
	cfg := mustConfig(t, `{"rules":[{"name":"r","limit":1000000,"window":"1s"}]}`)
	e := New(cfg, newMemStore(), 1, wallClock)
	r := req("/x", "GET", "10.0.0.1:1")
	e.Decide(r, t0)
	// memStore allocates 3 itself (the copy a get returns, like Envoy, and the
	// stored value and key); the engine must add nothing.
	allocs := testing.AllocsPerRun(200, func() { e.Decide(r, t0) })
	if allocs > 3 {
		t.Errorf("Decide allocates %v per request (store copies included), want <= 3", allocs)
	}
}

// TestSpellingsShareABudget: a client cannot get a fresh budget by writing
// its address differently (X-Forwarded-For is client-controlled): IPv4 and
// IPv4-mapped IPv6, upper-case hex, leading zeros in IPv6 groups, brackets
// and ports, zones, other addresses of the same /64 all key one budget,
// through the header and through source.address alike; and an exempt range
// matches every spelling of an address in it.
func TestSpellingsShareABudget(t *testing.T) {
	cfg := mustConfig(t, `{"rules":[{"name":"r","limit":1,"window":"1h"}],"client_ip":{"xff_trusted_hops":1},
		"exempt_cidrs":["192.0.2.0/24","2001:db8:ee::/48"]}`)
	groups := [][]string{
		{"198.51.100.7", "::ffff:198.51.100.7", "::FFFF:198.51.100.7", "0:0:0:0:0:ffff:198.51.100.7", "::ffff:c633:6407",
			"[::ffff:198.51.100.7]:443", "198.51.100.7:80", "[::ffff:198.51.100.7%eth0]:1"},
		{"2001:db8:1:2::1", "2001:DB8:1:2::1", "2001:0db8:0001:0002:0000:0000:0000:0001", "[2001:db8:1:2::1]:8080",
			"2001:db8:1:2::1%eth0", "[2001:db8:1:2::1%25eth0]", "2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::ffff:1.2.3.4"},
	}
	for _, g := range groups {
		for _, via := range []string{"xff", "source"} {
			e := New(cfg, newMemStore(), 1, wallClock)
			for i, s := range g {
				r := req("/", "GET", "127.0.0.1:1", "x-forwarded-for", s)
				if via == "source" {
					r = req("/", "GET", s)
				}
				v := e.Decide(r, t0)
				want := Reject
				if i == 0 {
					want = Allow
				}
				if v.Outcome != want {
					t.Errorf("%s %q (client %v): %v, want %v: a spelling of %s got its own budget", via, s, v.Client, v.Outcome, want, g[0])
				}
			}
		}
	}
	e := New(cfg, newMemStore(), 1, wallClock)
	for _, s := range []string{"192.0.2.9", "::ffff:192.0.2.9", "::FFFF:C000:0209", "[::ffff:192.0.2.9]:1", "2001:db8:ee:1::1", "2001:DB8:EE:0001::1",
		"[2001:db8:ee::1]:5"} {
		for i := 0; i < 3; i++ {
			if v := e.Decide(req("/", "GET", "127.0.0.1:1", "x-forwarded-for", s), t0); !v.Exempt {
				t.Errorf("%q (client %v) is in an exempt range but was not exempt: %+v", s, v.Client, v.Outcome)
			}
		}
	}
}

// TestMappedExemptRange: clients are compared unmapped, so an exempt range
// written IPv4-mapped (::ffff:192.0.2.0/120) exempts the IPv4 range it
// names, however the client's address is spelled, and nothing outside it.
func TestMappedExemptRange(t *testing.T) {
	cfg := mustConfig(t, `{"rules":[{"name":"r","limit":1,"window":"1h"}],"client_ip":{"xff_trusted_hops":1},
		"exempt_cidrs":["::ffff:192.0.2.0/120","::ffff:198.51.100.7"]}`)
	e := New(cfg, newMemStore(), 1, wallClock)
	for _, s := range []string{"192.0.2.9", "::ffff:192.0.2.200", "198.51.100.7", "::ffff:198.51.100.7"} {
		if v := e.Decide(req("/", "GET", "127.0.0.1:1", "x-forwarded-for", s), t0); !v.Exempt {
			t.Errorf("%q is in a mapped exempt range but was not exempt", s)
		}
	}
	for _, s := range []string{"192.0.3.1", "198.51.100.8", "::ffff:10.0.0.1"} {
		if v := e.Decide(req("/", "GET", "127.0.0.1:1", "x-forwarded-for", s), t0); v.Exempt {
			t.Errorf("%q is outside the mapped exempt ranges but was exempt", s)
		}
	}
}

// Forwarded reports a rate rule's Reset from when the request is let
// through: a request held 6s, whose quota is fully restored 12s after its
// arrival, reports 6s. A concurrency rule's Reset estimates a hold and does
// not count down.
func TestForwardedCountsDownRateResets(t *testing.T) {
	e := New(mustConfig(t, `{"rules":[{"name":"pace","limit":10,"window":"1m","burst":1,"max_delay":"1m"}]}`), newMemStore(), 1, wallClock)
	e.Decide(req("/", "GET", "10.0.0.1:1"), t0)
	v := e.Decide(req("/", "GET", "10.0.0.1:1"), t0)
	if v.Outcome != Delay || v.Delay != 6*time.Second || v.Reset != 12*time.Second {
		t.Fatalf("second request: outcome %d delay %v reset %v, want held 6s, reset 12s", v.Outcome, v.Delay, v.Reset)
	}
	v.Forwarded(t0 - int64(time.Second)) // before it was measured: kept
	v.Forwarded(t0 + int64(v.Delay))
	if v.Reset != 6*time.Second {
		t.Errorf("forwarded after its 6s hold: reset %v, want 6s", v.Reset)
	}
	c := New(mustConfig(t, `{"rules":[{"name":"slots","algorithm":"concurrency","limit":2}]}`), newMemStore(), 1, wallClock)
	cv := c.Decide(req("/", "GET", "10.0.0.1:1"), t0)
	if cv.Report == nil || cv.Outcome != Allow {
		t.Fatalf("concurrency: outcome %d report %v", cv.Outcome, cv.Report)
	}
	reset := cv.Reset
	cv.Forwarded(t0 + int64(time.Minute))
	if cv.Reset != reset {
		t.Errorf("concurrency Reset %v became %v a minute later; an estimate of a hold does not count down", reset, cv.Reset)
	}
}

// The exemption is decided on the client's own address (after
// X-Forwarded-For), the key on its ipv6_prefix group: a /128 exempts one
// host of a /64, and the rest of the /64 shares one budget.
func TestExemptByOwnAddressKeyByGroup(t *testing.T) {
	cfg := mustConfig(t, `{"rules":[{"name":"r","limit":1,"window":"1h"}],"client_ip":{"xff_trusted_hops":1},
		"exempt_cidrs":["2001:db8::10/128","fe80::/10"]}`)
	e := New(cfg, newMemStore(), 1, wallClock)
	for _, s := range []string{"2001:db8::10", "[2001:db8::10]:443", "fe80::1%eth0"} {
		if v := e.Decide(req("/", "GET", "127.0.0.1:1", "x-forwarded-for", s), t0); !v.Exempt {
			t.Errorf("%q is in an exempt range but was not exempt", s)
		}
	}
	if v := e.Decide(req("/", "GET", "127.0.0.1:1", "x-forwarded-for", "2001:db8::11"), t0); v.Exempt || v.Outcome != Allow {
		t.Errorf("2001:db8::11: exempt %v, outcome %d; want limited and admitted", v.Exempt, v.Outcome)
	}
	if v := e.Decide(req("/", "GET", "127.0.0.1:1", "x-forwarded-for", "2001:db8::12"), t0); v.Outcome != Reject {
		t.Errorf("2001:db8::12, same /64 as ::11: outcome %d, want rejected (one budget per /64)", v.Outcome)
	}
}

// TestParseHostPortOnePass: the one-pass IPv4 path of ParseHostPort gives
// what the general path gives, on edge cases around IPv4 with and without
// a port and on random strings of the bytes that matter.
func TestParseHostPortOnePass(t *testing.T) {
	ins := []string{"1.2.3.4", "1.2.3.4:80", "1.2.3.4:", "1.2.3.4:5:6", "01.2.3.4:1", "1.2.3.256:1", "1.2.3:4",
		"1.2.3.4.5:6", "1.2.3.4x", "1.2.3.4%eth0", "1.2.3.4:80%x", "255.255.255.255:65535", "0.0.0.0:0", "1..2.3:4",
		".1.2.3:4", "1.2.3.4.:1", "1.2.3.00:1", "1.2.3.4:[::1]", "::ffff:1.2.3.4", "1.2.3.4::", "10.0.1.23:0"}
	rnd := rand.New(rand.NewPCG(1, 2))
	const alphabet = "0123456789..::[]%af"
	for range 20000 {
		b := make([]byte, rnd.IntN(24))
		for i := range b {
			b[i] = alphabet[rnd.IntN(len(alphabet))]
		}
		ins = append(ins, string(b))
	}
	for _, s := range ins {
		a, ok := ParseHostPort(s)
		var wa ipaddr.Addr
		wok := false
		if s != "" && len(s) <= 64 {
			wa, wok = parseHostPort(s)
		}
		if !sameAddr(a, wa) || ok != wok {
			t.Fatalf("ParseHostPort(%q) = %v %v, the general path %v %v", s, a, ok, wa, wok)
		}
	}
}

// sameAddr compares two addresses (ipaddr.Addr is not comparable, so that
// the module carries no equality function for it).
func sameAddr(a, b ipaddr.Addr) bool {
	return a.Is4() == b.Is4() && a.Is6() == b.Is6() && a.As16() == b.As16() && a.Zone() == b.Zone()
}

// TestAdmittedReportsItsRule holds an admitted request's numbers (its
// rule, what is left, when the bucket is full again) to the token bucket's:
// the one-rule case is recorded in chargeLocal without recordLocal.
func TestAdmittedReportsItsRule(t *testing.T) {
	cfg := mustConfig(t, `{"rules":[{"name":"r","limit":10,"window":"1s","burst":5}]}`)
	e := New(cfg, newMemStore(), 1, wallClock)
	for i := 0; i < 3; i++ {
		v := e.Decide(req("/", "GET", "10.0.0.1:1"), t0)
		// Each admitted request leaves one fewer and 100 ms more to refill.
		if v.Outcome != Allow || v.Report == nil || v.Report.Name != "r" || v.Remaining != int64(4-i) || v.Reset != time.Duration(i+1)*100*time.Millisecond {
			t.Fatalf("request %d: outcome %v, report %v, remaining %d, reset %v", i, v.Outcome, v.Report, v.Remaining, v.Reset)
		}
	}
	if got := e.Stats.Rules[0]; got.Allowed != 3 || got.Charged != 3 {
		t.Errorf("stats %+v", got)
	}
}
