//go:build go1.25

package sdk

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// queued is one request of a crowd sharing a Transport: who sent it, when
// it started (RoundTrip called) and ended, and whether it succeeded.
type queued struct {
	caller     int
	start, end time.Duration
	ok         bool
	refused    bool          // the server refused an attempt the SDK let go after the first second
	backoff    time.Duration // the backoffs of its retries of bare 429s (see TestAdaptiveReleaseOrder)
}

// refusedKey is the context key under which crowdRun's requests carry
// what the retry hook tells of them.
type refusedKey struct{}

// refusals is what the retry hook tells of one request of crowdRun.
type refusals struct {
	refused atomic.Bool  // refused after the first second
	backoff atomic.Int64 // the backoffs of its retries of bare 429s, ns
}

// crowdRun runs callers goroutines, each sending GETs one after another
// for dur (virtual time) through one Transport (with opts) against a, and
// returns every request, in the order they ended.
func crowdRun(t *testing.T, callers int, dur time.Duration, a *api, opts ...Option) []queued {
	var out []queued
	synctest.Test(t, func(t *testing.T) {
		begin := time.Now()
		a.now = time.Now
		hook := func(ev RetryEvent) {
			if ev.Reason != RateLimited || ev.GiveUp != "" {
				return
			}
			r := ev.Request.Context().Value(refusedKey{}).(*refusals)
			if time.Since(begin) > time.Second {
				r.refused.Store(true)
			}
			if ev.Limit == (RateLimit{}) { // a bare 429
				r.backoff.Add(int64(ev.Delay))
			}
		}
		opts = append(opts, WithRetryHook(hook))
		c := &http.Client{Transport: NewTransport(handlerRT{h: a, latency: 20 * time.Millisecond}, opts...)}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for g := range callers {
			wg.Go(func() {
				for time.Since(begin) < dur {
					q := queued{caller: g, start: time.Since(begin)}
					var r refusals
					req, _ := http.NewRequestWithContext(context.WithValue(context.Background(), refusedKey{}, &r),
						"GET", "http://api.test/items", nil)
					resp, err := c.Do(req)
					q.end, q.refused = time.Since(begin), r.refused.Load()
					q.backoff = time.Duration(r.backoff.Load())
					if err == nil {
						q.ok = resp.StatusCode == http.StatusOK
						resp.Body.Close()
					}
					mu.Lock()
					out = append(out, q)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	})
	return out
}

// overtaken counts the pairs of requests, both started after from, where
// the later one (by start) ended more than by before the earlier one: the
// crowd's release order, in pairs out of arrival order. The requests the
// server refused after the SDK let them go are not counted (refused
// counts them): the wait the refusal asks for is made out of line, and
// the requests behind go meanwhile.
func overtaken(rs []queued, from, by time.Duration) (n, refused int) {
	var late []queued
	for _, r := range rs {
		if r.refused {
			refused++
			continue
		}
		if r.start >= from && r.end-r.start > by {
			late = append(late, r)
		}
	}
	slices.SortFunc(late, func(a, b queued) int { return int(a.start - b.start) })
	for i, a := range late {
		for _, b := range late[i+1:] {
			if b.start > a.start && b.end+by < a.end {
				n++
			}
		}
	}
	return n, refused
}

// crowdFigures sums up a crowd's run: the longest wait, how many times
// each caller was served in [from, to), and how many requests failed.
func crowdFigures(rs []queued, callers int, from, to time.Duration) (worst time.Duration, served []int, lost int) {
	served = make([]int, callers)
	for _, r := range rs {
		worst = max(worst, r.end-r.start)
		if !r.ok {
			lost++
		} else if r.end >= from && r.end < to {
			served[r.caller]++
		}
	}
	return worst, served, lost
}

// TestHoldReleasesInArrivalOrder: 200 callers share one Transport against
// a limit of 50 per 5 s (a sliding log, a fixed window, a token bucket of
// 10/s with a burst of 50), each sending requests back to back for a
// minute. The SDK holds them for the limit; it must let them go in the
// order they came (first come, first served): no request overtaken by a
// later one by more than a second, no request waiting much longer than
// the fair 200/50 x 5 s = 20 s (the SDK's pacing at the announced rate
// lets a window's limit go 10 per second rather than 50 at once after the
// second window, which costs the first callers back up to 5 s more),
// every caller served as often as any other
// (give or take one) from 10 s to 50 s, none lost, and none of the
// requests the SDK lets go after the first blind wave refused by the
// server (the SDK never lets more go than the limit holds, in whatever
// order the answers of a crowd come back: under the race detector they
// come back shuffled).
func TestHoldReleasesInArrivalOrder(t *testing.T) {
	const callers, limit, window = 200, 50, 5 * time.Second
	fair := time.Duration(callers/limit) * window
	for _, al := range []struct {
		name string
		mk   func() algorithm
	}{
		{"sliding", func() algorithm { return &slidingLog{limit: limit, window: window} }},
		{"fixed", func() algorithm { return &fixedWindow{limit: limit, window: window} }},
		{"bucket", func() algorithm { return &tokenBucket{limit: limit, window: window, burst: limit} }},
	} {
		t.Run(al.name, func(t *testing.T) {
			rs := crowdRun(t, callers, time.Minute, &api{algo: al.mk(), style: sluiceStyle})
			worst, served, lost := crowdFigures(rs, callers, fair/2, time.Minute-fair/2)
			// The first wave goes out blind, and its refusals are
			// retried after their Retry-After: counted from 1 s on.
			over, refused := overtaken(rs, time.Second, time.Second)
			t.Logf("%s: %d requests, longest wait %v (fair %v), served %d-%d times each in [10s,50s), %d pairs overtaken, %d lost, %d refused after 1 s",
				al.name, len(rs), worst, fair, slices.Min(served), slices.Max(served), over, lost, refused)
			if worst > fair*13/10 {
				t.Errorf("longest wait %v, want at most 1.3 x the fair %v", worst, fair)
			}
			if over > 0 {
				t.Errorf("%d pairs of requests released out of arrival order", over)
			}
			if d := slices.Max(served) - slices.Min(served); d > 1 {
				t.Errorf("callers served %d to %d times each: %d apart, want at most 1", slices.Min(served), slices.Max(served), d)
			}
			if lost > 0 {
				t.Errorf("%d requests lost", lost)
			}
			if refused > 0 {
				t.Errorf("the server refused %d requests the SDK let go after the first second", refused)
			}
		})
	}
}

// TestAdaptiveReleaseOrder: 50 callers share one Transport with
// WithAdaptiveRate against a token bucket of 10/s (a burst of 10) that
// answers bare 429s, each sending requests back to back for 30 s. The
// learned pace holds them in line, first come, first served: no request
// the server did not refuse after the first second is overtaken by a
// later one by more than a second, none is lost, and a request the server
// refused is overtaken by no more than a second past its own backoffs.
// (A request of the first, blind wave may be refused at every attempt
// while the rate is learned: about one run in 30; not counted.)
// The backoff of a bare 429's retry is the request's own wait (the
// BackOff is one per request), made out of line: kept in line, each
// refusal would stop every caller for its backoff (see
// docs/design/sdk.md, "Retries of bare 429s").
func TestAdaptiveReleaseOrder(t *testing.T) {
	const callers, dur = 50, 30 * time.Second
	rs := crowdRun(t, callers, dur, &api{algo: &tokenBucket{limit: 10, window: time.Second, burst: 10}, style: bareStyle},
		WithAdaptiveRate())
	worst, served, _ := crowdFigures(rs, callers, 5*time.Second, dur-5*time.Second)
	lost := 0
	for _, r := range rs {
		if !r.ok && r.start >= time.Second {
			lost++
		}
	}
	over, refused := overtaken(rs, time.Second, time.Second)
	past, backedOff := pastBackoff(rs, time.Second, time.Second)
	t.Logf("%d requests, longest wait %v, served %d-%d times each in [5s,25s), %d pairs overtaken, %d lost after 1 s, %d refused after 1 s; %d requests backed off, %d pairs overtaken past the backoff",
		len(rs), worst, slices.Min(served), slices.Max(served), over, lost, refused, backedOff, past)
	if over > 0 {
		t.Errorf("%d pairs of requests the server did not refuse released out of arrival order", over)
	}
	if past > 0 {
		t.Errorf("%d pairs of requests overtaken by more than a second past the overtaken one's backoffs", past)
	}
	if lost > 0 {
		t.Errorf("%d requests started after the first second lost", lost)
	}
}

// pastBackoff counts the pairs of requests, both started after from,
// where the later one (by start) ended more than by before the earlier
// one, less the earlier one's backoffs (see queued.backoff), and the
// requests that backed off.
func pastBackoff(rs []queued, from, by time.Duration) (n, backedOff int) {
	var late []queued
	for _, r := range rs {
		if r.backoff > 0 {
			backedOff++
		}
		if r.start >= from && r.end-r.start > by {
			late = append(late, r)
		}
	}
	slices.SortFunc(late, func(a, b queued) int { return int(a.start - b.start) })
	for i, a := range late {
		for _, b := range late[i+1:] {
			if b.start > a.start && b.end+by < a.end-a.backoff {
				n++
			}
		}
	}
	return n, backedOff
}
