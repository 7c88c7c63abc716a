package e2e_test

import (
	"context"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/e2e/envoytest"
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
	e := startSluice(t, 2, rulesConfig)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("throttle", func(t *testing.T) {
		// 40 simultaneous requests at 10/s, burst 5, max_delay 2s: 5 at once,
		// 20 held and released 100ms apart, 15 rejected at once.
		res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Path: "/throttle", Requests: 40, Concurrency: 40, KeepResponses: true})
		var ok, rejected []time.Duration
		for _, r := range res.Responses {
			switch r.Status {
			case 200:
				ok = append(ok, r.Latency)
			case 429:
				rejected = append(rejected, r.Latency)
				if ra, _ := strconv.Atoi(r.Header.Get("Retry-After")); ra < 1 {
					t.Errorf("429 Retry-After %q", r.Header.Get("Retry-After"))
				}
			default:
				t.Errorf("status %d (%v)", r.Status, r.Err)
			}
		}
		sort.Slice(ok, func(i, j int) bool { return ok[i] < ok[j] })
		if len(ok) != 25 || len(rejected) != 15 {
			t.Fatalf("admitted %d rejected %d, want 25 and 15", len(ok), len(rejected))
		}
		// The held ones: release k (1..20) is due k*100ms after the burst.
		gaps := ok[24] - ok[5]
		mean := gaps / 19
		t.Logf("throttle: first 5 within %v; held released from %v to %v, mean spacing %v; 429s answered within %v",
			ok[4].Round(time.Millisecond), ok[5].Round(time.Millisecond), ok[24].Round(time.Millisecond), mean.Round(time.Millisecond), maxDur(rejected).Round(time.Millisecond))
		if ok[4] > 300*time.Millisecond {
			t.Errorf("the burst of 5 took %v", ok[4])
		}
		if mean < 80*time.Millisecond || mean > 130*time.Millisecond {
			t.Errorf("mean spacing of held requests %v, want about 100ms", mean)
		}
		if ok[24] < 1900*time.Millisecond || ok[24] > 2600*time.Millisecond {
			t.Errorf("last held request released after %v, want about 2s", ok[24])
		}
		if maxDur(rejected) > 500*time.Millisecond {
			t.Errorf("rejections were not answered at once: %v", maxDur(rejected))
		}
	})

	t.Run("leaky_bucket", func(t *testing.T) {
		res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Path: "/leaky", Requests: 10, Concurrency: 10, KeepResponses: true})
		if res.Count(200) != 4 || res.Count(429) != 6 {
			t.Fatalf("leaky bucket of 3 at 10/s: %v, want 4 admitted (1 + 3 queued)", res.Status)
		}
		var ok []time.Duration
		for _, r := range res.Responses {
			if r.Status == 200 {
				ok = append(ok, r.Latency)
			}
		}
		sort.Slice(ok, func(i, j int) bool { return ok[i] < ok[j] })
		if ok[3] < 250*time.Millisecond {
			t.Errorf("queued requests were not paced: last admitted after %v, want >= 300ms", ok[3])
		}
	})

	t.Run("fixed_and_sliding_window", func(t *testing.T) {
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

func maxDur(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}
