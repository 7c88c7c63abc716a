package limit

import (
	"math/rand"
	"testing"
	"time"
)

// Property tests: random request sequences against simple reference models.

type event struct {
	at int64 // ns
	n  int64
}

// randomSequence returns arrivals with random gaps (bursts and idle periods)
// starting at t0, time non-decreasing.
func randomSequence(r *rand.Rand, t0 int64, count int, window int64) []event {
	ev := make([]event, count)
	now := t0
	for i := range ev {
		switch r.Intn(4) {
		case 0: // same instant (burst)
		case 1:
			now += r.Int63n(window/10 + 1)
		case 2:
			now += r.Int63n(window + 1)
		default:
			now += r.Int63n(3*window + 1)
		}
		ev[i] = event{at: now, n: 1 + int64(r.Intn(2))*int64(r.Intn(2))}
	}
	return ev
}

func randomLimit(r *rand.Rand, a Algorithm) Limit {
	windows := []time.Duration{10 * time.Millisecond, 250 * time.Millisecond, time.Second, time.Minute, time.Hour}
	limit := int64(1 + r.Intn(20))
	burst := int64(0)
	if a == TokenBucket || a == LeakyBucket {
		burst = int64(1 + r.Intn(20))
	}
	l, err := New(a, limit, windows[r.Intn(len(windows))], burst)
	if err != nil {
		panic(err)
	}
	return l
}

// TestTokenBucketMatchesReference compares GCRA with a direct token-bucket
// model that counts credit in nanoseconds: decisions must be identical.
func TestTokenBucketMatchesReference(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for trial := 0; trial < 300; trial++ {
		l := randomLimit(r, TokenBucket)
		capacity := l.burst * l.interval
		credit, last := capacity, int64(0) // a new client has a full bucket
		var s State
		t0 := int64(1e18) + r.Int63n(1e15)
		last = t0
		for i, e := range randomSequence(r, t0, 400, l.window) {
			credit = min(capacity, credit+(e.at-last))
			last = e.at
			want := credit >= e.n*l.interval
			if want {
				credit -= e.n * l.interval
			}
			var d Decision
			s, d = l.AllowN(s, e.at, e.n, 0)
			if d.Allowed != want {
				t.Fatalf("trial %d (%d/%v burst %d) event %d: GCRA %v, reference %v", trial, l.limit, l.Window(), l.burst, i, d.Allowed, want)
			}
		}
	}
}

// slidingLog keeps the admission times of one client.
type slidingLog []int64

func (lg slidingLog) countIn(from, to int64) int64 {
	var n int64
	for _, t := range lg {
		if t > from && t <= to {
			n++
		}
	}
	return n
}

// TestAdmissionBounds checks what each algorithm promises, against a log of
// every admission, on random sequences.
func TestAdmissionBounds(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	for a := TokenBucket; a <= LeakyBucket; a++ {
		for trial := 0; trial < 150; trial++ {
			l := randomLimit(r, a)
			var s State
			var log slidingLog // release times of admitted requests, one per unit
			t0 := int64(1e18)
			for _, e := range randomSequence(r, t0, 300, l.window) {
				var d Decision
				s, d = l.AllowN(s, e.at, e.n, 0)
				if d.Allowed {
					for k := int64(0); k < e.n; k++ {
						log = append(log, e.at+int64(d.Delay))
					}
				}
				if d.RetryAfter < 0 || d.Reset < 0 || d.Delay < 0 || d.Remaining < 0 {
					t.Fatalf("%v: negative field %+v", a, d)
				}
			}
			for i, at := range log {
				switch a {
				case TokenBucket:
					// In any span d ending at an admission: at most burst + d/interval.
					for _, from := range log[:i] {
						if n := log.countIn(from-1, at); n > l.burst+(at-from)/l.interval {
							t.Fatalf("token bucket %d/%v burst %d: %d admitted in %v", l.limit, l.Window(), l.burst, n, time.Duration(at-from))
						}
					}
				case FixedWindow:
					start := at - floorMod(at, l.window)
					if n := log.countIn(start-1, start+l.window-1); n > l.limit {
						t.Fatalf("fixed window %d/%v: %d in one window", l.limit, l.Window(), n)
					}
				case SlidingWindow:
					// The weighted estimate never lets more than limit in an
					// aligned window, nor 2x limit in any sliding window.
					start := at - floorMod(at, l.window)
					if n := log.countIn(start-1, start+l.window-1); n > l.limit {
						t.Fatalf("sliding window %d/%v: %d in one aligned window", l.limit, l.Window(), n)
					}
					if n := log.countIn(at-l.window, at); n > 2*l.limit {
						t.Fatalf("sliding window %d/%v: %d in a sliding window", l.limit, l.Window(), n)
					}
				case LeakyBucket:
					// Requests leave one interval apart.
					if i > 0 && at-log[i-1] < l.interval && at != log[i-1] {
						t.Fatalf("leaky bucket: departures %v apart, interval %v", time.Duration(at-log[i-1]), l.Interval())
					}
				}
			}
		}
	}
}

// TestIdleStateIsNew: once Reset has elapsed, a state decides every
// following sequence exactly like a new client's zero State.
func TestIdleStateIsNew(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	for a := TokenBucket; a <= LeakyBucket; a++ {
		for trial := 0; trial < 200; trial++ {
			l := randomLimit(r, a)
			var s State
			t0 := int64(1e18)
			seq := randomSequence(r, t0, 50, l.window)
			for _, e := range seq {
				s, _ = l.AllowN(s, e.at, e.n, 0)
			}
			end := seq[len(seq)-1].at
			idle := end + max(int64(l.Reset(s, end)), 0)
			if a == FixedWindow || a == SlidingWindow {
				// Align so that both states see the same window boundaries.
				idle += l.window - floorMod(idle, l.window)
			}
			if l.Reset(s, idle) > 0 {
				t.Fatalf("%v: Reset after Reset elapsed = %v", a, l.Reset(s, idle))
			}
			fresh := State{}
			for i, e := range randomSequence(r, idle, 100, l.window) {
				var d1, d2 Decision
				s, d1 = l.AllowN(s, e.at, e.n, 0)
				fresh, d2 = l.AllowN(fresh, e.at, e.n, 0)
				if d1 != d2 {
					t.Fatalf("%v trial %d event %d: idle state %+v, new client %+v", a, trial, i, d1, d2)
				}
			}
		}
	}
}
