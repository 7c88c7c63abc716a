//go:build go1.25

package sdk

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/sdk/header"
)

// TestLinePlacesMatchTheLines: a request's places and the views' lines
// say the same thing after any sequence of joins, leaves and keeps: the
// request's ticket is in a view's line exactly when the view is among its
// places, once. (Places that lost track of a line they were in, when a
// view was joined twice and filled them, left a ticket in that line for
// good, and every request behind it waited there for good.)
func TestLinePlacesMatchTheLines(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	views := make([]*view, maxViews+2)
	for i := range views {
		views[i] = newView("p", uint64(i+1), 1, false)
	}
	for run := range 2000 {
		pl := places{ticket: uint64(run + 1)}
		var g governing
		for step := range 30 {
			if step%10 == 0 { // the request's governing views change
				g.n = 1 + rng.IntN(maxViews)
				for i, k := range rng.Perm(len(views))[:g.n] {
					g.vs[i] = views[k]
				}
				pl.keep(&g)
			}
			v := g.vs[rng.IntN(g.n)]
			v.mu.Lock()
			if rng.IntN(3) == 0 {
				pl.leaveLocked(v)
			} else {
				pl.joinLocked(v)
			}
			v.mu.Unlock()
			for _, u := range views {
				in := slices.Contains(u.line.q, pl.ticket)
				n := 0
				for _, w := range pl.vs[:pl.n] {
					if w == u {
						n++
					}
				}
				if in != (n == 1) || n > 1 || (in && !slices.Contains(g.vs[:g.n], u)) {
					t.Fatalf("run %d step %d: view %d: ticket in line %v, %d times in places %v, governing %v",
						run, step, u.id, in, n, pl.vs[:pl.n], g.vs[:g.n])
				}
			}
		}
		pl.leave()
		for _, u := range views {
			if u.line.busy() {
				t.Fatalf("run %d: view %d's line %v after the request left every line", run, u.id, u.line.q)
			}
		}
	}
}

// lineOutcome is how one request of TestLineLeaversReleaseTheOthers ended.
type lineOutcome struct {
	name   string
	end    time.Duration
	status int
	err    error
}

// TestLineLeaversReleaseTheOthers: five requests wait, in order, for a
// limit of one per 4 s (a fixed window, spent): A, whose caller cancels it
// after 1 s; B; C, whose deadline (6 s) its turn will pass; D and E. The
// requests that leave the line must not hold up those behind them: B goes
// at the reset (4 s), C gives up when it knows its turn (8 s) passes its
// deadline, D goes at 8 s and E at 12 s, one per window, in the order they
// came, with no wait for a missed wake-up or a MaxWait.
func TestLineLeaversReleaseTheOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &api{now: time.Now, algo: &fixedWindow{limit: 1, window: 4 * time.Second}, style: sluiceStyle}
		c := &http.Client{Transport: NewTransport(handlerRT{h: a, latency: 10 * time.Millisecond})}
		begin := time.Now()
		if resp, err := c.Get("http://line.test/x"); err != nil || resp.StatusCode != 200 {
			t.Fatalf("warm-up: %v %v", resp, err)
		} else {
			resp.Body.Close()
		}
		cancelA, cancelA2 := context.WithCancel(context.Background())
		defer cancelA2()
		deadlineC, cancelC := context.WithDeadline(context.Background(), begin.Add(6*time.Second))
		defer cancelC()
		ctxs := map[string]context.Context{"A": cancelA, "C": deadlineC}
		var mu sync.Mutex
		var out []lineOutcome
		var wg sync.WaitGroup
		for _, name := range []string{"A", "B", "C", "D", "E"} {
			ctx := ctxs[name]
			if ctx == nil {
				ctx = context.Background()
			}
			wg.Go(func() {
				req, _ := http.NewRequestWithContext(ctx, "GET", "http://line.test/x", nil)
				o := lineOutcome{name: name}
				resp, err := c.Do(req)
				o.end, o.err = time.Since(begin), err
				if err == nil {
					o.status = resp.StatusCode
					resp.Body.Close()
				}
				mu.Lock()
				out = append(out, o)
				mu.Unlock()
			})
			time.Sleep(time.Millisecond) // one after another: their order
		}
		time.Sleep(time.Second)
		cancelA2()
		wg.Wait()
		slices.SortFunc(out, func(x, y lineOutcome) int { return int(x.end - y.end) })
		t.Logf("%+v", out)
		by := map[string]lineOutcome{}
		for _, o := range out {
			by[o.name] = o
		}
		want := []struct {
			name     string
			at       time.Duration
			status   int
			canceled bool
		}{{"A", time.Second, 0, true}, {"B", 4 * time.Second, 200, false}, {"C", 4 * time.Second, 0, false},
			{"D", 8 * time.Second, 200, false}, {"E", 12 * time.Second, 200, false}}
		for _, w := range want {
			o := by[w.name]
			late := o.end - w.at
			if o.status != w.status || late < 0 || late > 500*time.Millisecond || errors.Is(o.err, context.Canceled) != w.canceled {
				t.Errorf("%s ended at %v: %d, %v; want at %v (+0.5 s): %d, canceled %v",
					w.name, o.end, o.status, o.err, w.at, w.status, w.canceled)
			}
		}
		var rle *RateLimitError
		if c := by["C"]; !errors.As(c.err, &rle) {
			t.Errorf("C ended with %v, want a *RateLimitError (its turn passes its deadline)", c.err)
		}
	})
}

// TestLineLeaverLetsNoOneSkipThePace: at a pace learned from a bare 429
// (a turn every 2 s, none in hand), A takes the next turn and waits for it
// in the view's line; B, behind A, looks for no turn of its own (see
// call.pace). A gives up before B asks to be admitted (its caller's
// deadline, as near the end of every caller's wait). B, first now, must
// take the turn A gave back, not go out at once: admitted without a turn,
// it went past the pace, and near a deadline shared by many callers one
// after another did, to be refused. The steps are those of call.holdLoop,
// in the order they interleaved: time is the fake clock's, never moved.
func TestLineLeaverLetsNoOneSkipThePace(t *testing.T) {
	tr := NewTransport(rtFunc(func(*http.Request) (*http.Response, error) {
		panic("nothing is sent")
	}), WithAdaptiveRate(), WithClock(newFakeClock()))
	call := func() *call {
		req, _ := http.NewRequest("GET", "http://line.test/x", nil)
		c := tr.newCall(req)
		c.known = c.h.govern(&tr.routes, c.rk, &c.g)
		return c
	}
	first := call()
	now := first.now
	var p0 turns
	if _, _, _, _, ok := first.pace(&p0); ok {
		t.Fatal("a wait before any answer")
	}
	if _, ok := first.h.acquire(&first.g, &first.pl, now, true, time.Minute); !ok {
		t.Fatal("the first request is not admitted")
	}
	first.h.observe(&tr.routes, first.rk, first.known, &first.g, now, http.StatusTooManyRequests, header.Info{}, nil)

	a, b := call(), call()
	var pa, pb turns
	if pt, _, _, why, ok := a.pace(&pa); !ok || why != "" || pt.d <= 0 {
		t.Fatalf("A after the throttle: wait %v (%v, %q), want its turn's", pt.d, ok, why)
	}
	if pt, _, _, _, ok := b.pace(&pb); ok {
		t.Fatalf("B, behind A in line, was given a turn (wait %v)", pt.d)
	}
	pa.giveBack(now)
	a.pl.leave()
	if _, ok := b.h.acquire(&b.g, &b.pl, now, true, time.Minute); ok {
		t.Fatal("B admitted at once without a turn after A left the line; want it to take A's turn")
	}
	if pt, _, _, why, ok := b.pace(&pb); !ok || why != "" || pt.d < time.Second {
		t.Errorf("B looking again: wait %v (%v, %q), want the 2 s turn A gave back", pt.d, ok, why)
	}
}
