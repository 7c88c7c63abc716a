//go:build go1.25

package sdk

import (
	"fmt"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// TestRetryBudgetAlgorithm: first attempts earn Ratio, the floor earns
// MinPerSecond, nothing beyond Burst is saved, and a retry needs a whole
// token.
func TestRetryBudgetAlgorithm(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	b := newRetryBudget(RetryBudget{Ratio: 0.1, MinPerSecond: 0, Burst: 3})
	for i := 0; i < 3; i++ {
		if !b.withdraw(t0, transientRetry) {
			t.Fatalf("retry %d of a fresh budget of 3 refused", i)
		}
	}
	if b.withdraw(t0, transientRetry) {
		t.Fatal("fourth retry allowed with a burst of 3")
	}
	for i := 0; i < 9; i++ {
		b.deposit(t0)
	}
	if b.withdraw(t0, transientRetry) {
		t.Fatal("retry allowed after 9 requests at ratio 0.1")
	}
	b.deposit(t0)
	if !b.withdraw(t0, transientRetry) {
		t.Fatal("retry refused after 10 requests at ratio 0.1")
	}
	for i := 0; i < 1000; i++ {
		b.deposit(t0)
	}
	n := 0
	for b.withdraw(t0, transientRetry) {
		n++
	}
	if n != 3 {
		t.Errorf("%d retries saved from 1000 requests, want the burst of 3", n)
	}

	// The floor: 2 per second, earned in steps as small as the calls.
	f := newRetryBudget(RetryBudget{MinPerSecond: 2, Burst: 10})
	for f.withdraw(t0, transientRetry) {
	}
	now := t0
	got := 0
	for i := 0; i < 5000; i++ { // 5 s in 1 ms steps
		now = now.Add(time.Millisecond)
		if f.withdraw(now, transientRetry) {
			got++
		}
	}
	if got != 10 {
		t.Errorf("%d retries in 5s at 2/s, want 10", got)
	}
	// Idle for a year: no more than the burst, no overflow.
	now = now.Add(365 * 24 * time.Hour)
	got = 0
	for f.withdraw(now, transientRetry) {
		got++
	}
	if got != 10 {
		t.Errorf("%d retries after a year idle, want the burst of 10", got)
	}
	// A clock that goes back earns nothing and breaks nothing.
	if f.withdraw(now.Add(-time.Hour), transientRetry) {
		t.Error("retry earned by a clock going back")
	}

	// Hostile configurations neither panic nor overflow.
	for _, c := range []RetryBudget{
		{Ratio: math.NaN(), MinPerSecond: math.Inf(1), Burst: math.MaxInt},
		{Ratio: -1, MinPerSecond: -1, Burst: -5},
		{Ratio: 1e300, MinPerSecond: 1e300, Burst: 0},
	} {
		b := newRetryBudget(c)
		now := t0
		for i := 0; i < 100; i++ {
			now = now.Add(time.Duration(i) * time.Hour)
			b.deposit(now)
			b.withdraw(now, transientRetry)
			if b.tokens < 0 || b.tokens > b.max {
				t.Fatalf("%+v: tokens %d outside [0, %d]", c, b.tokens, b.max)
			}
		}
	}
}

// stormResult is what one run of the outage scenario measured.
type stormResult struct {
	firstDuring, retriesDuring int // attempts the server saw before recovery
	afterStarted, afterOK      int // requests sent after recovery, and of them 200s
	budgetGiveUps              int64
	ok, failed                 int
}

// runStorm runs goroutines that each send GETs one after the other, 200 ms
// apart, for 12 s, through one Transport, against an httptest server (real
// net/http over an in-memory network, in virtual time) that answers 503
// with no hint for the first 10 s and 200 after.
func runStorm(t *testing.T, goroutines int, opts ...Option) stormResult {
	const outage, run, think = 10 * time.Second, 12 * time.Second, 200 * time.Millisecond
	var r stormResult
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		recovered := start.Add(outage)
		var mu sync.Mutex
		seen := map[string]bool{}
		_, base := servePipe(t, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			id := req.URL.Query().Get("id")
			mu.Lock()
			retry := seen[id]
			seen[id] = true
			if time.Now().Before(recovered) {
				if retry {
					r.retriesDuring++
				} else {
					r.firstDuring++
				}
			}
			mu.Unlock()
			if time.Now().Before(recovered) {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.Write([]byte("ok"))
		}))
		var giveUps atomic.Int64
		opts = append(opts, WithRetryHook(func(ev RetryEvent) {
			if ev.GiveUp == GiveUpBudget {
				giveUps.Add(1)
			}
		}))
		c := &http.Client{Transport: NewTransport(base, opts...)}
		var wg sync.WaitGroup
		for g := 0; g < goroutines; g++ {
			wg.Go(func() {
				for i := 0; ; i++ {
					sent := time.Now()
					if sent.Sub(start) >= run {
						return
					}
					resp, err := c.Get(fmt.Sprintf("http://api.test/items?id=%d-%d", g, i))
					ok := err == nil && resp.StatusCode == 200
					if err == nil {
						resp.Body.Close()
					}
					mu.Lock()
					if ok {
						r.ok++
					} else {
						r.failed++
					}
					if !sent.Before(recovered) {
						r.afterStarted++
						if ok {
							r.afterOK++
						}
					}
					mu.Unlock()
					time.Sleep(think)
				}
			})
		}
		wg.Wait()
		r.budgetGiveUps = giveUps.Load()
	})
	return r
}

// TestRetryStorm is the scenario: 100 goroutines against a server
// that answers 503 for 10 s and then recovers. Without a budget, every
// request that fails is retried MaxAttempts-1 = 3 times: retries add 2.4
// to 3 times the requests' load on the failing server. With the default budget, retries during
// the outage are at most 10% of the requests plus the floor (1/s over the
// 10 s, and the burst of 100 a fresh host starts with); and every request
// sent after the recovery succeeds.
func TestRetryStorm(t *testing.T) {
	zeroJitter := WithBackOff(func() backoff.BackOff { // deterministic, the default's shape
		b := backoff.NewExponentialBackOff(backoff.WithRandomizationFactor(0))
		return b
	})
	without := runStorm(t, 100, zeroJitter, WithRetryBudget(nil))
	with := runStorm(t, 100, zeroJitter)
	for _, c := range []struct {
		name string
		r    stormResult
	}{{"no budget", without}, {"default budget", with}} {
		t.Logf("%s: during the outage %d requests and %d retries (%.2fx); after it %d/%d requests succeeded; %d budget give-ups; %d ok, %d failed in all",
			c.name, c.r.firstDuring, c.r.retriesDuring, float64(c.r.retriesDuring)/float64(c.r.firstDuring),
			c.r.afterOK, c.r.afterStarted, c.r.budgetGiveUps, c.r.ok, c.r.failed)
	}
	// Each failed request is retried 3 times; the retries of the requests
	// sent in the last 2.4 s of the outage land after it: about 2.4x.
	if x := float64(without.retriesDuring) / float64(without.firstDuring); x < 2 {
		t.Errorf("without a budget retries were %.2fx the requests; the scenario should show 2.4-3x", x)
	}
	b := DefaultRetryBudget
	bound := b.Ratio*float64(with.firstDuring) + b.MinPerSecond*10 + float64(b.Burst)
	if float64(with.retriesDuring) > bound {
		t.Errorf("with the budget, %d retries during the outage for %d requests; want at most %.0f (10%% + 1/s x 10s + burst %d)",
			with.retriesDuring, with.firstDuring, bound, b.Burst)
	}
	if with.retriesDuring == 0 || with.budgetGiveUps == 0 {
		t.Errorf("the budget should allow some retries and refuse others: %d retries, %d give-ups", with.retriesDuring, with.budgetGiveUps)
	}
	for _, r := range []stormResult{without, with} {
		if r.afterStarted == 0 || r.afterOK != r.afterStarted {
			t.Errorf("%d of %d requests sent after the recovery succeeded, want all", r.afterOK, r.afterStarted)
		}
	}
}

// TestRetryStormLoopback is TestRetryStorm on real sockets and the real
// clock, shortened: 100 goroutines against an httptest server on loopback
// that answers 503 for 1 s. It asserts counts only (never timings), with a
// budget whose burst is small, so that the 10% share is what bounds it.
func TestRetryStormLoopback(t *testing.T) {
	const outage, run, think = time.Second, 1500 * time.Millisecond, 20 * time.Millisecond
	start := time.Now()
	recovered := start.Add(outage)
	var mu sync.Mutex
	seen := map[string]bool{}
	var first, retries int
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		id := req.URL.Query().Get("id")
		down := time.Now().Before(recovered)
		mu.Lock()
		if down {
			if seen[id] {
				retries++
			} else {
				first++
			}
		}
		seen[id] = true
		mu.Unlock()
		if down {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok"))
	}))
	budget := RetryBudget{Ratio: 0.1, MinPerSecond: 1, Burst: 10}
	base := &http.Transport{MaxIdleConnsPerHost: 100}
	defer base.CloseIdleConnections()
	c := &http.Client{Transport: NewTransport(base, WithRetryBudget(&budget), WithBackOff(func() backoff.BackOff {
		return backoff.NewConstantBackOff(50 * time.Millisecond) // several retries fit in the outage
	}))}
	var after, afterOK atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 100; g++ {
		wg.Go(func() {
			for i := 0; time.Since(start) < run; i++ {
				sent := time.Now()
				resp, err := c.Get(fmt.Sprintf("%s/?id=%d-%d", srv.URL, g, i))
				ok := err == nil && resp.StatusCode == 200
				if err == nil {
					resp.Body.Close()
				}
				if !sent.Before(recovered) {
					after.Add(1)
					if ok {
						afterOK.Add(1)
					}
				}
				time.Sleep(think)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	// The requests in flight at the recovery (at most one per goroutine)
	// earned their share during the outage but reached the server after it.
	bound := budget.Ratio*float64(first+100) + budget.MinPerSecond*time.Since(start).Seconds() + float64(budget.Burst)
	t.Logf("loopback: during the 1 s outage %d requests and %d retries (%.2fx, bound %.0f); after it %d/%d succeeded",
		first, retries, float64(retries)/float64(first), bound, afterOK.Load(), after.Load())
	if float64(retries) > bound {
		t.Errorf("%d retries for %d requests, want at most %.0f", retries, first, bound)
	}
	if after.Load() == 0 || afterOK.Load() != after.Load() {
		t.Errorf("%d of %d requests sent after the recovery succeeded, want all", afterOK.Load(), after.Load())
	}
}
