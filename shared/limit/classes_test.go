package limit

import (
	"math/rand"
	"testing"
	"time"
)

func TestClassCaps(t *testing.T) {
	for _, tc := range []struct {
		lim      int64
		reserves []float64
		want     []int64
	}{
		{4, []float64{0.25, 0}, []int64{4, 3}},
		{20, []float64{0.1, 0.1, 0}, []int64{20, 18, 16}},
		{10, []float64{0.1, 0.2, 0}, []int64{10, 9, 7}},
		{1, []float64{0.5, 0}, []int64{1, 1}},  // at least 1: the reserve gives way
		{3, []float64{0.9, 0}, []int64{3, 1}},  // floor(0.3) = 0 -> 1
		{8, []float64{0.25, 0}, []int64{8, 6}}, // capacity 8: buys 6
		{7, []float64{0.3, 0.3, 0}, []int64{7, 4, 2}},
	} {
		caps := make([]int64, len(tc.reserves))
		ClassCaps(tc.lim, tc.reserves, caps)
		for k := range caps {
			if caps[k] != tc.want[k] {
				t.Errorf("L %d reserves %v: caps %v, want %v", tc.lim, tc.reserves, caps, tc.want)
				break
			}
		}
	}
}

// TestClassInvariant: whatever the order of acquisitions, claims and
// releases, class k and the classes below it never hold more than Cap k,
// and a lower class never takes a slot that a higher one waits for.
func TestClassInvariant(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	reserves := []float64{0.2, 0.3, 0}
	caps := make([]int64, 3)
	ClassCaps(10, reserves, caps)
	ss := make([]Slots, 3)
	now := int64(time.Hour)
	type ticket struct {
		c int
		t uint16
	}
	var held [3]int64
	var waiting []ticket
	for step := 0; step < 20000; step++ {
		now += int64(time.Millisecond)
		c := rng.Intn(3)
		switch op := rng.Intn(4); {
		case op == 0:
			before, free := waitingAbove(ss, c), ClassFree(ss, caps, c)
			d := ClassAcquire(ss, caps, c, now, held[c], EpochAt(now), 8)
			if d.Admitted {
				if before >= free {
					t.Fatalf("step %d: class %d took one of %d free slots that %d of higher classes wait for", step, c, free, before)
				}
				held[c]++
			} else if d.Queued {
				waiting = append(waiting, ticket{c, d.Ticket})
			}
		case op == 1 && len(waiting) > 0:
			i := rng.Intn(len(waiting))
			w := waiting[i]
			if d := ClassClaim(ss, caps, w.c, now, w.t, held[w.c], EpochAt(now)); d.Admitted {
				held[w.c]++
				waiting = append(waiting[:i], waiting[i+1:]...)
			}
		case held[c] > 0:
			ClassRelease(ss, caps, c, now, 1, ClassRenew(ss, c, now, held[c], EpochAt(now)))
			held[c]--
		}
		var sum int64
		for k := 2; k >= 0; k-- {
			sum += ss[k].InFlight()
			if sum > caps[k] {
				t.Fatalf("step %d: classes %d.. hold %d, cap %d", step, k, sum, caps[k])
			}
		}
	}
}
