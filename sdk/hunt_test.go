//go:build go1.25

package sdk

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/sdk/header"
)

// flipServer answers 200 until bare is set, then a bare 429 to the next
// `refuse` requests, then 200 again. It records when each 429 was sent back.
type flipServer struct {
	mu      sync.Mutex
	refuse  int
	refused []time.Time
	hits    int
}

func (s *flipServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	s.mu.Lock()
	s.hits++
	no := s.refuse > 0
	if no {
		s.refuse--
		s.refused = append(s.refused, time.Now())
	}
	s.mu.Unlock()
	if no {
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	io.WriteString(w, "ok")
}

func (s *flipServer) refuseNext(n int) {
	s.mu.Lock()
	s.refuse = n
	s.mu.Unlock()
}

// adaptiveWarm teaches c's host an admitted rate of about 20/s for 2 s,
// then a bare 429 (its retry is not waited for): the learned rate is then
// about 14/s and the pacer empty.
func adaptiveWarm(t *testing.T, c *http.Client, s *flipServer, url string) {
	t.Helper()
	for range 40 {
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		time.Sleep(30 * time.Millisecond)
	}
	s.refuseNext(1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	go func() {
		for {
			s.mu.Lock()
			n := len(s.refused)
			s.mu.Unlock()
			if n > 0 {
				time.Sleep(20 * time.Millisecond) // the answer is back
				cancel()
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("warm-up: the bare 429's retry was not interrupted: %d", resp.StatusCode)
	}
}

// TestHuntDeadlineInLineAfterCut: 100 callers wait in the adaptive pacer's
// line, every one with a deadline 3 s out that its turn fits when taken.
// The first of them is refused (a bare 429): the rate is cut and the turns
// behind are re-timed past some callers' deadlines. The contract says the
// SDK returns as soon as it knows the next attempt cannot start in time:
// those callers must give up at the cut, not sleep on until the time their
// turn had before it.
func TestHuntDeadlineInLineAfterCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &flipServer{}
		var mu sync.Mutex
		var gaveUp []time.Time
		hook := func(ev RetryEvent) {
			if ev.GiveUp == GiveUpDeadline && ev.Attempt == 0 {
				mu.Lock()
				gaveUp = append(gaveUp, time.Now())
				mu.Unlock()
			}
		}
		c := &http.Client{Transport: NewTransport(handlerRT{h: s, latency: 20 * time.Millisecond},
			WithAdaptiveRate(), WithRetryHook(hook))}
		adaptiveWarm(t, c, s, "http://adaptive.test/x")
		time.Sleep(time.Millisecond)
		mu.Lock()
		gaveUp = nil
		mu.Unlock()
		s.mu.Lock()
		s.refused = nil
		s.mu.Unlock()
		s.refuseNext(1)
		launch := time.Now()
		ctx, cancel := context.WithDeadline(context.Background(), launch.Add(3*time.Second))
		defer cancel()
		var wg sync.WaitGroup
		for range 100 {
			wg.Go(func() {
				req, _ := http.NewRequestWithContext(ctx, "GET", "http://adaptive.test/x", nil)
				if resp, err := c.Do(req); err == nil {
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
		s.mu.Lock()
		if len(s.refused) == 0 {
			s.mu.Unlock()
			t.Fatal("the crowd's first request was not refused")
		}
		cut := s.refused[0].Add(10 * time.Millisecond) // the 429 is back at the client
		s.mu.Unlock()
		late := 0
		var worst time.Duration
		for _, at := range gaveUp {
			if at.Sub(launch) < 5*time.Millisecond {
				continue // given up when the turn was taken: past the deadline already
			}
			if d := at.Sub(cut); d > 50*time.Millisecond {
				late++
				worst = max(worst, d)
			}
		}
		t.Logf("cut at +%v; %d give-ups, %d of them more than 50 ms after the cut (worst %v)",
			cut.Sub(launch), len(gaveUp), late, worst)
		if late > 0 {
			t.Errorf("%d callers whose re-timed turn passed their deadline slept on after the cut (up to %v)", late, worst)
		}
	})
}

// TestHuntDeadlineHoldExtended: a 429 with Retry-After: 1 holds the host;
// 20 callers wait out the hold, every one with a deadline 3 s out. Then the
// answer to a request sent before the first 429 extends the hold to 10 s
// (Retry-After: 10). The held callers can no longer start in time: they
// must give up when that answer arrives, not when the first hold ends.
func TestHuntDeadlineHoldExtended(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var gaveUp []time.Time
		hook := func(ev RetryEvent) {
			if ev.GiveUp == GiveUpDeadline && ev.Reason == HostLimit {
				mu.Lock()
				gaveUp = append(gaveUp, time.Now())
				mu.Unlock()
			}
		}
		slow := make(chan struct{})
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/first":
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusTooManyRequests)
			case "/slow":
				<-slow
				w.Header().Set("Retry-After", "10")
				w.WriteHeader(http.StatusTooManyRequests)
			default:
				io.WriteString(w, "ok")
			}
		})
		c := &http.Client{Transport: NewTransport(handlerRT{h: h, latency: 20 * time.Millisecond},
			WithRetryHook(hook), WithMaxAttempts(1))}
		get := func(ctx context.Context, path string) {
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://held.test"+path, nil)
			if resp, err := c.Do(req); err == nil {
				resp.Body.Close()
			}
		}
		var wg sync.WaitGroup
		wg.Go(func() { get(context.Background(), "/slow") }) // in flight before the hold
		time.Sleep(5 * time.Millisecond)
		get(context.Background(), "/first")
		start := time.Now()
		ctx, cancel := context.WithDeadline(context.Background(), start.Add(3*time.Second))
		defer cancel()
		for range 20 {
			wg.Go(func() { get(ctx, "/x") })
		}
		time.Sleep(300 * time.Millisecond)
		close(slow)
		extended := time.Now().Add(10 * time.Millisecond) // its answer is back
		wg.Wait()
		if len(gaveUp) != 20 {
			t.Fatalf("%d held callers gave up, want 20", len(gaveUp))
		}
		late := 0
		for _, at := range gaveUp {
			if at.Sub(extended) > 5*time.Millisecond {
				late++
			}
		}
		t.Logf("hold extended at +%v; gave up at +%v .. +%v", extended.Sub(start), gaveUp[0].Sub(start), gaveUp[len(gaveUp)-1].Sub(start))
		if late > 0 {
			t.Errorf("%d held callers whose deadline the extended hold passes slept on until the first hold ended", late)
		}
	})
}

// TestHuntPolicyChurnNoPanic: a hostile server names a different policy (of 9) in
// almost every answer to one route, with small quotas, exhausted ones and
// 429s, so that the route's policies change while its requests wait in
// their pacers' lines and holds. The SDK must not panic or deadlock. (It
// did: an attempt kept a turn per view it had been governed by, and the
// turns of the views it no longer was outgrew the one slot per view:
// index out of range in turns.add.)
func TestHuntPolicyChurnNoPanic(t *testing.T) {
	for _, adaptive := range []bool{false, true} {
		t.Run(fmt.Sprint("adaptive=", adaptive), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var k atomic.Int64
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					n := k.Add(1)
					name := fmt.Sprintf("p%d", n%9)
					rem := int(n*7919) % 4
					w.Header().Set("Ratelimit-Policy", fmt.Sprintf(`"%s";q=4;w=1`, name))
					w.Header().Set("Ratelimit", fmt.Sprintf(`"%s";r=%d;t=1`, name, rem))
					switch {
					case n%5 == 0:
						w.WriteHeader(429)
					case n%11 == 0:
						w.Header().Set("Retry-After", "1")
						w.WriteHeader(429)
					default:
						io.WriteString(w, "ok")
					}
				})
				opts := []Option{WithMaxWait(5 * time.Second)}
				if adaptive {
					opts = append(opts, WithAdaptiveRate())
				}
				c := &http.Client{Transport: NewTransport(handlerRT{h: h, latency: 20 * time.Millisecond}, opts...)}
				hammer(c, "http://churn.test/x", 50, 30*time.Second, 50*time.Millisecond)
				t.Logf("%d attempts", k.Load())
			})
		})
	}
}

// TestHuntEvictKeepsPacedHost: a host whose learned rate (WithAdaptiveRate)
// has 30 callers waiting in its pacer's line has nothing in flight, and so
// counted as having nothing to enforce: when 1100 other hosts (called
// and answered 100 at a time) filled the table, it was forgotten with the
// idle ones, and a new request to it went out at once,
// past the line (the host refuses it). It must wait behind the line.
func TestHuntEvictKeepsPacedHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &flipServer{}
		c := &http.Client{Transport: NewTransport(handlerRT{h: s, latency: 20 * time.Millisecond}, WithAdaptiveRate())}
		adaptiveWarm(t, c, s, "http://adaptive.test/x")
		var wg sync.WaitGroup
		for range 30 {
			wg.Go(func() {
				if resp, err := c.Get("http://adaptive.test/x"); err == nil {
					resp.Body.Close()
				}
			})
		}
		time.Sleep(time.Millisecond) // all in line, none sent
		for b := range 11 {          // in batches: the hosts of the earlier ones are idle
			var others sync.WaitGroup
			for i := range 100 {
				others.Go(func() {
					if resp, err := c.Get(fmt.Sprintf("http://other%d.test/x", b*100+i)); err == nil {
						resp.Body.Close()
					}
				})
			}
			others.Wait()
		}
		t0 := time.Now()
		resp, err := c.Get("http://adaptive.test/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		waited := time.Since(t0)
		wg.Wait()
		t.Logf("a request to the paced host after 1100 others: answered after %v", waited)
		if waited < time.Second {
			t.Errorf("answered after %v: the host's learned rate and line were forgotten (30 callers ahead at ~14/s)", waited)
		}
	})
}

// TestHuntRetryKnowsHold: request A is in flight when B's answer, a 429
// with Retry-After: 10, holds the host for 10 s. A's answer is a bare 429
// (a backoff of about 1 s); A's deadline is 3 s out, and with MaxWait 5 s
// neither could be waited out anyway. The SDK knows when A's answer comes
// that its retry cannot start in time: it must return A's 429 then, not
// after sleeping its backoff first.
func TestHuntRetryKnowsHold(t *testing.T) {
	for _, tc := range []struct {
		name     string
		deadline time.Duration
		maxWait  time.Duration
		giveUp   string
	}{
		{"deadline", 3 * time.Second, time.Minute, GiveUpDeadline},
		{"maxwait", time.Hour, 5 * time.Second, GiveUpMaxWait},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				var ups []string
				hook := func(ev RetryEvent) {
					if ev.GiveUp != "" && ev.Request.URL.Path == "/a" {
						mu.Lock()
						ups = append(ups, ev.GiveUp)
						mu.Unlock()
					}
				}
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/a" {
						time.Sleep(100 * time.Millisecond)
					} else {
						w.Header().Set("Retry-After", "10")
					}
					w.WriteHeader(http.StatusTooManyRequests)
				})
				c := &http.Client{Transport: NewTransport(handlerRT{h: h, latency: 20 * time.Millisecond},
					WithRetryHook(hook), WithMaxWait(tc.maxWait))}
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), tc.deadline)
				defer cancel()
				var wg sync.WaitGroup
				var took time.Duration
				wg.Go(func() {
					req, _ := http.NewRequestWithContext(ctx, "GET", "http://hold.test/a", nil)
					resp, err := c.Do(req)
					took = time.Since(start)
					if err != nil {
						t.Errorf("A: %v, want its 429", err)
						return
					}
					if resp.StatusCode != 429 {
						t.Errorf("A: %d, want its 429", resp.StatusCode)
					}
					resp.Body.Close()
				})
				time.Sleep(10 * time.Millisecond)
				if resp, err := c.Get("http://hold.test/b"); err == nil {
					resp.Body.Close()
				}
				wg.Wait()
				t.Logf("A returned after %v, give-ups %v", took, ups)
				if took > 150*time.Millisecond {
					t.Errorf("A returned after %v: it slept its backoff though the host's hold passed its %s", took, tc.name)
				}
				if len(ups) != 1 || ups[0] != tc.giveUp {
					t.Errorf("give-ups %v, want [%s]", ups, tc.giveUp)
				}
			})
		})
	}
}

// TestHuntAdaptiveUnheldCutsOnce: a host with two policies; route /c is
// known to be policy c's, and c has admitted 20/s for 2 s. Then 24
// callers at once send to /c2, a route of c not known yet, and each is
// refused with a bare 429 whose problem document names c. One congestion
// event cuts the rate once: each of those answers, to requests sent before
// the cut, cut it again (they were taken as sent when answered), to the
// floor of 0.5/s. Afterwards c's routes must still get about the cut
// rate (0.7 x 20/s), not a crawl from the floor.
func TestHuntAdaptiveUnheldCutsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var refuse atomic.Bool
		var okC atomic.Int32
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			name := strings.TrimPrefix(r.URL.Path, "/")
			if name == "c2" {
				name = "c"
			}
			if refuse.Load() && r.URL.Path == "/c2" {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusTooManyRequests)
				io.WriteString(w, `{"type":"about:blank","status":429,"violated-policies":["c"]}`)
				return
			}
			w.Header().Set("Ratelimit-Policy", fmt.Sprintf(`"%s";q=1000;w=1`, name))
			w.Header().Set("Ratelimit", fmt.Sprintf(`"%s";r=900;t=1`, name))
			if name == "c" {
				okC.Add(1)
			}
			io.WriteString(w, "ok")
		})
		c := &http.Client{Transport: NewTransport(handlerRT{h: h, latency: 20 * time.Millisecond}, WithAdaptiveRate(), WithMaxAttempts(1))}
		get := func(path string) {
			if resp, err := c.Get("http://two.test" + path); err == nil {
				resp.Body.Close()
			}
		}
		get("/a")
		get("/b")
		for range 40 {
			get("/c")
			time.Sleep(30 * time.Millisecond)
		}
		refuse.Store(true)
		var wg sync.WaitGroup
		for range 24 {
			wg.Go(func() { get("/c2") })
		}
		wg.Wait()
		okC.Store(0)
		start := time.Now()
		for range 8 {
			wg.Go(func() {
				for time.Since(start) < 3*time.Second {
					get("/c")
				}
			})
		}
		wg.Wait()
		rate := float64(okC.Load()) / 3
		t.Logf("policy c after the crowd's 24 bare 429s: %.1f/s", rate)
		if rate < 7 {
			t.Errorf("policy c paced at %.1f/s after one congestion event, want about 14/s: every refusal of the crowd cut the rate", rate)
		}
	})
}

// TestHuntSlideThenRestore: a fixed window of 10 per second whose resets
// are rounded up to whole seconds (as X-RateLimit-Reset and the draft's t
// are), in the order of a failing run of TestConcurrentFixedWindow (1 in
// about 15 under -race): a crowd of 8 answered at 1.004 s, 2 more at
// 1.006 s, the last leaving Remaining 0. At 2.004 s the slide gives the 8
// back (their resets), and 8 go out; at 2.006 s, none of them answered
// yet, the quota's reset restored a whole quota on top of them, and the
// window [2 s, 3 s) was sent 18 requests for 10. It must be sent 10.
func TestHuntSlideThenRestore(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	v := newView("", 0, 0, false)
	admit := func(now time.Time) (ticket, bool) {
		v.mu.Lock()
		defer v.mu.Unlock()
		if v.waitLocked(now) > 0 {
			return ticket{}, false
		}
		return v.admitLocked(now), true
	}
	answer := func(tk ticket, now time.Time, rem int) {
		in := header.Info{Limit: 10, Remaining: rem, Reset: time.Second, Has: header.HasLimit | header.HasRemaining | header.HasReset}
		v.observe(tk, now, 200, in, 0)
	}
	var crowd []ticket
	for range 8 {
		tk, ok := admit(at(1002))
		if !ok {
			t.Fatal("the first crowd was held")
		}
		crowd = append(crowd, tk)
	}
	for i, rem := range []int{8, 3, 2, 4, 5, 6, 7, 9} { // out of order, as a crowd's answers come
		answer(crowd[[]int{0, 2, 3, 1, 4, 5, 6, 7}[i]], at(1004), rem)
	}
	a, _ := admit(at(1004))
	b, _ := admit(at(1004))
	answer(b, at(1006), 1)
	answer(a, at(1006), 0)
	sent := 0
	for _, ms := range []int{2004, 2006, 2100, 2500, 2999} {
		for {
			if _, ok := admit(at(ms)); !ok {
				break
			}
			sent++
			if sent > 30 {
				break
			}
		}
	}
	if sent > 10 {
		t.Errorf("%d requests admitted in the window [2 s, 3 s) of 10 (none answered yet)", sent)
	}
}
