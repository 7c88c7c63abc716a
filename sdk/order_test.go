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
	refused    bool // the server refused an attempt the SDK let go after the first second
}

// refusedKey is the context key under which crowdRun's requests carry
// where the retry hook marks them refused.
type refusedKey struct{}

// crowdRun runs callers goroutines, each sending GETs one after another
// for dur (virtual time) through one Transport (with opts) against a, and
// returns every request, in the order they ended.
func crowdRun(t *testing.T, callers int, dur time.Duration, a *api, opts ...Option) []queued {
	var out []queued
	synctest.Test(t, func(t *testing.T) {
		begin := time.Now()
		a.now = time.Now
		hook := func(ev RetryEvent) {
			if ev.Reason == RateLimited && ev.GiveUp == "" && time.Since(begin) > time.Second {
				ev.Request.Context().Value(refusedKey{}).(*atomic.Bool).Store(true)
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
					var refused atomic.Bool
					req, _ := http.NewRequestWithContext(context.WithValue(context.Background(), refusedKey{}, &refused),
						"GET", "http://api.test/items", nil)
					resp, err := c.Do(req)
					q.end, q.refused = time.Since(begin), refused.Load()
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
