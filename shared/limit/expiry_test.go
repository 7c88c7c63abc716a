package limit

import (
	"math"
	"testing"
	"time"
)

// TestExpiryIsNowPlusReset holds Expiry's token-bucket shortcut to what it
// stands for, now + Reset, for every algorithm, across states and times of
// either sign, the extremes included (where s.A - now would overflow).
func TestExpiryIsNowPlusReset(t *testing.T) {
	times := []int64{math.MinInt64, math.MinInt64 + 1, -int64(time.Hour), -1, 0, 1, int64(time.Second), 1_765_000_000_000_000_000, math.MaxInt64 - 1, math.MaxInt64}
	for _, a := range []Algorithm{TokenBucket, FixedWindow, SlidingWindow, LeakyBucket} {
		l, err := New(a, 10, time.Second, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, now := range times {
			for _, sa := range times {
				for _, sb := range []int64{0, 1, 5, now} {
					s := State{A: sa, B: sb}
					if got, want := l.Expiry(s, now), now+int64(l.Reset(s, now)); got != want {
						t.Fatalf("%v: Expiry(%+v, %d) = %d, now + Reset = %d", a, s, now, got, want)
					}
				}
			}
		}
	}
	// Through an admitted request's new state, as Table.update asks.
	l, _ := New(TokenBucket, 100, time.Second, 5)
	now := int64(1_765_000_000_000_000_000)
	s, d := l.AllowN(State{}, now, 1, 0)
	if !d.Allowed || l.Expiry(s, now) != s.A || s.A <= now {
		t.Fatalf("admitted: %+v %+v, expiry %d", s, d, l.Expiry(s, now))
	}
}
