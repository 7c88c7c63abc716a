package e2e_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

const rulesConfig = `{
  "rules": [
    {"name": "throttle", "match": {"path_prefix": "/throttle"}, "limit": 10, "window": "1s", "burst": 5, "max_delay": "2s"},
    {"name": "leaky", "match": {"path_prefix": "/leaky"}, "algorithm": "leaky_bucket", "limit": 10, "window": "1s", "burst": 3},
    {"name": "fixed", "match": {"path_prefix": "/fixed"}, "algorithm": "fixed_window", "limit": 4, "window": "1h"},
    {"name": "sliding", "match": {"path_prefix": "/sliding"}, "algorithm": "sliding_window", "limit": 4, "window": "1h"},
    {"name": "apikey", "match": {"path_prefix": "/api"}, "key": ["header:x-api-key"], "limit": 2, "window": "1h"},
    {"name": "shadow", "match": {"path_prefix": "/shadow"}, "limit": 2, "window": "1h", "shadow": true},
    {"name": "outer", "match": {"path_prefix": "/multi"}, "limit": 10, "window": "1h"},
    {"name": "inner", "match": {"path_prefix": "/multi/inner", "methods": ["POST"]}, "limit": 1, "window": "1h"}
  ]
}`

func TestRuleEngine(t *testing.T) {
	e := startSluice(t, 2, rulesConfig, withTimingLog)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("throttle", func(t *testing.T) {
		// 40 simultaneous requests at 10/s, burst 5, max_delay 2s: 5 at once,
		// 20 held and released 100ms apart, 15 rejected at once. That is
		// the rule's decision for a burst that reaches Envoy within 100 ms;
		// one that took longer (the load generator or the machine late) is
		// a different question with a different answer, so it is sent
		// again, after the bucket has refilled.
		for attempt := 1; ; attempt++ {
			path := "/throttle?attempt=" + strconv.Itoa(attempt)
			res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Path: path, Requests: 40, Concurrency: 40, KeepResponses: true})
			ls := envoyTimings(t, e, path, 40)
			if spread := arrivalSpread(ls); spread > 80*time.Millisecond && attempt < 4 {
				t.Logf("attempt %d: the burst reached Envoy over %v, more than 80 ms: again", attempt, spread)
				time.Sleep(time.Second) // the bucket refills
				continue
			}
			checkThrottle(t, res, ls)
			return
		}
	})

	t.Run("leaky_bucket", func(t *testing.T) {
		// 10 simultaneous at 10/s with a queue of 3: 1 at once, 3 queued and
		// sent 100 ms apart, 6 rejected, for a burst that reaches Envoy
		// within 100 ms (sent again otherwise).
		for attempt := 1; ; attempt++ {
			path := "/leaky?attempt=" + strconv.Itoa(attempt)
			res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Path: path, Requests: 10, Concurrency: 10, KeepResponses: true})
			ls := envoyTimings(t, e, path, 10)
			if spread := arrivalSpread(ls); spread > 80*time.Millisecond && attempt < 4 {
				t.Logf("attempt %d: the burst reached Envoy over %v, more than 80 ms: again", attempt, spread)
				time.Sleep(time.Second)
				continue
			}
			if res.Count(200) != 4 || res.Count(429) != 6 {
				t.Fatalf("leaky bucket of 3 at 10/s: %v, want 4 admitted (1 + 3 queued)", res.Status)
			}
			// Never early, on Envoy's clock: the last admitted one leaves
			// 300 ms after the first arrived.
			var last time.Time
			for _, l := range ls {
				if l.status == 200 && l.end().After(last) {
					last = l.end()
				}
			}
			if d := last.Sub(firstStart(ls)); d < 250*time.Millisecond {
				t.Errorf("queued requests were not paced: last admitted after %v, want >= 300ms", d)
			}
			return
		}
	})

	t.Run("fixed_and_sliding_window", func(t *testing.T) {
		// The fixed window is aligned to the hour: 10 requests straddling
		// its top would meet two windows and rightly get 8.
		clearOfWindowEdge(time.Hour, 5*time.Second)
		for _, p := range []string{"/fixed", "/sliding"} {
			res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Path: p, Requests: 10, Concurrency: 5})
			if res.Count(200) != 4 || res.Count(429) != 6 {
				t.Errorf("%s: %v, want 4 admitted", p, res.Status)
			}
		}
	})

	t.Run("api_key", func(t *testing.T) {
		key := func(k string) func(int, *http.Request) {
			return func(_ int, r *http.Request) {
				if k != "" {
					r.Header.Set("X-Api-Key", k)
				}
			}
		}
		for _, c := range []struct {
			key  string
			xff  string
			want int
		}{{"alpha", "", 2}, {"alpha", "", 0}, {"beta", "", 2}, {"", "", 2}} {
			res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Path: "/api", Requests: 4, Concurrency: 1, Request: key(c.key)})
			if res.Count(200) != c.want {
				t.Errorf("key %q: %v, want %d admitted", c.key, res.Status, c.want)
			}
		}
	})

	t.Run("shadow", func(t *testing.T) {
		res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Path: "/shadow", Requests: 5, Concurrency: 1, KeepResponses: true})
		if res.Count(200) != 5 {
			t.Fatalf("shadow rule rejected: %v", res.Status)
		}
		marked := 0
		for _, r := range res.Responses {
			if v := r.Header.Get("X-RateLimit-Shadow"); v != "" {
				marked++
				if !strings.HasPrefix(v, `"shadow";retry-after=`) {
					t.Errorf("X-RateLimit-Shadow = %q", v)
				}
			}
		}
		if marked != 3 {
			t.Errorf("%d responses marked as shadow-rejected, want 3", marked)
		}
		waitStat(t, e, "wasmcustom.sluice.rule.shadow.shadow_rejected", 3)
	})

	t.Run("several_rules_refund", func(t *testing.T) {
		post := func(path string) int {
			resp, _, err := e.Do(ctx, "POST", path, nil, []byte("x"))
			if err != nil {
				t.Fatal(err)
			}
			return resp.StatusCode
		}
		// inner allows 1 POST; the second is rejected by inner and must not
		// be charged to outer.
		if post("/multi/inner") != 200 || post("/multi/inner") != 429 || post("/multi/inner") != 429 {
			t.Fatal("inner rule did not limit POSTs to 1")
		}
		// outer (10) has been charged once: 9 more GETs pass.
		res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Path: "/multi/other", Requests: 12, Concurrency: 1, KeepResponses: true})
		if res.Count(200) != 9 {
			t.Errorf("outer admitted %d more, want 9 (rejected requests refunded)", res.Count(200))
		}
	})
}

// clientConfig exercises client identification: the plugin's own
// xff_trusted_hops with Envoy's use_remote_address: true (Envoy appends an
// entry to X-Forwarded-For, and every entry counts, so 2 is the address the
// one trusted proxy in front appended), IPv6 /64 grouping, exempt ranges,
// legacy headers and a custom status. TestClientIdentityMatrix covers every
// connection-manager setting.
const clientConfig = `{
  "rules": [{"name": "per-client", "limit": 2, "window": "1h"}],
  "client_ip": {"xff_trusted_hops": 2, "ipv6_prefix": 64},
  "exempt_cidrs": ["198.51.100.0/24"],
  "headers": "legacy",
  "status": 503
}`

func TestClientIdentity(t *testing.T) {
	e := startSluice(t, 2, clientConfig)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	send := func(xff string, n int) map[int]int {
		res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Requests: n, Concurrency: 1, XForwardedFor: func(int) string { return xff }})
		return res.Status
	}
	// A client behind the trusted proxy (which appended 203.0.113.7).
	if got := send("203.0.113.7", 3); got[200] != 2 || got[503] != 1 {
		t.Fatalf("client 203.0.113.7: %v, want 2 admitted then 503", got)
	}
	// Spoofing: the same client prepends addresses of its choice. The trusted
	// entry is still 203.0.113.7, so it stays limited.
	if got := send("1.2.3.4, 5.6.7.8, 203.0.113.7", 3); got[503] != 3 {
		t.Errorf("spoofed X-Forwarded-For bought a new budget: %v", got)
	}
	// IPv6: two addresses in one /64 share a budget; another /64 does not.
	if got := send("2001:db8:aa:bb::1", 1); got[200] != 1 {
		t.Fatal(got)
	}
	if got := send("2001:db8:aa:bb:ffff:1:2:3", 2); got[200] != 1 || got[503] != 1 {
		t.Errorf("same /64: %v, want 1 admitted then 503", got)
	}
	if got := send("2001:db8:aa:cc::1", 2); got[200] != 2 {
		t.Errorf("other /64: %v, want 2 admitted", got)
	}
	// Exempt range: never limited, no headers.
	res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Requests: 20, Concurrency: 4, KeepResponses: true, XForwardedFor: func(int) string { return "198.51.100.9" }})
	if res.Count(200) != 20 {
		t.Errorf("exempt client limited: %v", res.Status)
	}
	// Legacy headers only, custom status.
	resp, _, err := e.Do(ctx, "GET", "/", http.Header{"X-Forwarded-For": {"203.0.113.7"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 503 || resp.Header.Get("X-RateLimit-Limit") != "2" || resp.Header.Get("RateLimit-Policy") != "" || resp.Header.Get("Retry-After") == "" {
		t.Errorf("legacy/503: %d %v", resp.StatusCode, resp.Header)
	}
	waitStat(t, e, "wasmcustom.sluice.exempt", 20)
}

// checkThrottle checks the throttle rule's decisions on a burst of 40 that
// reached Envoy within 100 ms, on Envoy's clock (the access log): the
// load generator's lateness in sending or reading is not in it.
func checkThrottle(t *testing.T, res envoytest.LoadResult, ls []envoyTiming) {
	t.Helper()
	t0 := firstStart(ls)
	var allowed, delayed []time.Duration // release after the burst's first arrival
	var rejected []time.Duration         // time in Envoy
	for _, l := range ls {
		switch {
		case l.status == 200 && l.decision == "allowed":
			allowed = append(allowed, l.end().Sub(t0))
		case l.status == 200 && l.decision == "delayed":
			delayed = append(delayed, l.end().Sub(t0))
		case l.status == 429 && l.decision == "rejected":
			rejected = append(rejected, l.duration)
		default:
			t.Errorf("status %d, decision %q", l.status, l.decision)
		}
	}
	for _, r := range res.Responses {
		if ra, _ := strconv.Atoi(r.Header.Get("Retry-After")); r.Status == 429 && ra < 1 {
			t.Errorf("429 Retry-After %q", r.Header.Get("Retry-After"))
		}
	}
	slices.Sort(allowed)
	slices.Sort(delayed)
	if len(allowed) != 5 || len(delayed) != 20 || len(rejected) != 15 {
		t.Fatalf("admitted %d at once, held %d, rejected %d; want 5, 20 and 15 (%v)", len(allowed), len(delayed), len(rejected), res)
	}
	// The held ones: release k (1..20) is due k*100ms after the burst.
	mean := (delayed[19] - delayed[0]) / 19
	t.Logf("throttle (Envoy's clock): the burst arrived within %v; first 5 answered within %v; held released from %v to %v, mean spacing %v; 429s answered within %v",
		arrivalSpread(ls), allowed[4], delayed[0], delayed[19], mean, maxDur(rejected))
	if allowed[4] > 300*time.Millisecond {
		t.Errorf("the burst of 5 took %v", allowed[4])
	}
	if mean < 80*time.Millisecond || mean > 130*time.Millisecond {
		t.Errorf("mean spacing of held requests %v, want about 100ms", mean)
	}
	if delayed[19] < 1900*time.Millisecond || delayed[19] > 2600*time.Millisecond {
		t.Errorf("last held request released after %v, want about 2s", delayed[19])
	}
	if maxDur(rejected) > 500*time.Millisecond {
		t.Errorf("rejections were not answered at once: %v", maxDur(rejected))
	}
}

// firstStart is when the first request of ls reached Envoy.
func firstStart(ls []envoyTiming) time.Time {
	t0 := ls[0].start
	for _, l := range ls {
		if l.start.Before(t0) {
			t0 = l.start
		}
	}
	return t0
}

func maxDur(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}
