package sdk

import (
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/shared/header"
)

// queued is one request of a crowd sharing a Transport: who sent it, when
// it started (RoundTrip called) and ended, and whether it succeeded.
type queued struct {
	caller     int
	start, end time.Duration
	ok         bool
}

// crowd runs callers goroutines, each sending GETs one after another for
// dur (virtual time) through one Transport against algo, and returns every
// request, in the order they ended.
func crowd(t *testing.T, callers int, dur time.Duration, algo algorithm) []queued {
	var out []queued
	synctest.Test(t, func(t *testing.T) {
		begin := time.Now()
		a := &api{now: time.Now, algo: algo, style: sluiceStyle}
		c := &http.Client{Transport: NewTransport(handlerRT{h: a, latency: 20 * time.Millisecond})}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for g := range callers {
			wg.Go(func() {
				for time.Since(begin) < dur {
					q := queued{caller: g, start: time.Since(begin)}
					resp, err := c.Get("http://api.test/items")
					q.end = time.Since(begin)
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
// crowd's release order, in pairs out of arrival order.
func overtaken(rs []queued, from, by time.Duration) (n int) {
	var late []queued
	for _, r := range rs {
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
	return n
}

// TestHoldReleasesInArrivalOrder: 200 callers share one Transport against
// a limit of 50 per 5 s (a sliding log, a fixed window, a token bucket of
// 10/s with a burst of 50), each sending requests back to back for a
// minute. The SDK holds them for the limit; it must let them go in the
// order they came (first come, first served): no request overtaken by a
// later one by more than a second, no request waiting much longer than
// the fair 200/50 x 5 s = 20 s, every caller served as often as any other
// (give or take one) from 10 s to 50 s, and none lost.
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
			rs := crowd(t, callers, time.Minute, al.mk())
			served := make([]int, callers)
			var worst time.Duration
			lost := 0
			for _, r := range rs {
				worst = max(worst, r.end-r.start)
				if !r.ok {
					lost++
				} else if r.end >= fair/2 && r.end < time.Minute-fair/2 {
					served[r.caller]++ // the start and the end aside
				}
			}
			// The first wave goes out blind, and its refusals are
			// retried after their Retry-After: counted from 1 s on.
			over := overtaken(rs, time.Second, time.Second)
			t.Logf("%s: %d requests, longest wait %v (fair %v), served %d-%d times each in [10s,50s), %d pairs overtaken, %d lost",
				al.name, len(rs), worst, fair, slices.Min(served), slices.Max(served), over, lost)
			if worst > fair*5/4 {
				t.Errorf("longest wait %v, want at most 1.25 x the fair %v", worst, fair)
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
		})
	}
}

// TestLineAdmitsInOrder: a host's quota of 2 is spent until a reset 1 s
// away; requests a, b and c are held, in that order. At the reset the
// view admits 2 again: c, asking first, is kept back (queued) while b and
// a go, whatever the order they ask in, and a request that was never
// held (d) waits behind the line; c and d go at the next reset.
func TestLineAdmitsInOrder(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	h := (&hosts{}).get("line.test", t0, nil, false)
	var rs routes
	answer := func(remaining int) {
		var g governing
		var pl places
		h.govern(&rs, 0, &g)
		if _, ok := h.acquire(&g, &pl, t0, true, time.Minute); !ok {
			t.Fatal("the first requests were held")
		}
		in := header.Info{Limit: 2, Remaining: remaining, Reset: time.Second, Has: header.HasLimit | header.HasRemaining | header.HasReset}
		h.observe(&rs, 0, false, &g, t0, 200, in, nil)
	}
	answer(1)
	answer(0)
	type req struct {
		g  governing
		pl places
	}
	ask := func(r *req, at time.Time) (held, bool) {
		h.govern(&rs, 0, &r.g)
		return h.acquire(&r.g, &r.pl, at, true, time.Minute)
	}
	var a, b, c, d req
	for _, r := range []*req{&a, &b, &c} {
		if hd, ok := ask(r, t0); ok || hd.queued || hd.wait != time.Second {
			t.Fatalf("before the reset: admitted %v, queued %v, wait %v; want held 1s", ok, hd.queued, hd.wait)
		}
	}
	t1 := t0.Add(time.Second)
	if hd, ok := ask(&c, t1); ok || !hd.queued {
		t.Errorf("c, third in line, went before a and b (admitted %v, queued %v)", ok, hd.queued)
	}
	if hd, ok := ask(&d, t1); ok || !hd.queued {
		t.Errorf("d, never held, went past the line (admitted %v, queued %v)", ok, hd.queued)
	}
	for name, r := range map[string]*req{"b": &b, "a": &a} {
		if hd, ok := ask(r, t1); !ok {
			t.Errorf("%s, within the quota restored, was held %v (queued %v)", name, hd.wait, hd.queued)
		}
	}
	if hd, ok := ask(&c, t1); ok || hd.queued || hd.wait != time.Second {
		t.Errorf("c after the quota was spent: admitted %v, queued %v, wait %v; want held 1s", ok, hd.queued, hd.wait)
	}
	t2 := t1.Add(time.Second)
	if _, ok := ask(&c, t2); !ok {
		t.Error("c held at the next reset")
	}
	if _, ok := ask(&d, t2); !ok {
		t.Error("d held at the next reset, behind an empty line")
	}
}
