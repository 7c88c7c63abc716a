//go:build go1.25

package sdk

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Pacing and learning measured against exact fake limiters in
// virtual time (synctest). Each run reports attempts the server refused,
// successes per second and lost requests (an error or a final non-200).

// slidingLog admits limit requests in any trailing window (a sliding log).
type slidingLog struct {
	limit  int
	window time.Duration
	log    []time.Time
}

func (s *slidingLog) admit(now time.Time) verdict {
	cut := now.Add(-s.window)
	i := 0
	for i < len(s.log) && !s.log[i].After(cut) {
		i++
	}
	s.log = s.log[i:]
	v := verdict{limit: s.limit, window: s.window}
	if len(s.log) < s.limit {
		s.log = append(s.log, now)
		v.ok = true
	} else {
		v.retryAfter = s.log[0].Add(s.window).Sub(now)
	}
	v.remaining = s.limit - len(s.log)
	if len(s.log) > 0 {
		v.reset = s.log[len(s.log)-1].Add(s.window).Sub(now)
	}
	return v
}

// switching changes the algorithm at given offsets from start.
type switching struct {
	start time.Time
	at    []time.Duration
	algos []algorithm // algos[0] before at[0], algos[i+1] after at[i]
}

func (s *switching) admit(now time.Time) verdict {
	i := 0
	for i < len(s.at) && now.Sub(s.start) >= s.at[i] {
		i++
	}
	return s.algos[i].admit(now)
}

type paceRun struct {
	ok, refused, lost int
	lostErr           []string
	okAt              []time.Duration
	noAt              []time.Duration
}

func (r *paceRun) okPerSec(from, to time.Duration) float64 {
	n := 0
	for _, d := range r.okAt {
		if d >= from && d < to {
			n++
		}
	}
	return float64(n) / (to - from).Seconds()
}

func (r *paceRun) refusedIn(from, to time.Duration) int {
	n := 0
	for _, d := range r.noAt {
		if d >= from && d < to {
			n++
		}
	}
	return n
}

// paceDrive runs n goroutines sending GETs to path(i) as fast as the SDK lets
// them for dur, through c, and counts lost requests. Requests carry no
// deadline: every one started must end in a 200.
func paceDrive(c *http.Client, n int, dur time.Duration, url func(g, i int) string) (lost int, errs []string) {
	start := time.Now()
	var mu sync.Mutex
	var lostN atomic.Int32
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() {
			for i := 0; time.Since(start) < dur; i++ {
				req, _ := http.NewRequestWithContext(context.Background(), "GET", url(g, i), nil)
				resp, err := c.Do(req)
				if err != nil {
					lostN.Add(1)
					mu.Lock()
					if len(errs) < 5 {
						errs = append(errs, err.Error())
					}
					mu.Unlock()
					time.Sleep(10 * time.Millisecond)
					continue
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					lostN.Add(1)
					mu.Lock()
					if len(errs) < 5 {
						errs = append(errs, fmt.Sprintf("final status %d at %v", resp.StatusCode, time.Since(start)))
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return int(lostN.Load()), errs
}

func paceCollect(a *api, start time.Time) *paceRun {
	r := &paceRun{}
	for _, h := range a.Hits() {
		if h.status == 200 {
			r.ok++
			r.okAt = append(r.okAt, h.at.Sub(start))
		} else {
			r.refused++
			r.noAt = append(r.noAt, h.at.Sub(start))
		}
	}
	return r
}

// paceOne runs one scenario in a bubble and returns its figures.
func paceOne(t *testing.T, n int, dur time.Duration, st style, mk func(start time.Time) algorithm, opts ...Option) *paceRun {
	var run *paceRun
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		a := &api{now: time.Now, algo: mk(start), style: st}
		c := &http.Client{Transport: NewTransport(handlerRT{h: a, latency: 20 * time.Millisecond}, opts...)}
		lost, errs := paceDrive(c, n, dur, func(g, i int) string { return "http://api.test/items" })
		run = paceCollect(a, start)
		run.lost, run.lostErr = lost, errs
	})
	return run
}

func paceCheck(t *testing.T, name string, r *paceRun, wantOK float64, from, to time.Duration, maxRefusedShare float64) {
	t.Helper()
	// The first round trip goes out before any answer: its refusals are
	// unavoidable, so the share counts from the first second on.
	att := r.ok + r.refused
	late := r.refusedIn(time.Second, time.Hour)
	share := float64(late) / float64(max(att-r.refusedIn(0, time.Second), 1))
	okps := r.okPerSec(from, to)
	t.Logf("%s: %d attempts, %d refused, %d after 1s (%.1f%%), %.2f ok/s in [%v,%v) (announced %.2f), %d lost %v",
		name, att, r.refused, late, 100*share, okps, from, to, wantOK, r.lost, r.lostErr)
	if share > maxRefusedShare {
		t.Errorf("%s: %.1f%% of attempts refused, want at most %.0f%%", name, 100*share, 100*maxRefusedShare)
	}
	if okps < 0.9*wantOK {
		t.Errorf("%s: %.2f ok/s, want at least 90%% of the announced %.2f", name, okps, wantOK)
	}
	if r.lost > 0 {
		t.Errorf("%s: %d requests lost: %v", name, r.lost, r.lostErr)
	}
}

// TestPacingSteady: fixed window, token bucket and sliding log, each
// with honest headers in two dialects, 1, 8 and 64 goroutines, a minute.
func TestPacingSteady(t *testing.T) {
	algos := []struct {
		name string
		mk   func(time.Time) algorithm
		rate float64
	}{
		{"fixed100/10s", func(time.Time) algorithm { return &fixedWindow{limit: 100, window: 10 * time.Second} }, 10},
		{"bucket10/s,b10", func(time.Time) algorithm { return &tokenBucket{limit: 10, window: time.Second, burst: 10} }, 10},
		{"bucket600/min,b20", func(time.Time) algorithm { return &tokenBucket{limit: 600, window: time.Minute, burst: 20} }, 10},
		{"sliding50/5s", func(time.Time) algorithm { return &slidingLog{limit: 50, window: 5 * time.Second} }, 10},
	}
	for _, al := range algos {
		for _, st := range []style{sluiceStyle, legacyStyle, draftStyle} {
			for _, n := range []int{1, 8, 64} {
				name := fmt.Sprintf("%s/%v/n%d", al.name, st, n)
				t.Run(name, func(t *testing.T) {
					r := paceOne(t, n, time.Minute, st, al.mk)
					paceCheck(t, name, r, al.rate, 10*time.Second, 60*time.Second, 0.05)
				})
			}
		}
	}
}

// paceMulti runs a scenario against any handler in a bubble.
func paceMulti(t *testing.T, n int, dur time.Duration, h http.Handler, url func(g, i int) string, opts ...Option) (lost int, errs []string) {
	synctest.Test(t, func(t *testing.T) {
		c := &http.Client{Transport: NewTransport(handlerRT{h: h, latency: 20 * time.Millisecond}, opts...)}
		lost, errs = paceDrive(c, n, dur, url)
	})
	return
}

// TestPacingLimitChanges: a fixed window of 100/10s drops to 30/10s at 20 s
// and rises to 200/10s at 40 s (Sluice headers).
func TestPacingLimitChanges(t *testing.T) {
	for _, kind := range []string{"fixed", "bucket"} {
		for _, n := range []int{1, 8} {
			name := fmt.Sprintf("%s/n%d", kind, n)
			t.Run(name, func(t *testing.T) {
				r := paceOne(t, n, time.Minute, sluiceStyle, func(start time.Time) algorithm {
					if kind == "fixed" {
						return &switching{start: start, at: []time.Duration{20 * time.Second, 40 * time.Second}, algos: []algorithm{
							&fixedWindow{limit: 100, window: 10 * time.Second}, &fixedWindow{limit: 30, window: 10 * time.Second}, &fixedWindow{limit: 200, window: 10 * time.Second}}}
					}
					return &switching{start: start, at: []time.Duration{20 * time.Second, 40 * time.Second}, algos: []algorithm{
						&tokenBucket{limit: 10, window: time.Second, burst: 10}, &tokenBucket{limit: 3, window: time.Second, burst: 3}, &tokenBucket{limit: 20, window: time.Second, burst: 20}}}
				})
				paceCheck(t, name+" phase1", r, 10, 0, 20*time.Second, 0.05)
				lowOK := r.okPerSec(20*time.Second, 40*time.Second)
				highOK := r.okPerSec(40*time.Second, 60*time.Second)
				lowNo := r.refusedIn(20*time.Second, 40*time.Second)
				highNo := r.refusedIn(40*time.Second, 60*time.Second)
				t.Logf("lowered (3/s): %.2f ok/s, %d refused; raised (20/s): %.2f ok/s, %d refused", lowOK, lowNo, highOK, highNo)
				if lowOK < 2.7 || highOK < 18 {
					t.Errorf("after a change: %.2f ok/s at 3/s, %.2f ok/s at 20/s; want at least 90%%", lowOK, highOK)
				}
				if lowNo > 10+n || highNo > 10+n {
					t.Errorf("refusals after a change: %d lowered, %d raised; want at most %d", lowNo, highNo, 10+n)
				}
			})
		}
	}
}

// TestPacingTwoRoutes: /a is a token bucket of 5/s (policy "a"), /b a token
// bucket of 20/s (policy "b"); half the goroutines on each.
func TestPacingTwoRoutes(t *testing.T) {
	for _, n := range []int{2, 8, 64} {
		t.Run(fmt.Sprintf("n%d", n), func(t *testing.T) {
			var a, b *api
			var start time.Time
			synctest.Test(t, func(t *testing.T) {
				start = time.Now()
				a = &api{now: time.Now, algo: &tokenBucket{limit: 5, window: time.Second, burst: 5}, name: "a"}
				b = &api{now: time.Now, algo: &tokenBucket{limit: 20, window: time.Second, burst: 20}, name: "b"}
				c := &http.Client{Transport: NewTransport(handlerRT{h: routed{"/a": a, "/b": b}, latency: 20 * time.Millisecond})}
				lost, errs := paceDrive(c, n, time.Minute, func(g, i int) string {
					if g%2 == 0 {
						return "http://api.test/a"
					}
					return "http://api.test/b"
				})
				if lost > 0 {
					t.Errorf("%d lost: %v", lost, errs)
				}
			})
			ra, rb := paceCollect(a, start), paceCollect(b, start)
			paceCheck(t, "route a (5/s)", ra, 5, 5*time.Second, 60*time.Second, 0.05)
			paceCheck(t, "route b (20/s)", rb, 20, 5*time.Second, 60*time.Second, 0.05)
		})
	}
}

// TestPacingAdaptive: a token bucket answering bare 429s; WithAdaptiveRate
// should settle near its rate, few refusals, then follow a raise.
func TestPacingAdaptive(t *testing.T) {
	for _, rt := range []int{10, 50} {
		for _, n := range []int{1, 8, 64} {
			name := fmt.Sprintf("rate%d/n%d", rt, n)
			t.Run(name, func(t *testing.T) {
				r := paceOne(t, n, 90*time.Second, bareStyle, func(start time.Time) algorithm {
					return &switching{start: start, at: []time.Duration{60 * time.Second}, algos: []algorithm{
						&tokenBucket{limit: rt, window: time.Second, burst: rt}, &tokenBucket{limit: 4 * rt, window: time.Second, burst: 4 * rt}}}
				}, WithAdaptiveRate())
				att := func(from, to time.Duration) int {
					k := 0
					for _, d := range r.okAt {
						if d >= from && d < to {
							k++
						}
					}
					return k + r.refusedIn(from, to)
				}
				okSteady := r.okPerSec(20*time.Second, 60*time.Second)
				noSteady := r.refusedIn(20*time.Second, 60*time.Second)
				okRaised := r.okPerSec(75*time.Second, 90*time.Second)
				t.Logf("%s: steady (20-60s) %.2f ok/s (true %d), %d of %d refused; raised to %d/s: %.2f ok/s at 75-90s, %d refused; %d lost %v",
					name, okSteady, rt, noSteady, att(20*time.Second, 60*time.Second), 4*rt, okRaised, r.refusedIn(60*time.Second, 90*time.Second), r.lost, r.lostErr)
				// A single goroutine's round trip (20 ms) caps it at 50/s.
				series := ""
				for s := time.Duration(0); s < 90*time.Second; s += 5 * time.Second {
					series += fmt.Sprintf(" [%v: %.1f ok/s %d no]", s, r.okPerSec(s, s+5*time.Second), r.refusedIn(s, s+5*time.Second))
				}
				t.Log(series)
				want := min(float64(rt), 50/float64(1)*float64(n))
				if okSteady < 0.7*want {
					t.Errorf("steady: %.2f ok/s, want at least 70%% of %.0f", okSteady, want)
				}
				if float64(noSteady) > 0.2*float64(att(20*time.Second, 60*time.Second)) {
					t.Errorf("steady: %d of %d refused, want at most 20%%", noSteady, att(20*time.Second, 60*time.Second))
				}
				wantR := min(float64(4*rt), 50*float64(n))
				if okRaised < 0.7*wantR {
					t.Errorf("after the raise: %.2f ok/s, want at least 70%% of %.0f", okRaised, wantR)
				}
				if r.lost > 0 {
					t.Errorf("%d lost: %v", r.lost, r.lostErr)
				}
			})
		}
	}
}

// TestPacingHostIsolation: one host throttles hard (bare 429s and a legacy
// bucket), another never does; the other host keeps the callers' pace.
func TestPacingHostIsolation(t *testing.T) {
	for _, opt := range []struct {
		name string
		opts []Option
	}{{"default", nil}, {"adaptive", []Option{WithAdaptiveRate()}}} {
		t.Run(opt.name, func(t *testing.T) {
			var free *api
			var start time.Time
			synctest.Test(t, func(t *testing.T) {
				start = time.Now()
				slow := &api{now: time.Now, algo: &tokenBucket{limit: 2, window: time.Second, burst: 2}, style: bareStyle}
				free = &api{now: time.Now, algo: &fixedWindow{limit: 1 << 30, window: time.Hour}, style: bareStyle}
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.Host == "slow.test" {
						slow.ServeHTTP(w, r)
					} else {
						free.ServeHTTP(w, r)
					}
				})
				c := &http.Client{Transport: NewTransport(handlerRT{h: h, latency: 20 * time.Millisecond}, opt.opts...)}
				paceDrive(c, 16, 20*time.Second, func(g, i int) string {
					if g%2 == 0 {
						return "http://slow.test/x"
					}
					return "http://free.test/x"
				})
			})
			r := paceCollect(free, start)
			okps := r.okPerSec(2*time.Second, 20*time.Second)
			t.Logf("free host: %.1f ok/s with 8 goroutines at 20 ms", okps)
			if okps < 0.9*8*50 {
				t.Errorf("free host slowed: %.1f ok/s, want about 400", okps)
			}
		})
	}
}

// TestPacingFirstWindow: 64 callers start together against a fixed window
// of 100 per 10 s. The first crowd's answers come back out of order, so the
// budget first falls to 0 (every answer counts the whole crowd as still
// ahead of it) and is restored, once the crowd has answered, to the lowest
// Remaining among them: the callers held meanwhile must be woken then, not
// at the reset, and every window is used in full, never more.
func TestPacingFirstWindow(t *testing.T) {
	for _, st := range []style{sluiceStyle, legacyStyle, draftStyle} {
		t.Run(st.String(), func(t *testing.T) {
			r := paceOne(t, 64, 40*time.Second, st, func(time.Time) algorithm {
				return &fixedWindow{limit: 100, window: 10 * time.Second}
			})
			for w := time.Duration(0); w < 40*time.Second; w += 10 * time.Second {
				if n := r.okPerSec(w, w+10*time.Second) * 10; n < 100 {
					t.Errorf("window [%v,%v): %.0f admitted, want the 100 the server allows", w, w+10*time.Second, n)
				}
			}
			paceCheck(t, "fixed100/10s/n64/"+st.String(), r, 10, 0, 40*time.Second, 0.05)
		})
	}
}

// TestPacingSharedQuota: two Transports (1 and 4 callers) share one quota
// of 50 per 5 s, a sliding log or a fixed window. Neither may count the
// quota as its own (see spentLog.slide): together they use it, and few
// attempts are refused.
func TestPacingSharedQuota(t *testing.T) {
	for _, kind := range []string{"sliding", "fixed"} {
		for _, st := range []style{sluiceStyle, legacyStyle} {
			name := fmt.Sprintf("%s50/5s/%v", kind, st)
			t.Run(name, func(t *testing.T) {
				var r *paceRun
				synctest.Test(t, func(t *testing.T) {
					start := time.Now()
					var algo algorithm = &slidingLog{limit: 50, window: 5 * time.Second}
					if kind == "fixed" {
						algo = &fixedWindow{limit: 50, window: 5 * time.Second}
					}
					a := &api{now: time.Now, algo: algo, style: st}
					var wg sync.WaitGroup
					var lost atomic.Int32
					var mu sync.Mutex
					var errs []string
					for k := range 2 {
						c := &http.Client{Transport: NewTransport(handlerRT{h: a, latency: 20 * time.Millisecond})}
						wg.Go(func() {
							n, e := paceDrive(c, 1+3*k, time.Minute, func(g, i int) string { return "http://api.test/items" })
							lost.Add(int32(n))
							mu.Lock()
							errs = append(errs, e...)
							mu.Unlock()
						})
					}
					wg.Wait()
					r = paceCollect(a, start)
					r.lost, r.lostErr = int(lost.Load()), errs
				})
				// Two clients that cannot see each other's requests: one may lose
				// every attempt of a request to the other's (each was told to
				// retry when the other took the slot), which MaxAttempts bounds
				// and this test does not hold them to.
				t.Logf("%s: %d requests ran out of attempts %v", name, r.lost, r.lostErr)
				r.lost = 0
				paceCheck(t, name, r, 10, 10*time.Second, time.Minute, 0.05)
			})
		}
	}
}

// TestPacingAdaptiveCrowd: 8 and 64 callers against a token bucket of
// 10/s that answers bare 429s (no hint at all). WithAdaptiveRate learns
// the rate: no request is lost, the host's 10/s is used (at least 90% of
// it from 10 s on) and few attempts are refused. The first wave (every
// caller at once, before any answer) is refused but for the bucket's 10.
func TestPacingAdaptiveCrowd(t *testing.T) {
	for _, n := range []int{8, 64} {
		name := fmt.Sprintf("bare10/s/n%d", n)
		t.Run(name, func(t *testing.T) {
			r := paceOne(t, n, time.Minute, bareStyle, func(time.Time) algorithm {
				return &tokenBucket{limit: 10, window: time.Second, burst: 10}
			}, WithAdaptiveRate())
			series := ""
			for s := time.Duration(0); s < time.Minute; s += 5 * time.Second {
				series += fmt.Sprintf(" [%v: %.1f ok/s %d no]", s, r.okPerSec(s, s+5*time.Second), r.refusedIn(s, s+5*time.Second))
			}
			t.Log(series)
			paceCheck(t, name, r, 10, 10*time.Second, time.Minute, 0.10)
			if ok := r.okPerSec(2*time.Second, 10*time.Second); ok < 0.7*10 {
				t.Errorf("%s: %.2f ok/s in [2s,10s), want at least 7", name, ok)
			}
		})
	}
}

// TestPacingAdaptiveRetryAfterProbe: the last attempt of a request refused
// at a probe of the learned rate (a bare 429 that cuts it) is admitted.
// Against a token bucket of 10/s the probes come about 1.9 s after each
// cut, where the learned rate has climbed back to where the host refused;
// a retry takes the first turn in line once its backoff is over, and a
// backoff about that long brought it to the next probe, to meet the
// host's empty bucket again (34 and 24 of about 250 such retries refused in
// 10 runs at each backoff here, before the empty turn that now comes
// before a last attempt, see call.gap). A constant backoff keeps every
// retry at that phase (the default one lands there about once in 18), and
// two attempts make every retry the last.
func TestPacingAdaptiveRetryAfterProbe(t *testing.T) {
	for _, bo := range []time.Duration{1700 * time.Millisecond, 1900 * time.Millisecond} {
		t.Run(bo.String(), func(t *testing.T) {
			var a *api
			var start time.Time
			synctest.Test(t, func(t *testing.T) {
				start = time.Now()
				a = &api{now: time.Now, algo: &tokenBucket{limit: 10, window: time.Second, burst: 10}, style: bareStyle}
				constant := func() backoff.BackOff { return backoff.NewConstantBackOff(bo) }
				c := &http.Client{Transport: NewTransport(handlerRT{h: a, latency: 20 * time.Millisecond},
					WithAdaptiveRate(), WithBackOff(constant), WithMaxAttempts(2))}
				taggedDrive(c, 16, time.Minute)
			})
			// The first wave's refusals (before the first second) cut the
			// rate once for all of them: their retries come after no
			// empty turn.
			again, retries := refusedAgain(a.Hits(), start.Add(time.Second))
			t.Logf("%d of %d last attempts after a refusal past the first second refused", again, retries)
			if again > 0 {
				t.Errorf("%d requests refused at a probe lost at their last attempt, want 0", again)
			}
		})
	}
}

// taggedDrive runs n goroutines sending GETs as fast as c lets them for
// dur, each request tagged with an X-Id header of its own.
func taggedDrive(c *http.Client, n int, dur time.Duration) {
	start := time.Now()
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() {
			for i := 0; time.Since(start) < dur; i++ {
				req, _ := http.NewRequestWithContext(context.Background(), "GET", "http://api.test/items", nil)
				req.Header.Set("X-Id", fmt.Sprintf("%d.%d", g, i))
				if resp, err := c.Do(req); err == nil {
					resp.Body.Close()
				}
			}
		})
	}
	wg.Wait()
}

// refusedAgain counts, among the attempts that follow an attempt of the
// same request (X-Id) refused at or after from, those refused too.
func refusedAgain(hits []hit, from time.Time) (again, retries int) {
	last := map[string]hit{}
	for _, h := range hits {
		id := h.header.Get("X-Id")
		if p, ok := last[id]; ok && p.status != 200 && !p.at.Before(from) {
			retries++
			if h.status != 200 {
				again++
			}
		}
		last[id] = h
	}
	return again, retries
}
