package engine

import (
	"strconv"
	"testing"
	"time"
)

// A client whose current bucket still holds an expired slot of its own
// (from an earlier time under this layout) and whose state is in the
// previous layout moves it into that expired slot: the move marks the old
// slot, then stores the state into the current bucket. When another client
// of that bucket is written in between (an ordinary CAS mismatch under
// load), the retry finds its own expired slot and the marked state: the
// marked state is the client's latest, not an older one, and must be read.
func TestMoveIntoOwnExpiredSlotSurvivesCASMismatch(t *testing.T) {
	beside, alone := mustConfig(t, layoutBeside), mustConfig(t, layoutAlone)
	store := newMemStore()
	x := movingClients(1)[0]
	var ys []uint64 // other clients of x's bucket of the 4-bucket layout
	for c := uint64(1); len(ys) < 2; c++ {
		if f := c * 0xD6E8FEB86659FD93; f != x && jumpHash(f, 4) == jumpHash(x, 4) {
			ys = append(ys, f)
		}
	}
	z, y := ys[0], ys[1]
	// Long ago, under 4 buckets: x leaves a slot in its bucket, long expired.
	old4 := NewTable(store, Regions(alone))
	old4.AdoptLayouts(t0 - int64(10*time.Hour))
	charges(t, old4, z, t0-int64(10*time.Hour), 1) // slot 0, the first free one later
	if n := charges(t, old4, x, t0-int64(10*time.Hour), 1); n != 1 {
		t.Fatal("first charge refused")
	}
	// Then 2 buckets: x spends 4 of 5 there.
	two := NewTable(store, Regions(beside))
	two.AdoptLayouts(t0)
	if n := charges(t, two, x, t0, 4); n != 4 {
		t.Fatalf("%d of 4 admitted under 2 buckets", n)
	}
	// Back to 4 buckets (a second later): x's state moves.
	at := t0 + int64(2*time.Second)
	for _, sameClient := range []bool{false, true} {
		t.Run(map[bool]string{false: "other_client_written", true: "same_client_decided"}[sameClient], func(t *testing.T) {
			st := store.clone()
			four := NewTable(st, Regions(alone))
			four.AdoptLayouts(t0 + int64(time.Second))
			other := NewTable(st, Regions(alone))
			other.AdoptLayouts(t0 + int64(time.Second))
			mark := four.regions[0].prefix + strconv.FormatUint(jumpHash(x, 2), 10)
			marked, injected, n := false, false, 0
			st.beforeSet = func(key string) {
				if marked { // after the mark, before the store
					st.beforeSet, injected = nil, true
					if sameClient {
						n += charges(t, other, x, at, 1)
					} else {
						charges(t, other, y, at, 1)
					}
				}
				marked = key == mark
			}
			n += charges(t, four, x, at, 3)
			if !injected {
				t.Fatal("no set after the mark")
			}
			if want := 1; n != want {
				t.Errorf("%d admitted after 4 of 5 spent, want %d: the moved state was lost (a fresh budget)", n, want)
			}
		})
	}
}

// clone copies the store (its values and CAS counter).
func (s *memStore) clone() *memStore {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &memStore{m: map[string]memEntry{}, nextCAS: s.nextCAS, writes: s.writes, noSignal: s.noSignal}
	for k, e := range s.m {
		c.m[k] = e
	}
	return c
}

// A client's state frozen in its bucket of the newer layout (marked as
// moving out by a move into the older layout that never completed: that
// layout was current then, and its bucket filled before the move's store)
// is still the client's when the older layout's workers decide it there
// (newer): taken back, not beside a fresh state.
func TestNewerTakesBackFrozenState(t *testing.T) {
	beside, alone := mustConfig(t, layoutBeside), mustConfig(t, layoutAlone)
	store := newMemStore()
	x := movingClients(1)[0]
	four := NewTable(store, Regions(alone))
	four.AdoptLayouts(t0)
	if n := charges(t, four, x, t0, 4); n != 4 {
		t.Fatalf("%d of 4 admitted", n)
	}
	// Freeze x's slot as an unfinished move out of it would have.
	key := four.regions[0].prefix + strconv.FormatUint(jumpHash(x, 4), 10)
	val, _, _, _ := store.Get(key)
	for i := 0; i < SlotsPerBucket; i++ {
		if getUint64(val[i*slotSize:]) == x {
			putUint64(val[i*slotSize:], movedFP(x))
		}
	}
	if _, err := store.Set(key, val, 0); err != nil {
		t.Fatal(err)
	}
	// The older layout's worker (2 buckets) beside the current one.
	two := NewTable(store, Regions(beside))
	two.AdoptLayouts(t0 + int64(time.Second))
	four.AdoptLayouts(t0 + int64(2*time.Second)) // the record names 4 buckets again
	at := t0 + int64(3*time.Second)
	two.RenewLayouts(at)
	four.RenewLayouts(at)
	if two.regions[0].newer != 4 {
		t.Fatalf("newer %d", two.regions[0].newer)
	}
	if n := charges(t, two, x, at, 1) + charges(t, four, x, at, 2); n != 1 {
		t.Errorf("%d of 3 admitted after 4 of 5 spent: the frozen state was passed over for a fresh one", n)
	}
}

// A worker of the older configuration whose view is a second old (it
// renews its layouts once a second) when another worker of its
// configuration starts, making its layout current again: a client whose
// state moved out of its bucket into the other layout's is followed there,
// not taken back from the frozen slot it moved out of (two budgets: the
// frozen one and the moved one).
func TestStaleViewFollowsMovedStateWhenItsLayoutIsCurrentAgain(t *testing.T) {
	beside, alone := mustConfig(t, layoutBeside), mustConfig(t, layoutAlone)
	store := newMemStore()
	x := movingClients(1)[0]
	a1 := NewTable(store, Regions(beside))
	a1.AdoptLayouts(t0)
	if n := charges(t, a1, x, t0, 2); n != 2 {
		t.Fatal("first charges refused")
	}
	b1 := NewTable(store, Regions(alone))
	b1.AdoptLayouts(t0 + int64(time.Second))
	at := t0 + int64(2*time.Second)
	a1.RenewLayouts(at)
	b1.RenewLayouts(at)
	if n := charges(t, b1, x, at, 1); n != 1 { // moves x's state into its 4-bucket layout's bucket
		t.Fatal("third charge refused")
	}
	// Another worker of a1's configuration starts: its layout is current
	// again. a1 has not renewed yet.
	a2 := NewTable(store, Regions(beside))
	a2.AdoptLayouts(at + int64(time.Millisecond))
	at += int64(2 * time.Millisecond)
	if n := charges(t, a1, x, at, 3); n != 2 {
		t.Errorf("%d of 3 admitted after 3 of 5 spent: the state frozen by the move was taken back beside the moved one", n)
	}
}
