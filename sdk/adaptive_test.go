//go:build go1.25

package sdk

import (
	"context"
	"io"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/sdk/header"
)

// bareServer admits 20 requests a second (a token bucket of 20) and answers
// a bare 429 beyond: no Retry-After, no rate-limit header.
type bareServer struct {
	lim  *testBucket
	mu   sync.Mutex
	hits []hit
}

func (s *bareServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	ok := s.lim.AllowN(now, 1)
	status := http.StatusOK
	if !ok {
		status = http.StatusTooManyRequests
	}
	s.mu.Lock()
	s.hits = append(s.hits, hit{at: now, status: status})
	s.mu.Unlock()
	w.WriteHeader(status)
	io.WriteString(w, http.StatusText(status))
}

// adaptiveFigures runs 10 goroutines sending back to back for warm-up +
// measure through one Transport to a real-socket server that admits
// 20/s, and returns, over the measured part, the share of attempts
// refused and the successes per second.
func adaptiveFigures(t *testing.T, warm, measure time.Duration, opts ...Option) (refused float64, okPerSec float64, attempts int) {
	t.Helper()
	s := &bareServer{lim: newTestBucket(20, 20)}
	srv := serve(t, s)
	c := &http.Client{Transport: NewTransport(srv.Client().Transport, opts...)}
	start := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(warm+measure))
	defer cancel()
	var wg sync.WaitGroup
	var done atomic.Int32
	for range 10 {
		wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/items", nil)
				resp, err := c.Do(req)
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				done.Add(1)
			}
		})
	}
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	var ok, no int
	from, to := start.Add(warm), start.Add(warm+measure)
	for _, h := range s.hits {
		if h.at.Before(from) || !h.at.Before(to) {
			continue
		}
		if h.status == 200 {
			ok++
		} else {
			no++
		}
	}
	if ok+no == 0 {
		t.Fatal("no attempt in the measured part")
	}
	return float64(no) / float64(ok+no), float64(ok) / measure.Seconds(), ok + no
}

// TestAdaptiveRateBare429: against a real server that admits 20 requests a
// second and answers a bare 429 beyond, WithAdaptiveRate learns the rate:
// after a 2 s warm-up, at most 20% of attempts are refused and at least 14
// requests a second succeed. Without it (logged for comparison) the
// callers' rate decides, and most attempts are refused.
//
// Every refusal in the measured part is a probe past the rate: one per
// cut of the learned rate, a cut every 3 s or so (0-3 of 72-83 attempts).
// A run that misses is run again, up to three times, for a machine so
// loaded that the callers' timers fire late and fewer than 14 a second
// succeed. A client that does not learn the rate (99% refused) fails all
// three. (Runs of up to 58% refused were not the machine's: callers
// giving up their places in the view's line at the shared deadline let
// others out past the pace, up to 95 in the last 60 ms; see
// places.skipped and TestLineLeaverLetsNoOneSkipThePace.)
func TestAdaptiveRateBare429(t *testing.T) {
	const warm, measure = 2 * time.Second, 4 * time.Second
	var refused, okps float64
	for attempt := 1; attempt <= 3; attempt++ {
		late := timerLateness()
		var n int
		refused, okps, n = adaptiveFigures(t, warm, measure, WithAdaptiveRate())
		most := late()
		t.Logf("WithAdaptiveRate: %d attempts in %v after a %v warm-up, %.1f%% refused, %.1f successes/s (timers up to %v late)",
			n, measure, warm, 100*refused, okps, most.Round(time.Millisecond))
		if refused <= 0.20 && okps >= 14 {
			break
		}
	}
	if refused > 0.20 {
		t.Errorf("%.1f%% of attempts refused, want at most 20%%", 100*refused)
	}
	if okps < 14 {
		t.Errorf("%.1f successes/s, want at least 14", okps)
	}
	refused, okps, n := adaptiveFigures(t, warm, measure)
	t.Logf("without:          %d attempts in %v after a %v warm-up, %.1f%% refused, %.1f successes/s", n, measure, warm, 100*refused, okps)
}

// TestAdaptiveRateCurve: the learner's arithmetic, time passed in. Sending
// 20/s, a throttle cuts the rate to 0.7 x 20; throttles of requests sent
// before the cut do not cut again; the rate is back at 20 after K seconds
// and grows past it, never beyond twice the measured rate; a minute
// without a throttle ends the pacing.
func TestAdaptiveRateCurve(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	var a adaptiveRate
	now := t0
	step := 50 * time.Millisecond // 20 answers a second
	for range 40 {
		if ch, _, _ := a.observe(now, now, false, 0); ch {
			t.Fatal("pacing before any throttle")
		}
		now = now.Add(step)
	}
	if math.Abs(a.measured-20) > 0.5 {
		t.Fatalf("measured %.2f/s, want 20", a.measured)
	}
	ch, _, r := a.observe(now, now, true, 0)
	if !ch || math.Abs(r-14) > 0.5 || math.Abs(a.lastMax-20) > 0.5 {
		t.Fatalf("after a throttle: changed %v, rate %.2f, lastMax %.2f; want 14 and 20", ch, r, a.lastMax)
	}
	cut := now
	if ch, _, r2 := a.observe(now.Add(time.Millisecond), cut.Add(-time.Millisecond), true, 0); ch || r2 != r {
		t.Errorf("a throttle sent before the cut changed the rate to %.2f", r2)
	}
	k := math.Cbrt(20 * (1 - AdaptiveBeta) / AdaptiveScale)
	if math.Abs(a.k-k) > 0.05 {
		t.Errorf("K = %.3f, want %.3f", a.k, k)
	}
	// Successes at the paced rate: the curve climbs back to lastMax at K.
	var at time.Duration
	for at = 0; at < time.Duration(k*float64(time.Second)); at += 70 * time.Millisecond {
		a.observe(cut.Add(at), cut.Add(at), false, 0)
	}
	if math.Abs(a.rate-20) > 1 {
		t.Errorf("rate %.2f at K, want about 20", a.rate)
	}
	// Far past K the cubic term is large: capped at twice the measured rate.
	for ; at < 10*time.Second; at += 50 * time.Millisecond {
		a.observe(cut.Add(at), cut.Add(at), false, 0)
	}
	if cubic := AdaptiveScale*math.Pow(at.Seconds()-k, 3) + 20; a.rate >= cubic || a.rate > 2*a.measured+0.01 {
		t.Errorf("rate %.2f, want at most twice the measured %.2f (cubic %.1f)", a.rate, a.measured, cubic)
	}
	if ch, _, r := a.observe(cut.Add(AdaptiveForget), cut.Add(AdaptiveForget), false, 0); !ch || r != 0 || a.enabled {
		t.Errorf("a minute without a throttle: changed %v, rate %.2f; want pacing off", ch, r)
	}
	// The floor: a host that throttles everything still gets probes.
	var b adaptiveRate
	for i := range 30 {
		at := t0.Add(time.Duration(i) * time.Second)
		b.observe(at, at, true, 0)
	}
	if !b.enabled || b.rate != AdaptiveMinRate {
		t.Errorf("every answer throttled: rate %.2f, want the floor %.2f", b.rate, AdaptiveMinRate)
	}
}

// TestAdaptiveRateRecovers (virtual time): 10 goroutines against a host
// that admits 10/s and answers bare 429s beyond, for 20 s, and then stops
// limiting. The client sends about 10/s with few refusals while limited,
// and goes back to the callers' pace (hundreds a second) within seconds
// once the 429s stop. A host that never throttles is never slowed.
func TestAdaptiveRateRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		lim := newTestBucket(10, 10)
		var mu sync.Mutex
		var okAt, noAt []time.Duration
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			now := time.Now()
			el := now.Sub(start)
			mu.Lock()
			defer mu.Unlock()
			if el < 20*time.Second && !lim.AllowN(now, 1) {
				noAt = append(noAt, el)
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			okAt = append(okAt, el)
		})
		c := &http.Client{Transport: NewTransport(handlerRT{h: h, latency: 20 * time.Millisecond}, WithAdaptiveRate())}
		ctx, cancel := context.WithDeadline(context.Background(), start.Add(35*time.Second))
		defer cancel()
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() {
				for ctx.Err() == nil {
					req, _ := http.NewRequestWithContext(ctx, "GET", "http://api.test/", nil)
					if resp, err := c.Do(req); err == nil {
						resp.Body.Close()
					} else if ctx.Err() == nil {
						time.Sleep(10 * time.Millisecond)
					}
				}
			})
		}
		wg.Wait()
		count := func(at []time.Duration, from, to time.Duration) int {
			n := 0
			for _, d := range at {
				if d >= from && d < to {
					n++
				}
			}
			return n
		}
		ok, no := count(okAt, 5*time.Second, 20*time.Second), count(noAt, 5*time.Second, 20*time.Second)
		after := count(okAt, 25*time.Second, 35*time.Second)
		t.Logf("limited (5-20 s): %.1f ok/s, %d of %d attempts refused; recovered (25-35 s): %.0f ok/s",
			float64(ok)/15, no, ok+no, float64(after)/10)
		if float64(ok)/15 < 8 || no*5 > ok+no {
			t.Errorf("while limited: %.1f ok/s, %d of %d refused; want at least 8/s and at most 20%%", float64(ok)/15, no, ok+no)
		}
		if after < 2000 {
			t.Errorf("%d successes in the 10 s after the 429s stopped, want the callers' pace (at least 200/s)", after)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		var events atomic.Int32
		c := &http.Client{Transport: NewTransport(handlerRT{h: &scripted{}, latency: time.Millisecond},
			WithAdaptiveRate(), WithRetryHook(func(RetryEvent) { events.Add(1) }))}
		start := time.Now()
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() {
				if resp, err := c.Get("http://api.test/"); err == nil {
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
		if d := time.Since(start); d != time.Millisecond || events.Load() != 0 {
			t.Errorf("a host that never throttles: took %v with %d events, want 1ms and none", d, events.Load())
		}
	})
}

// timerLateness starts probing how late this process's 10 ms timers fire;
// the function it returns stops the probe and returns the most.
func timerLateness() func() time.Duration {
	stop, done := make(chan struct{}), make(chan time.Duration)
	go func() {
		most := time.Duration(0)
		for {
			start := time.Now()
			select {
			case <-stop:
				done <- most
				return
			case <-time.After(10 * time.Millisecond):
			}
			most = max(most, time.Since(start)-10*time.Millisecond)
		}
	}()
	return func() time.Duration { close(stop); return <-done }
}

// TestAdaptiveCutReported: a view says which answer cut its learned rate
// (the retry of that request leaves a turn empty before it, see call.cut):
// the first bare 429, and the next one sent after that cut; not a 429 of
// a request sent before the cut (the same congestion event), nor a 200,
// nor a 429 with a wait.
func TestAdaptiveCutReported(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	v := newView("", 0, 1, true)
	rtt := 20 * time.Millisecond
	answers := []struct {
		sent, at time.Time
		status   int
		in       header.Info
		cut      bool
	}{
		{t0, t0.Add(rtt), 429, header.Info{}, true},
		{t0.Add(time.Millisecond), t0.Add(rtt + time.Millisecond), 429, header.Info{}, false},
		{t0.Add(time.Second), t0.Add(time.Second + rtt), 200, header.Info{}, false},
		{t0.Add(2 * time.Second), t0.Add(2*time.Second + rtt), 429, header.Info{Has: header.HasRetryAfter, RetryAfter: time.Second}, false},
		{t0.Add(4 * time.Second), t0.Add(4*time.Second + rtt), 429, header.Info{}, true},
	}
	for i, a := range answers {
		if cut := v.observe(ticket{sent: a.sent}, a.at, a.status, a.in, 0); cut != a.cut {
			t.Errorf("answer %d (%d): cut %v, want %v", i, a.status, cut, a.cut)
		}
	}
}
