package flight

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestHoldingsList: the list of holdings (walked by renew and HeldSlots
// instead of ranging over the map) stays the map's set through slots taken
// and released in random order over many keys, and every holding is
// renewed once per epoch.
func TestHoldingsList(t *testing.T) {
	r, _ := newRules(t, `{"rules":[{"name":"c","algorithm":"concurrency","limit":1000,"key":["path"]}]}`)
	rng := rand.New(rand.NewPCG(1, 2))
	now := t0
	var held []SlotRef
	for step := range 4000 {
		if len(held) > 0 && rng.IntN(2) == 0 {
			i := rng.IntN(len(held))
			if err := r.Release(&held[i], now); err != nil {
				t.Fatal(err)
			}
			held[i] = held[len(held)-1]
			held = held[:len(held)-1]
		} else {
			tk, err := r.Acquire(Pending{Rule: 0, FP: uint64(rng.IntN(40))}, false, now)
			if err != nil || !tk.Admitted {
				t.Fatalf("step %d: %+v, %v", step, tk, err)
			}
			s, _ := r.Take(&tk, 0, now)
			held = append(held, s)
		}
		if step%500 == 0 {
			now += int64(1100 * time.Millisecond) // a new epoch: every holding renews
			r.RenewDue(now)
			ep := uint16(0)
			for i, h := range r.held {
				if i == 0 {
					ep = h.epoch
				}
				if h.epoch != ep {
					t.Fatalf("step %d: holding %+v not renewed to epoch %d", step, h.key, ep)
				}
			}
		}
		if int(r.HeldSlots()) != len(held) || len(r.held) != len(r.holdings) {
			t.Fatalf("step %d: %d slots held by the list, %d taken; %d holdings listed, %d in the map",
				step, r.HeldSlots(), len(held), len(r.held), len(r.holdings))
		}
		for i, h := range r.held {
			if j, ok := r.holdings[h.key]; !ok || j != i {
				t.Fatalf("step %d: holding %d of the list is %+v, the map says %d, %v", step, i, h, j, ok)
			}
		}
	}
}

// TestLearnersList: the learners' list (walked by Learn and
// forgetLearners instead of ranging over the map) stays the map's set as
// learners come and are forgotten, and forgetting keeps those in use.
func TestLearnersList(t *testing.T) {
	r, _ := newRules(t, `{"rules":[{"name":"a","algorithm":"adaptive_concurrency","max_limit":50,"min_limit":5,"key":["path"]}]}`)
	a := &r.Adaptive
	rng := rand.New(rand.NewPCG(3, 4))
	now := t0
	for step := range 3000 {
		l := a.learnerFor(0, uint64(rng.IntN(MaxLearners*2)), now)
		if rng.IntN(3) == 0 {
			l.inFlight++ // kept by forgetLearners while a request is in flight
		}
		if step%250 == 0 {
			now += int64(learnerIdle) + 1
			a.Learn(now)
			for _, l := range a.list {
				if l.inFlight == 0 {
					t.Fatalf("step %d: idle learner %+v kept", step, l.key)
				}
			}
		}
		if len(a.list) != len(a.learners) {
			t.Fatalf("step %d: %d learners listed, %d in the map", step, len(a.list), len(a.learners))
		}
		for i, l := range a.list {
			if l.at != i || a.learners[l.key] != l {
				t.Fatalf("step %d: learner %d of the list (%+v) at %d", step, i, l.key, l.at)
			}
		}
	}
}
