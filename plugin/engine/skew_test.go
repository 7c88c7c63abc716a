package engine

import (
	"testing"
	"time"
)

// TestClockReadBeforeAnotherWorkersStore: a worker reads the clock when a
// request arrives and the shared state afterwards (after its header reads);
// a second worker whose clock read came a moment later can store its own
// decision in between. The first worker then decides after a charge made
// "in its future": it must decide as of that charge, as its request is
// decided after it, not read the gap as its bucket being over by it. Four
// requests at once under burst 2 over two workers, clock reads ordered
// against state reads the wrong way round: 2 admitted at once, 2 held, and
// the held ones released one interval apart (the e2e
// TestMetricsAfterKnownTraffic's login rule). A leaky bucket of burst 1
// holds the second request one interval and rejects nothing.
func TestClockReadBeforeAnotherWorkersStore(t *testing.T) {
	const skew = int64(time.Microsecond) // w1's clock read came first
	iv := int64(100 * time.Millisecond)
	rq := func() Request { return req("/login", "GET", "203.0.113.5:1") }
	t.Run("token_bucket", func(t *testing.T) {
		cfg := mustConfig(t, `{"rules":[{"name":"login","limit":10,"window":"1s","burst":2,"max_delay":"1s"}]}`)
		st := newMemStore()
		w1, w2 := New(cfg, st, 1, wallClock), New(cfg, st, 1, wallClock)
		// w2 (clock t0+skew) stores before w1 (clock t0) reads, twice.
		order := []struct {
			e   *Engine
			now int64
		}{{w2, t0 + skew}, {w1, t0}, {w2, t0 + skew}, {w1, t0}}
		want := []Outcome{Allow, Allow, Delay, Delay}
		var release []int64
		for i, o := range order {
			v := o.e.Decide(rq(), o.now)
			if v.Outcome != want[i] {
				t.Fatalf("request %d (clock t0+%v): %v (delay %v), want %v", i+1, time.Duration(o.now-t0), v.Outcome, v.Delay, want[i])
			}
			if v.Outcome == Delay {
				release = append(release, o.now+int64(v.Delay))
			}
		}
		// The first held request leaves one interval after the burst's
		// charge (w2's clock), the next one more interval later.
		if release[0] != t0+skew+iv || release[1] != t0+skew+2*iv {
			t.Errorf("held requests released at t0+%v and t0+%v, want t0+%v and t0+%v",
				time.Duration(release[0]-t0), time.Duration(release[1]-t0), time.Duration(skew+iv), time.Duration(skew+2*iv))
		}
	})
	t.Run("token_bucket_unhold", func(t *testing.T) {
		// A held request decided behind a later clock gives its turn back
		// when it leaves: its reservation is the latest one.
		cfg := mustConfig(t, `{"rules":[{"name":"login","limit":10,"window":"1s","burst":1,"max_delay":"1s"}]}`)
		st := newMemStore()
		w1, w2 := New(cfg, st, 1, wallClock), New(cfg, st, 1, wallClock)
		w2.Decide(rq(), t0+skew)
		v := w1.Decide(rq(), t0)
		if v.Outcome != Delay || t0+int64(v.Delay) != t0+skew+iv {
			t.Fatalf("held: %v, released at t0+%v, want Delay released at t0+%v", v.Outcome, v.Delay, time.Duration(skew+iv))
		}
		w1.Unhold(&v, t0)
		if again := w2.Decide(rq(), t0+skew); again.Outcome != Delay || again.Delay != time.Duration(iv) {
			t.Errorf("after the held request left, the next one: %v for %v, want held %v (its turn)", again.Outcome, again.Delay, time.Duration(iv))
		}
	})
	t.Run("leaky_bucket", func(t *testing.T) {
		cfg := mustConfig(t, `{"rules":[{"name":"login","algorithm":"leaky_bucket","limit":10,"window":"1s","burst":1}]}`)
		st := newMemStore()
		w1, w2 := New(cfg, st, 1, wallClock), New(cfg, st, 1, wallClock)
		if v := w2.Decide(rq(), t0+skew); v.Outcome != Allow {
			t.Fatalf("first request: %v", v.Outcome)
		}
		v := w1.Decide(rq(), t0)
		if v.Outcome != Delay || t0+int64(v.Delay) != t0+skew+iv {
			t.Errorf("second request (clock read first, state read second): %v for %v, want held until t0+%v",
				v.Outcome, v.Delay, time.Duration(skew+iv))
		}
	})
}
