//go:build go1.25

package sdk

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/sdk/header"
)

// holdLog records, per path, the requests held (waits before sending) that
// the retry hook reports.
type holdLog struct {
	mu     sync.Mutex
	seen   map[*http.Request]bool
	holds  map[string]int             // requests held at least once
	policy map[string]map[string]bool // path -> policies that held it
	waited map[string]time.Duration
}

func newHoldLog() *holdLog {
	return &holdLog{seen: map[*http.Request]bool{}, holds: map[string]int{}, policy: map[string]map[string]bool{}, waited: map[string]time.Duration{}}
}

func (l *holdLog) hook(ev RetryEvent) {
	if ev.Reason != HostLimit || ev.GiveUp != "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p := ev.Request.URL.Path
	if !l.seen[ev.Request] {
		l.seen[ev.Request] = true
		l.holds[p]++
	}
	l.waited[p] += ev.Delay
	if l.policy[p] == nil {
		l.policy[p] = map[string]bool{}
	}
	l.policy[p][ev.Policy] = true
}

func (l *holdLog) get(path string) (int, time.Duration, map[string]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holds[path], l.waited[path], l.policy[path]
}

func do(t *testing.T, c *http.Client, method, url string) *http.Response {
	t.Helper()
	var body *strings.Reader
	if method == "POST" {
		body = strings.NewReader(`{"item":1}`)
	}
	var req *http.Request
	if body != nil {
		req, _ = http.NewRequest(method, url, body)
	} else {
		req, _ = http.NewRequest(method, url, nil)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, url, err)
		return nil
	}
	resp.Body.Close()
	return resp
}

// TestPolicyCoolDownHoldsOnlyItsRoutes is the case in memory: two
// rules on two routes, as Sluice names them. A partner saturating
// /checkout (2 per 10 s) keeps the checkout policy in cool-down for a
// minute; its /browse requests meanwhile are never held and take exactly
// the network's time.
//
// For contrast, a server that names no policy (legacy headers) gets one
// view per host, and there /browse waits for /checkout's cool-downs.
func TestPolicyCoolDownHoldsOnlyItsRoutes(t *testing.T) {
	for _, tc := range []struct {
		warm bool
		st   style
	}{{true, sluiceStyle}, {false, sluiceStyle}, {true, draftStyle}, {true, legacyStyle}} {
		warm := tc.warm
		t.Run(fmt.Sprintf("%v/warm=%v", tc.st, warm), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				checkout := &api{now: time.Now, algo: &fixedWindow{limit: 2, window: 10 * time.Second}, style: tc.st, name: "checkout"}
				browse := &api{now: time.Now, algo: &fixedWindow{limit: 1000, window: 10 * time.Second}, style: tc.st, name: "browse"}
				const latency = 2 * time.Millisecond
				log := newHoldLog()
				c := &http.Client{Transport: NewTransport(handlerRT{h: routed{"/checkout": checkout, "/browse": browse}, latency: latency},
					WithMaxAttempts(20), WithRetryHook(log.hook))}
				if warm { // the partner's job has called both routes before
					do(t, c, "GET", "http://shop.test/browse")
					do(t, c, "POST", "http://shop.test/checkout")
				}
				var wg sync.WaitGroup
				for g := 0; g < 10; g++ {
					wg.Go(func() {
						for i := 0; i < 3; i++ {
							if r := do(t, c, "POST", "http://shop.test/checkout"); r != nil && r.StatusCode != 200 {
								t.Errorf("checkout: %s", r.Status)
							}
						}
					})
				}
				time.Sleep(100 * time.Millisecond) // the checkout policy is in cool-down
				var slow []time.Duration
				for i := 0; i < 50; i++ {
					start := time.Now()
					if r := do(t, c, "GET", fmt.Sprintf("http://shop.test/browse?page=%d", i)); r != nil && r.StatusCode != 200 {
						t.Errorf("browse: %s", r.Status)
					}
					if d := time.Since(start); d != latency && (warm || i > 0) {
						slow = append(slow, d)
					}
					time.Sleep(time.Second)
				}
				wg.Wait()
				n, waited, by := log.get("/browse")
				cn, cwaited, cby := log.get("/checkout")
				t.Logf("browse: %d requests held (%v) by %v; checkout: %d requests held (%v) by %v; checkout answered %d 429s of %d",
					n, waited, by, cn, cwaited, cby, checkout.count(429), len(checkout.Hits()))
				if tc.st == legacyStyle {
					// One view per host: the contrast, and the fallback.
					if n == 0 || !by[""] {
						t.Errorf("legacy headers: /browse held %d times by %v, want held by the host's view", n, by)
					}
					return
				}
				if len(slow) > 0 {
					t.Errorf("/browse requests took %v, want %v each: held by the checkout policy", slow, latency)
				}
				if warm && n != 0 {
					t.Errorf("/browse held %d times (%v) by %v, want never", n, waited, by)
				}
				if !warm && n > 1 {
					// Until the host names a second policy, its only one is
					// taken to govern every route: the first /browse waits
					// once, and teaches the Transport its own policy.
					t.Errorf("/browse held %d times, want at most once (before the host named its policy)", n)
				}
				if cn == 0 || !cby["checkout"] || len(cby) != 1 {
					t.Errorf("/checkout held %d times by %v, want held by the checkout policy", cn, cby)
				}
				// 31 checkouts at 2 per 10 s: the client waits out the
				// cool-downs instead of collecting 429s.
				if r := checkout.count(429); r > 10 {
					t.Errorf("checkout answered %d 429s: the policy's view did not hold its requests", r)
				}
			})
		})
	}
}

// TestSinglePolicyHoldsEveryRoute: a server with one rule names it on every
// route; a 429 with Retry-After on one route holds requests to other routes
// of the host too, as the per-host view always did.
func TestSinglePolicyHoldsEveryRoute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &scripted{now: time.Now, steps: []func(http.ResponseWriter){
			reply(429, "Retry-After", "2", "Ratelimit-Policy", `"api";q=10;w=60`, "Ratelimit", `"api";r=0;t=2`),
		}}
		log := newHoldLog()
		c := &http.Client{Transport: NewTransport(handlerRT{h: s}, WithRetryHook(log.hook))}
		start := time.Now()
		var wg sync.WaitGroup
		wg.Go(func() { do(t, c, "GET", "http://api.test/first") })
		synctest.Wait()
		for i := 0; i < 5; i++ {
			wg.Go(func() {
				time.Sleep(500 * time.Millisecond)
				do(t, c, "GET", fmt.Sprintf("http://api.test/more/%c", 'a'+i))
			})
		}
		wg.Wait()
		hits := s.Hits()
		if len(hits) != 7 {
			t.Fatalf("%d requests, want 7 (1 rejected + 6 admitted)", len(hits))
		}
		for _, h := range hits[1:] {
			if h.at.Sub(start) < 2*time.Second {
				t.Errorf("%s sent at %v, before the 2s cool-down ended", h.path, h.at.Sub(start))
			}
		}
		if n, _, by := log.get("/more/a"); n != 1 || !by["api"] {
			t.Errorf("/more/a held %d times by %v, want once by api", n, by)
		}
	})
}

// TestUnnamedWaitHoldsEveryRoute: a 503 with Retry-After names no policy:
// it holds every request to the host, even one whose route has a policy of
// its own.
func TestUnnamedWaitHoldsEveryRoute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		checkout := &scripted{now: time.Now, steps: []func(http.ResponseWriter){
			reply(200, "Ratelimit-Policy", `"checkout";q=10;w=60`, "Ratelimit", `"checkout";r=9;t=60`),
			reply(503, "Retry-After", "3"),
		}}
		browse := &api{now: time.Now, algo: &fixedWindow{limit: 1000, window: time.Minute}, style: sluiceStyle, name: "browse"}
		c := &http.Client{Transport: NewTransport(handlerRT{h: routed{"/checkout": checkout, "/browse": browse}})}
		do(t, c, "GET", "http://shop.test/browse")
		do(t, c, "GET", "http://shop.test/checkout")
		start := time.Now()
		var wg sync.WaitGroup
		wg.Go(func() { do(t, c, "GET", "http://shop.test/checkout") })
		wg.Go(func() {
			time.Sleep(500 * time.Millisecond)
			do(t, c, "GET", "http://shop.test/browse")
		})
		wg.Wait()
		bh := browse.Hits()
		if len(bh) != 2 || bh[1].at.Sub(start) < 3*time.Second {
			t.Errorf("/browse sent %v after the 503, want after its 3 s Retry-After", bh[len(bh)-1].at.Sub(start))
		}
		if ch := checkout.Hits(); len(ch) != 3 || ch[2].at.Sub(start) < 3*time.Second {
			t.Errorf("checkout hits %+v", ch)
		}
	})
}

// TestRouteTemplates: identifiers in paths share a route; names do not.
func TestRouteTemplates(t *testing.T) {
	same := [][2]string{
		{"/orders/123", "/orders/456"},
		{"/orders/1/items", "/orders/99999999999999999999/items"},
		{"/users/3f2a9c1e-8b7d-4e6f-a5b4-c3d2e1f0a9b8", "/users/00000000-0000-0000-0000-000000000000"},
		{"/commits/9fceb02d0ae598e95dc970b74767f19372d61af8", "/commits/0123abcd"},
		{"/customers/cus_J8fKD9dLkd0xQ2", "/customers/cus_Zk3LmN8pQr5sTu"},
		{"", "/"},
	}
	for _, p := range same {
		if routeOf(1, "GET", p[0]) != routeOf(1, "GET", p[1]) {
			t.Errorf("%q and %q are different routes, want one", p[0], p[1])
		}
	}
	differ := [][2]string{
		{"/orders/123", "/orders/123/items"},
		{"/v1/orders", "/v2/orders"},
		{"/orders/abc", "/orders/abd"},
		{"/checkout", "/browse"},
		{"/a/b", "/a//b"},
		{"/a/", "/a"},
		{"/orders/deadbeef", "/orders/cafebabe"}, // words that happen to be hex
		{"/oauth2/token", "/oauth3/token"},
	}
	for _, p := range differ {
		if routeOf(1, "GET", p[0]) == routeOf(1, "GET", p[1]) {
			t.Errorf("%q and %q are one route, want two", p[0], p[1])
		}
	}
	if routeOf(1, "GET", "/x") == routeOf(1, "POST", "/x") || routeOf(1, "GET", "/x") == routeOf(2, "GET", "/x") {
		t.Error("method or host not in the route")
	}
	if routeOf(1, "", "/x") != routeOf(1, "GET", "/x") {
		t.Error(`method "" is not GET`)
	}

	// In a Transport: a cool-down learned on /orders/1 holds /orders/2,
	// not /items, once the host has named two policies.
	synctest.Test(t, func(t *testing.T) {
		orders := &scripted{now: time.Now, steps: []func(http.ResponseWriter){
			reply(200, "Ratelimit-Policy", `"orders";q=10;w=60`, "Ratelimit", `"orders";r=9;t=60`),
			reply(429, "Retry-After", "5", "Ratelimit-Policy", `"orders";q=10;w=60`, "Ratelimit", `"orders";r=0;t=5`),
		}}
		items := &api{now: time.Now, algo: &fixedWindow{limit: 1000, window: time.Minute}, style: draftStyle, name: "items"}
		c := &http.Client{Transport: NewTransport(handlerRT{h: routed{"/orders": orders, "/items": items}})}
		do(t, c, "GET", "http://api.test/items")
		do(t, c, "GET", "http://api.test/orders/1")
		start := time.Now()
		var wg sync.WaitGroup
		wg.Go(func() { do(t, c, "GET", "http://api.test/orders/1") })
		synctest.Wait()
		wg.Go(func() { do(t, c, "GET", "http://api.test/orders/2") })
		wg.Go(func() { do(t, c, "GET", "http://api.test/items") })
		wg.Wait()
		oh, ih := orders.Hits(), items.Hits()
		if len(oh) != 4 || oh[3].path != "/orders/2" && oh[2].path != "/orders/2" {
			t.Fatalf("orders hits: %+v", oh)
		}
		for _, h := range oh[2:] {
			if h.at.Sub(start) < 5*time.Second {
				t.Errorf("%s sent %v after the 429, want after its 5 s", h.path, h.at.Sub(start))
			}
		}
		if d := ih[1].at.Sub(start); d != 0 {
			t.Errorf("/items sent %v after the orders 429, want at once", d)
		}
	})
}

// letters names the i-th path segment with letters only (never an
// identifier).
func letters(i int) string {
	var b []byte
	for {
		b = append(b, byte('a'+i%26))
		i /= 26
		if i == 0 {
			return string(b)
		}
	}
}

// TestBoundedMemory: a partner that calls many thousands of paths, on a
// server that names hundreds of policies, keeps a bounded table of each.
func TestBoundedMemory(t *testing.T) {
	tr := NewTransport(rtFunc(func(r *http.Request) (*http.Response, error) {
		p := strings.TrimPrefix(r.URL.Path, "/r/")
		name := fmt.Sprintf("p%d", uint64(routeOf(0, "", p))%300) // 300 names
		h := http.Header{
			"Ratelimit-Policy": {`"` + name + `";q=100;w=60`},
			"Ratelimit":        {`"` + name + `";r=50;t=30`},
		}
		return &http.Response{StatusCode: 200, Header: h, Body: http.NoBody, Request: r}, nil
	}))
	names := map[string]bool{}
	for i := 0; i < 30000; i++ {
		path := "/r/" + letters(i*7919)
		req, _ := http.NewRequest("GET", "http://api.test"+path, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		names[resp.Header.Get("Ratelimit")] = true
	}
	routes := 0
	for i := range tr.routes.shards {
		s := &tr.routes.shards[i]
		s.mu.Lock()
		routes += len(s.m)
		s.mu.Unlock()
	}
	h := tr.hosts.get("api.test", time.Now(), nil, false)
	h.mu.Lock()
	policies := len(h.policies)
	h.mu.Unlock()
	t.Logf("30000 paths, %d policy names: %d routes kept (max %d), %d policies (max %d)", len(names), routes, maxRoutes, policies, maxPolicies)
	if routes > maxRoutes || routes < maxRoutes/2 {
		t.Errorf("%d routes kept, want at most %d (and the table used)", routes, maxRoutes)
	}
	if len(names) <= maxPolicies || policies > maxPolicies {
		t.Errorf("%d policies kept of %d names, want at most %d", policies, len(names), maxPolicies)
	}

	// A table full of policies that still enforce something takes no new
	// one: its answers go to the host-level view.
	now := time.Now()
	full := &host{}
	full.all.init("", 0, 0, false)
	wait := header.Info{RetryAfter: time.Hour, Has: header.HasRetryAfter}
	for i := 0; i < maxPolicies; i++ {
		v := full.policy(fmt.Sprint(i), now)
		v.observe(ticket{}, now, 503, wait, 0) // held for an hour: busy
	}
	if v := full.policy("new", now); v != nil {
		t.Error("a full table of busy policies took a new one")
	}
	if v := full.policy("3", now); v == nil || v.name != "3" {
		t.Error("a known policy is not found in a full table")
	}
}

// TestRetryBudgetGivesUp: an empty budget returns the last response at
// once (nil error), says so to the hook, and spends nothing on the waits a
// 429 asked for.
func TestRetryBudgetGivesUp(t *testing.T) {
	one := &RetryBudget{Burst: 1} // one retry, never earned back
	t.Run("503", func(t *testing.T) {
		clk := newFakeClock()
		srv := serve(t, &scripted{steps: repeat(100, reply(503))})
		var events []RetryEvent
		c := &http.Client{Transport: NewTransport(nil, WithClock(clk), WithRetryBudget(one),
			WithRetryHook(func(ev RetryEvent) { events = append(events, ev) }))}
		r := do(t, c, "GET", srv.URL)
		if r == nil || r.StatusCode != 503 {
			t.Fatalf("got %v", r)
		}
		if len(events) != 2 || events[0].GiveUp != "" || events[1].GiveUp != GiveUpBudget ||
			events[1].Attempt != 2 || events[1].Reason != Unavailable {
			t.Fatalf("events = %+v", events)
		}
		sleeps := len(clk.Sleeps())
		r = do(t, c, "GET", srv.URL)
		if r == nil || r.StatusCode != 503 || len(events) != 3 || events[2].GiveUp != GiveUpBudget || events[2].Attempt != 1 {
			t.Fatalf("second request: %v, events %+v", r, events)
		}
		if len(clk.Sleeps()) != sleeps {
			t.Error("waited with an empty budget")
		}
	})
	t.Run("transport error", func(t *testing.T) {
		calls := 0
		boom := errors.New("connection reset")
		tr := NewTransport(rtFunc(func(*http.Request) (*http.Response, error) { calls++; return nil, boom }),
			WithClock(newFakeClock()), WithRetryBudget(one))
		req, _ := http.NewRequest("GET", "http://api.test/", nil)
		if _, err := tr.RoundTrip(req); !errors.Is(err, boom) || calls != 2 {
			t.Errorf("err %v after %d calls, want the error after 2", err, calls)
		}
	})
	t.Run("429 with a hint is free", func(t *testing.T) {
		s := &scripted{steps: repeat(3, reply(429, "Retry-After", "1"))}
		srv := serve(t, s)
		c := &http.Client{Transport: NewTransport(nil, WithClock(newFakeClock()), WithRetryBudget(&RetryBudget{}))}
		if r := do(t, c, "POST", srv.URL); r == nil || r.StatusCode != 200 || len(s.Hits()) != 4 {
			t.Errorf("got %v after %d attempts, want 200 after 4 with a budget of 1 retry", r, len(s.Hits()))
		}
	})
	t.Run("429 without a hint counts", func(t *testing.T) {
		// At DefaultThrottleCost (5/14), a budget of one pays for two.
		s := &scripted{steps: repeat(5, reply(429))}
		srv := serve(t, s)
		c := &http.Client{Transport: NewTransport(nil, WithClock(newFakeClock()), WithRetryBudget(one), WithMaxAttempts(10))}
		if r := do(t, c, "GET", srv.URL); r == nil || r.StatusCode != 429 || len(s.Hits()) != 3 {
			t.Errorf("got %v after %d attempts, want 429 after 3", r, len(s.Hits()))
		}
		// At the transient cost of 1, for one.
		s = &scripted{steps: repeat(5, reply(429))}
		srv = serve(t, s)
		c = &http.Client{Transport: NewTransport(nil, WithClock(newFakeClock()), WithMaxAttempts(10),
			WithRetryBudget(&RetryBudget{Burst: 1, ThrottleCost: 1}))}
		if r := do(t, c, "GET", srv.URL); r == nil || r.StatusCode != 429 || len(s.Hits()) != 2 {
			t.Errorf("ThrottleCost 1: got %v after %d attempts, want 429 after 2", r, len(s.Hits()))
		}
	})
	t.Run("disabled", func(t *testing.T) {
		s := &scripted{steps: repeat(100, reply(503))}
		srv := serve(t, s)
		c := &http.Client{Transport: NewTransport(nil, WithClock(newFakeClock()), WithRetryBudget(one), WithRetryBudget(nil))}
		for i := 0; i < 3; i++ {
			do(t, c, "GET", srv.URL)
		}
		if n := len(s.Hits()); n != 12 {
			t.Errorf("%d attempts for 3 requests with no budget, want 12", n)
		}
	})
	t.Run("defaults", func(t *testing.T) {
		tr := NewTransport(nil)
		if tr.cfg.budget == nil || *tr.cfg.budget != (RetryBudget{Ratio: 0.1, MinPerSecond: 1, Burst: 100}) ||
			tr.cfg.budget == &DefaultRetryBudget {
			t.Errorf("default budget = %+v", tr.cfg.budget)
		}
	})
}

// TestHoldEventNamesPolicy: a hold reports the policy that causes it.
func TestHoldEventNamesPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &scripted{now: time.Now, steps: []func(http.ResponseWriter){
			reply(429, "Retry-After", "2", "Ratelimit-Policy", `"search";q=1;w=2`, "Ratelimit", `"search";r=0;t=2`),
		}}
		var held atomic.Value
		c := &http.Client{Transport: NewTransport(handlerRT{h: s}, WithRetryHook(func(ev RetryEvent) {
			if ev.Reason == HostLimit {
				held.Store(ev.Policy)
			}
		}))}
		var wg sync.WaitGroup
		wg.Go(func() { do(t, c, "GET", "http://api.test/search") })
		synctest.Wait()
		wg.Go(func() { do(t, c, "GET", "http://api.test/search") })
		wg.Wait()
		if p, _ := held.Load().(string); p != "search" {
			t.Errorf("hold named %q, want search", p)
		}
	})
}

// FuzzRouteOf: any path is a route, and an identifier segment may be any
// identifier: replacing a number with another keeps the route.
func FuzzRouteOf(f *testing.F) {
	for _, p := range []string{"/", "", "/orders/123/items", "//a//", "/users/3f2a9c1e-8b7d", "/%2F/x", "/\x00/\xff"} {
		f.Add("GET", p, uint64(7))
	}
	f.Fuzz(func(t *testing.T, method, path string, n uint64) {
		k := routeOf(1, method, path)
		if k != routeOf(1, method, path) {
			t.Fatal("not deterministic")
		}
		segs := strings.Split(path, "/")
		for i, s := range segs {
			if identifier(s) {
				segs[i] = fmt.Sprint(n)
			}
		}
		if routeOf(1, method, strings.Join(segs, "/")) != k {
			t.Errorf("%q: replacing its identifiers with %d changes the route", path, n)
		}
	})
}
