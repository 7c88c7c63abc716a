//go:build go1.25

package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestAdvCancelInLineFreesPlace: 20 callers queue in the adaptive pacer's
// line (about 14/s, one turn every 71 ms) in a known order; the first 10
// are cancelled 10 ms later. They must return at once with the context's
// error, and their places must be free: the 11th caller goes out at the
// first turn, not the 11th.
func TestAdvCancelInLineFreesPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &flipServer{}
		c := &http.Client{Transport: NewTransport(handlerRT{h: s, latency: 20 * time.Millisecond}, WithAdaptiveRate())}
		adaptiveWarm(t, c, s, "http://adaptive.test/x")
		time.Sleep(time.Millisecond)
		launch := time.Now()
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var mu sync.Mutex
		var cancelled []time.Duration
		var sent []time.Duration
		for i := range 20 {
			cx := context.Background()
			if i < 10 {
				cx = ctx
			}
			wg.Go(func() {
				req, _ := http.NewRequestWithContext(cx, "GET", "http://adaptive.test/x", nil)
				resp, err := c.Do(req)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					if !errors.Is(err, context.Canceled) {
						t.Errorf("caller %d: %v, want context.Canceled", i, err)
					}
					cancelled = append(cancelled, time.Since(launch))
					return
				}
				resp.Body.Close()
				sent = append(sent, time.Since(launch))
			})
			time.Sleep(time.Microsecond) // in order
		}
		time.Sleep(10 * time.Millisecond)
		cancel()
		wg.Wait()
		if len(cancelled) != 10 {
			t.Fatalf("%d callers cancelled, want 10", len(cancelled))
		}
		for _, d := range cancelled {
			if d > 11*time.Millisecond {
				t.Errorf("a cancelled caller returned at +%v, want at the cancel (+10ms)", d)
			}
		}
		first := sent[0]
		for _, d := range sent {
			first = min(first, d)
		}
		t.Logf("first of the remaining 10 answered at +%v; cancelled returned at %v", first, cancelled)
		if first > 150*time.Millisecond {
			t.Errorf("first remaining caller answered at +%v: the cancelled callers' places were not freed", first)
		}
	})
}

// TestAdvHostileHeaders: a server whose rate-limit headers lie or are
// hostile (negative, huge, NaN-like, Remaining above Limit, resets in the
// past or centuries ahead, a window of a billion seconds) on 429s and 200s
// alike. The SDK must not panic, never wait longer than MaxWait at once or
// a non-positive time, and not spin (a bounded number of waits per
// request), with and without WithAdaptiveRate.
func TestAdvHostileHeaders(t *testing.T) {
	far := strconv.FormatInt(time.Now().AddDate(500, 0, 0).Unix(), 10)
	past := strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10)
	farMs := strconv.FormatInt(time.Now().AddDate(500, 0, 0).UnixMilli(), 10)
	cases := map[string][]string{
		"retry-after negative":  {"Retry-After", "-1"},
		"retry-after huge":      {"Retry-After", "99999999999999999999999999"},
		"retry-after NaN":       {"Retry-After", "NaN"},
		"retry-after Inf":       {"Retry-After", "+Inf"},
		"retry-after exp":       {"Retry-After", "1e3"},
		"retry-after epoch":     {"Retry-After", far},
		"legacy negative":       {"X-Ratelimit-Limit", "-5", "X-Ratelimit-Remaining", "-3", "X-Ratelimit-Reset", "-10"},
		"legacy huge":           {"X-Ratelimit-Limit", "99999999999999999999", "X-Ratelimit-Remaining", "99999999999999999999", "X-Ratelimit-Reset", "99999999999999999999"},
		"remaining above limit": {"X-Ratelimit-Limit", "10", "X-Ratelimit-Remaining", "1000000", "X-Ratelimit-Reset", "1"},
		"reset in the past":     {"X-Ratelimit-Limit", "10", "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", past},
		"reset far epoch":       {"X-Ratelimit-Limit", "10", "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", far},
		"reset far epoch ms":    {"X-Ratelimit-Limit", "10", "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", farMs},
		"reset zero":            {"X-Ratelimit-Limit", "10", "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", "0"},
		"limit zero":            {"X-Ratelimit-Limit", "0", "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", "1"},
		"date ancient":          {"Date", "Thu, 01 Jan 1970 00:00:00 GMT", "X-Ratelimit-Limit", "10", "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", far},
		"policy huge window":    {"Ratelimit-Policy", `"p";q=1;w=999999999999999`, "Ratelimit", `"p";r=0;t=1`},
		"policy tiny window":    {"Ratelimit-Policy", `"p";q=999999999999999;w=1`, "Ratelimit", `"p";r=999999999999998;t=1`},
		"policy q=1 w=1e9":      {"Ratelimit-Policy", `"p";q=1;w=1000000000`, "Ratelimit", `"p";r=0;t=999999999`},
		"policy zero":           {"Ratelimit-Policy", `"p";q=0;w=0`, "Ratelimit", `"p";r=0;t=0`},
		"draft t huge":          {"Ratelimit-Policy", `"p";q=100;w=60`, "Ratelimit", `"p";r=0;t=999999999999999`},
		"draft r above q":       {"Ratelimit-Policy", `"p";q=2;w=1`, "Ratelimit", `"p";r=999999;t=1`},
	}
	for name, kv := range cases {
		for _, adaptive := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/adaptive=%v", name, adaptive), func(t *testing.T) {
				huntHostile(t, kv, adaptive)
			})
		}
	}
}

func huntHostile(t *testing.T, kv []string, adaptive bool) {
	clk := newFakeClock()
	const maxWait = 10 * time.Second
	var n atomic.Int64
	rt := rtFunc(func(r *http.Request) (*http.Response, error) {
		i := n.Add(1)
		resp := &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("x")), Request: r}
		if i%3 != 0 {
			resp.StatusCode = 429
		}
		for j := 0; j+1 < len(kv); j += 2 {
			resp.Header.Set(kv[j], kv[j+1])
		}
		return resp, nil
	})
	opts := []Option{WithClock(clk), WithMaxWait(maxWait)}
	if adaptive {
		opts = append(opts, WithAdaptiveRate())
	}
	tr := NewTransport(rt, opts...)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 30 {
			req, _ := http.NewRequest("GET", "http://hostile.test/x", nil)
			if resp, err := tr.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("30 requests did not finish in 5 s (spinning?): %d attempts, %d waits", n.Load(), len(clk.Sleeps()))
	}
	sl := clk.Sleeps()
	for _, d := range sl {
		if d <= 0 || d > maxWait {
			t.Errorf("a wait of %v (MaxWait %v)", d, maxWait)
			break
		}
	}
	if len(sl) > 30*20 {
		t.Errorf("%d waits for 30 requests (%d attempts): spinning", len(sl), n.Load())
	}
}

// TestAdvCrowdRateFlaps: 200 callers against a host that answers bare
// 429s and changes its rate every 3 s (20, 2, 40, 5, 10 per second), with
// WithAdaptiveRate: the learned rate changes at every answer and is cut
// at every congestion event while the crowd waits in line. No deadlock
// (synctest would report it), every caller served (no starvation), and
// no caller served much less than the others (fairness).
func TestAdvCrowdRateFlaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var at []time.Duration
		var algos []algorithm
		for i, r := range []int{20, 2, 40, 5, 10, 20, 2, 40, 5, 10, 20, 2, 40, 5, 10, 20, 2, 40, 5, 10} {
			if i > 0 {
				at = append(at, time.Duration(i)*3*time.Second)
			}
			algos = append(algos, &tokenBucket{limit: r, window: time.Second, burst: max(r/5, 1)})
		}
		a := &api{now: time.Now, algo: &switching{start: start, at: at, algos: algos}, style: bareStyle}
		c := &http.Client{Transport: NewTransport(handlerRT{h: a, latency: 20 * time.Millisecond}, WithAdaptiveRate())}
		const n = 200
		var ok [n]int
		var worst atomic.Int64
		var wg sync.WaitGroup
		for g := range n {
			wg.Go(func() {
				for time.Since(start) < time.Minute {
					t0 := time.Now()
					resp, err := c.Get("http://flap.test/x")
					if d := int64(time.Since(t0)); d > worst.Load() {
						worst.Store(d)
					}
					if err != nil {
						time.Sleep(100 * time.Millisecond)
						continue
					}
					resp.Body.Close()
					if resp.StatusCode == 200 {
						ok[g]++
					}
				}
			})
		}
		wg.Wait()
		lo, hi, sum := ok[0], ok[0], 0
		for _, k := range ok {
			lo, hi, sum = min(lo, k), max(hi, k), sum+k
		}
		t.Logf("%d successes (%.1f/s); per caller min %d max %d; slowest request %v; %d refused",
			sum, float64(sum)/60, lo, hi, time.Duration(worst.Load()), a.count(429))
		if lo == 0 {
			t.Errorf("a caller was never served in a minute")
		}
		if mean := float64(sum) / n; float64(lo) < mean/4 {
			t.Errorf("unfair: a caller served %d times, the mean is %.1f", lo, mean)
		}
	})
}

// TestAdvNoGoroutineLeak: through a real socket, requests that meet every
// path (a 429 with a problem document that stalls, a 503 with a body that
// never ends, a cancelled wait, a deadline too close, a replayed body, the
// adaptive pacer's line) leave no goroutine behind once their responses
// are closed and the server is gone.
func TestAdvNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		var n atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			switch n.Add(1) % 5 {
			case 0:
				w.Header().Set("Content-Type", "application/problem+json")
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(429)
				w.(http.Flusher).Flush()
				select { // the problem document stalls
				case <-r.Context().Done():
				case <-time.After(300 * time.Millisecond):
				}
			case 1:
				w.WriteHeader(503)
				w.(http.Flusher).Flush()
				for range 30 { // a body that keeps coming
					if _, err := io.WriteString(w, strings.Repeat("x", 4096)); err != nil {
						return
					}
					w.(http.Flusher).Flush()
					time.Sleep(10 * time.Millisecond)
				}
			case 2:
				w.WriteHeader(429) // bare
			default:
				io.WriteString(w, "ok")
			}
		}))
		defer srv.Close()
		base := &http.Transport{}
		defer base.CloseIdleConnections()
		c := &http.Client{Transport: NewTransport(base, WithAdaptiveRate(), WithMaxWait(500*time.Millisecond))}
		var wg sync.WaitGroup
		for i := range 40 {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(50+i*20)*time.Millisecond)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, "PUT", srv.URL+"/x", strings.NewReader("body"))
				if resp, err := c.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
	}()
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if after := runtime.NumGoroutine(); after > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines before, %d after:\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
}

// TestAdvBodiesAndIdempotency: 64 callers send PUTs, POSTs with and
// without an Idempotency-Key, and PATCHes, with bodies of their own, to a
// host that answers 503 (some with Retry-After), bare 429s and 429s with
// Retry-After at random, with WithAdaptiveRate. Every attempt the server
// sees carries the caller's exact body; a POST or PATCH without a key is
// never sent twice after a 503; every body the SDK hands back is readable.
func TestAdvBodiesAndIdempotency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		seen := map[string][]int{} // caller id -> statuses answered
		var bad []string
		var k atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			id := r.Header.Get("X-Id")
			status := 200
			switch k.Add(1) % 7 {
			case 1:
				status = 503
			case 2:
				status = 503
				w.Header().Set("Retry-After", "1")
			case 3:
				status = 429
			case 4:
				status = 429
				w.Header().Set("Retry-After", "2")
			}
			mu.Lock()
			if want := "body of " + id + strings.Repeat(".", len(id)*100); string(b) != want {
				bad = append(bad, fmt.Sprintf("%s: got %d bytes", id, len(b)))
			}
			seen[id] = append(seen[id], status)
			mu.Unlock()
			w.WriteHeader(status)
			fmt.Fprintf(w, "answer %d to %s", status, id)
		})
		c := &http.Client{Transport: NewTransport(handlerRT{h: h, latency: 20 * time.Millisecond}, WithAdaptiveRate(), WithMaxAttempts(6))}
		methods := []string{"PUT", "POST", "POST+key", "PATCH"}
		var wg sync.WaitGroup
		for g := range 64 {
			wg.Go(func() {
				for i := range 5 {
					id := fmt.Sprintf("%d-%d", g, i)
					m := methods[(g+i)%len(methods)]
					body := "body of " + id + strings.Repeat(".", len(id)*100)
					req, _ := http.NewRequest(strings.TrimSuffix(m, "+key"), "http://bodies.test/x", strings.NewReader(body))
					req.Header.Set("X-Id", id)
					if strings.HasSuffix(m, "+key") {
						req.Header.Set("Idempotency-Key", id)
					}
					resp, err := c.Do(req)
					if rl := (*RateLimitError)(nil); errors.As(err, &rl) && rl.StatusCode == 0 {
						continue // the learned rate's line is longer than MaxWait: not sent
					}
					if err != nil {
						t.Errorf("%s %s: %v", m, id, err)
						continue
					}
					got, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err != nil || !strings.HasPrefix(string(got), fmt.Sprintf("answer %d to %s", resp.StatusCode, id)) {
						t.Errorf("%s %s: body %q, %v", m, id, got, err)
					}
					mu.Lock()
					st := seen[id]
					mu.Unlock()
					if (m == "POST" || m == "PATCH") && len(st) > 1 && st[len(st)-2] == 503 {
						t.Errorf("%s %s without a key resent after a 503: %v", m, id, st)
					}
				}
			})
		}
		wg.Wait()
		if len(bad) > 0 {
			t.Errorf("%d attempts with a wrong body: %v", len(bad), bad[:min(len(bad), 5)])
		}
	})
}

// TestAdvHostileConcurrent: 40 callers for 10 s against hostile headers
// that set the pacer's arithmetic at its limits (a Limit of 1e20, windows
// of 1e15 s, a window of 1 s for 1e15 requests, Remaining 1e6 above a
// Limit of 10, a nanosecond reset, a reset in the year 2500), with and
// without WithAdaptiveRate: no panic, no deadlock.
func TestAdvHostileConcurrent(t *testing.T) {
	far := strconv.FormatInt(time.Date(2500, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), 10)
	cases := [][]string{
		{"X-Ratelimit-Limit", "99999999999999999999", "X-Ratelimit-Remaining", "1073741822", "X-Ratelimit-Reset", "1"},
		{"X-Ratelimit-Limit", "10", "X-Ratelimit-Remaining", "1000000", "X-Ratelimit-Reset", "1"},
		{"Ratelimit-Policy", `"p";q=999999999999999;w=1`, "Ratelimit", `"p";r=1073741000;t=1`},
		{"Ratelimit-Policy", `"p";q=1;w=9000000000`, "Ratelimit", `"p";r=0;t=1`},
		{"Ratelimit-Policy", `"p";q=3;w=999999999999999`, "Ratelimit", `"p";r=1;t=0`},
		{"Ratelimit-Policy", `"p";q=100;w=1`, "Ratelimit", `"p";r=98;t=999999999999999`},
		{"X-Ratelimit-Limit", "10", "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", far},
		{"X-Ratelimit-Limit", "1000000", "X-Ratelimit-Remaining", "3", "X-Ratelimit-Reset", "0.000000001"},
	}
	for ci, kv := range cases {
		for _, adaptive := range []bool{false, true} {
			t.Run(fmt.Sprint(ci, adaptive), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					var n atomic.Int64
					h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						i := n.Add(1)
						for j := 0; j+1 < len(kv); j += 2 {
							w.Header().Set(kv[j], kv[j+1])
						}
						if i%4 == 0 {
							w.WriteHeader(429)
						}
						io.WriteString(w, "x")
					})
					opts := []Option{WithMaxWait(3 * time.Second)}
					if adaptive {
						opts = append(opts, WithAdaptiveRate())
					}
					c := &http.Client{Transport: NewTransport(handlerRT{h: h, latency: 5 * time.Millisecond}, opts...)}
					calls := hammer(c, "http://h.test/x", 40, 10*time.Second, 10*time.Millisecond)
					t.Logf("%d calls, %d attempts", calls, n.Load())
				})
			})
		}
	}
}
