package sdk

import (
	"math/rand/v2"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sdk/header"
)

// sent is a request a view admitted, with the answer the server gave it
// and when that answer reaches the view.
type sent struct {
	tk     ticket
	status int
	in     header.Info
	due    time.Time
}

// viewAgainst drives one view against a, in steps of 10 ms of a virtual
// clock, with no goroutines: callers each keep one request going, sent as
// soon as the view lets it go (only one until its answer comes, so that
// the view knows the limit before the crowd); the server counts each step's
// requests in the order they were sent, 10 ms after, and the answers
// reach the view 20 ms after the send, in the order order puts them. It
// returns the requests the server admitted and refused, the first one
// apart.
func viewAgainst(a *api, callers int, dur time.Duration, order func([]sent)) (served, refused int) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	a.now = func() time.Time { return now.Add(10 * time.Millisecond) }
	v := newView("api", 1, 1, false)
	var flying []sent
	learned := false // the first answer came
	for ; now.Sub(t0) < dur; now = now.Add(10 * time.Millisecond) {
		var answered []sent
		flying = slices.DeleteFunc(flying, func(s sent) bool {
			if !now.Before(s.due) {
				answered = append(answered, s)
			}
			return !now.Before(s.due)
		})
		order(answered)
		for _, s := range answered {
			v.observe(s.tk, now, s.status, s.in, 0)
			learned = true
		}
		ready := callers - len(flying)
		if !learned {
			ready = 1 - len(flying)
		}
		for ; ready > 0; ready-- {
			v.mu.Lock()
			w := v.waitLocked(now)
			var tk ticket
			if w <= 0 {
				tk = v.admitLocked(now)
			}
			v.mu.Unlock()
			if w > 0 {
				break
			}
			rec := httptest.NewRecorder()
			a.ServeHTTP(rec, httptest.NewRequest("GET", "http://api.test/items", nil))
			in, _ := header.Parse(rec.Header(), now)
			s := sent{tk: tk, status: rec.Code, in: requestsOnly(in), due: now.Add(20 * time.Millisecond)}
			flying = append(flying, s)
			switch {
			case !learned:
			case s.status == 200:
				served++
			default:
				refused++
			}
		}
	}
	return served, refused
}

// TestSpentLogCrowdOutOfOrder: a view against a token bucket of 10/s with
// a burst of 50, its whole burst (a limit the view cannot tell from a
// window), 200 callers. The view releases crowds; the server counts each
// crowd in the order it was sent, and each answer's reset is the time
// until the bucket is full again after that request: 1 s for the first
// counted, 5 s for the last. Answers that reach the view in the order the
// server counted them, or in reverse (the first counted answered last),
// must not make it let go more requests than the bucket holds: none
// refused. Nor may it wait longer than it must: in 30 s the bucket admits
// at most 50 + 10/s x 30 s = 350, and the view must get at least 90% of
// that through. Each answer speaking for the requests answered before it,
// the reverse order's last answer (reset 1 s) freed the whole crowd a
// second after it was sent, when the bucket held 10: 40 refused per crowd.
func TestSpentLogCrowdOutOfOrder(t *testing.T) {
	const dur = 30 * time.Second
	most := 50 + int(10*dur.Seconds())
	for _, o := range []struct {
		name  string
		order func([]sent)
	}{
		{"counted", func([]sent) {}},
		{"reversed", slices.Reverse[[]sent]},
		{"first last", func(s []sent) {
			if len(s) > 1 {
				first := s[0]
				copy(s, s[1:])
				s[len(s)-1] = first
			}
		}},
	} {
		a := &api{algo: &tokenBucket{limit: 50, window: 5 * time.Second, burst: 50}, style: sluiceStyle}
		served, refused := viewAgainst(a, 200, dur, o.order)
		t.Logf("%s: %d served, %d refused (the bucket admits at most %d)", o.name, served, refused, most)
		if refused > 0 {
			t.Errorf("%s: the server refused %d requests the view let go", o.name, refused)
		}
		if served < most*9/10 || served > most {
			t.Errorf("%s: %d served, want %d to %d", o.name, served, most*9/10, most)
		}
	}
}

// TestSpentLogKeepsOrder: random answers, in and out of order, around the
// ring's wrap: the log holds the latest maxSpent times in order, as a
// sorted list does where an answer known to come after every request
// remembered lowers the later times to its own and any other answer is
// inserted in its place.
func TestSpentLogKeepsOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(1, 2))
	for run := range 20 {
		var l spentLog
		var want []time.Time
		var seq uint64
		for step := range 3 * maxSpent {
			tk := ticket{held: true, ordered: rng.IntN(3) == 0, seq: seq + 1 - uint64(rng.IntN(3))}
			seq = max(seq, tk.seq)
			in := header.Info{Has: header.HasReset, Reset: time.Duration(rng.IntN(5000)) * time.Millisecond}
			now := t0.Add(time.Duration(step) * 10 * time.Millisecond)
			last := tk.ordered && tk.seq > l.newest
			l.add(now, tk, in, 50, 5*time.Second)
			at := now.Add(in.Reset)
			i, _ := slices.BinarySearchFunc(want, at, time.Time.Compare)
			if last {
				for k := range want {
					if want[k].After(at) {
						want[k] = at
					}
				}
				i = len(want)
			}
			want = slices.Insert(want, i, at)
			if len(want) > maxSpent {
				want = want[1:]
			}
			var got []time.Time
			for k := len(l.at); k >= 1; k-- {
				got = append(got, l.recent(k))
			}
			if !slices.Equal(got, want) {
				t.Fatalf("run %d step %d (ordered %v, last %v): log %v, want %v", run, step, tk.ordered, last, got, want)
			}
		}
	}
}
