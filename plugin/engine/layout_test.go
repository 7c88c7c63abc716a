package engine

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Rule a's share of the table: 18 (2 buckets) beside b, 36 (4 buckets)
// alone; a is region 0 of both, with the same keys.
const (
	layoutBeside = `{"rules":[{"name":"a","limit":5,"window":"1h"},{"name":"b","limit":1,"window":"1h"}],"max_keys":36}`
	layoutAlone  = `{"rules":[{"name":"a","limit":5,"window":"1h"}],"max_keys":36}`
)

// movingClients returns n fingerprints whose bucket of rule a differs
// between the two layouts.
func movingClients(n int) []uint64 {
	var fps []uint64
	for c := uint64(1); len(fps) < n; c++ {
		if fp := c * 0x9E3779B97F4A7C15; jumpHash(fp, 2) != jumpHash(fp, 4) {
			fps = append(fps, fp)
		}
	}
	return fps
}

// layoutTables charges each client spent times under the first layout and
// returns that layout's table and one of the second layout, adopted a
// second later (the previous layout is then read for a state's life).
func layoutTables(t *testing.T, store *memStore, fps []uint64, spent int) (old, cur *Table) {
	t.Helper()
	beside, alone := mustConfig(t, layoutBeside), mustConfig(t, layoutAlone)
	old = NewTable(store, Regions(beside))
	old.AdoptLayouts(t0)
	for _, fp := range fps {
		for i := 0; i < spent; i++ {
			if d, _, err := old.Update(Charge, fp, 0, &beside.Rules[0].Limit, t0, 1, 0); err != nil || !d.Allowed {
				t.Fatalf("charge %d of client %x: %v %v", i, fp, d.Allowed, err)
			}
		}
	}
	cur = NewTable(store, Regions(alone))
	cur.AdoptLayouts(t0 + int64(time.Second))
	return old, cur
}

// charges counts how many of n charges of client fp table tb admits at now.
func charges(t *testing.T, tb *Table, fp uint64, now int64, n int) int {
	t.Helper()
	lim := &mustConfig(t, layoutAlone).Rules[0].Limit
	ok := 0
	for i := 0; i < n; i++ {
		d, _, err := tb.Update(Charge, fp, 0, lim, now, 1, 0)
		if err != nil {
			t.Fatalf("client %x: %v", fp, err)
		}
		if d.Allowed {
			ok++
		}
	}
	return ok
}

// A client whose bucket moved takes its state along on its first write:
// one that keeps sending at the sustained rate (one every 12 minutes) keeps
// its state after the previous layout stops being read (2 hours after the
// change): each request admitted, a second one at once refused.
func TestMovedStateOutlivesThePreviousLayout(t *testing.T) {
	store := newMemStore()
	fps := movingClients(6)
	_, cur := layoutTables(t, store, fps, 5)
	end := cur.regions[0].prevUntil
	for at := t0 + int64(12*time.Minute); at < end+int64(time.Hour); at += int64(12 * time.Minute) {
		for _, fp := range fps {
			if n := charges(t, cur, fp, at, 2); n != 1 {
				t.Fatalf("client %x at %v (previous layout read until %v): %d of 2 admitted, want 1",
					fp, time.Duration(at-t0), time.Duration(end-t0), n)
			}
		}
	}
}

// A worker whose whole charge of the same client runs between another's
// read of the client's old slot and its mark, or between its mark and its
// write into the new bucket, loses no charge: the slower worker's CAS
// fails and it reads again.
func TestMoveLosesNoConcurrentCharge(t *testing.T) {
	for _, before := range []int{1, 2} { // the Set of A's move the other worker runs before
		store := newMemStore()
		fp := movingClients(1)[0]
		_, a := layoutTables(t, store, fps1(fp), 3)
		b := NewTable(store, Regions(mustConfig(t, layoutAlone)))
		b.AdoptLayouts(t0 + int64(time.Second))
		at := t0 + int64(2*time.Second)
		sets := 0
		store.beforeSet = func(string) {
			if sets++; sets == before {
				store.beforeSet = nil
				if n := charges(t, b, fp, at, 1); n != 1 {
					t.Errorf("before set %d: the other worker's charge (the fourth of 5) refused", before)
				}
			}
		}
		if n := charges(t, a, fp, at, 1); n != 1 {
			t.Errorf("before set %d: the fifth of 5 refused", before)
		}
		if sets < before {
			t.Fatalf("the move made %d sets, want at least %d", sets, before)
		}
		if n := charges(t, a, fp, at, 1) + charges(t, b, fp, at, 1); n != 0 {
			t.Errorf("before set %d: %d more admitted after 5 of 5: a charge was lost in the move", before, n)
		}
		if a.Stats.CASRetries == 0 {
			t.Errorf("before set %d: no CAS retry", before)
		}
	}
}

func fps1(fp uint64) []uint64 { return []uint64{fp} }

// Workers moving the same clients at once admit exactly what was left of
// their budgets.
func TestConcurrentMovesAreExact(t *testing.T) {
	store := newMemStore()
	fps := movingClients(12)
	layoutTables(t, store, fps, 2)
	alone := mustConfig(t, layoutAlone)
	var wg sync.WaitGroup
	admitted := make([][]int, 4)
	for w := range admitted {
		admitted[w] = make([]int, len(fps))
		tb := NewTable(store, Regions(alone))
		tb.AdoptLayouts(t0 + int64(time.Second))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 0; round < 5; round++ {
				for c, fp := range fps {
					d, _, err := tb.Update(Charge, fp, 0, &alone.Rules[0].Limit, t0+int64(2*time.Second), 1, 0)
					if err == nil && d.Allowed {
						admitted[w][c]++
					}
				}
			}
		}()
	}
	wg.Wait()
	for c := range fps {
		n := 0
		for w := range admitted {
			n += admitted[w][c]
		}
		if n != 3 {
			t.Errorf("client %d: %d admitted by 4 workers, want 3 (2 of 5 spent before the change)", c, n)
		}
	}
}

// A client whose current bucket is full keeps its state where it is; once
// marked as moving, its state is frozen and it is decided on the rule's
// overflow state, like a client whose bucket is full.
func TestMoveIntoAFullBucket(t *testing.T) {
	store := newMemStore()
	fp := movingClients(1)[0]
	_, cur := layoutTables(t, store, fps1(fp), 3)
	at := t0 + int64(2*time.Second)
	// Fill the client's current bucket with active clients.
	want := jumpHash(fp, 4)
	for c, filled := uint64(1), 0; filled < SlotsPerBucket; c++ {
		if other := c * 0xD6E8FEB86659FD93; jumpHash(other, 4) == want {
			charges(t, cur, other, at, 1)
			filled++
		}
	}
	_, kind, err := cur.Update(Charge, fp, 0, &mustConfig(t, layoutAlone).Rules[0].Limit, at, 1, 0)
	if err != nil || kind != SlotOwn {
		t.Fatalf("full bucket, unmarked state: kind %d (%v), want its own slot of the previous layout", kind, err)
	}
	if n := charges(t, cur, fp, at, 2); n != 1 {
		t.Errorf("full bucket: %d of 2 admitted, want 1 (4 of 5 spent)", n)
	}
	// Mark it as a move whose second write failed would have.
	sp := spot{fp: fp, i: -1}
	rg := &cur.regions[0]
	if ok, err := cur.previous(rg, &sp, -1, at); !ok || err != nil {
		t.Fatalf("state not in the previous layout: %v", err)
	}
	sp.from = prevSlot{key: sp.key, val: sp.val, cas: sp.cas, i: sp.i}
	if retry, err := cur.markMoving(&sp); retry || err != nil {
		t.Fatalf("mark: %v %v", retry, err)
	}
	_, kind, err = cur.Update(Charge, fp, 0, &mustConfig(t, layoutAlone).Rules[0].Limit, at, 1, 0)
	if err != nil || kind != SlotOverflow {
		t.Errorf("full bucket, marked state: kind %d (%v), want the overflow state", kind, err)
	}
	// The layout changes back: the marked slot is the client's bucket's
	// again and its state (5 of 5 spent) is taken back as it is.
	back := NewTable(store, Regions(mustConfig(t, layoutBeside)))
	back.AdoptLayouts(at + int64(time.Second))
	if n := charges(t, back, fp, at+int64(time.Second), 1); n != 0 {
		t.Errorf("layout changed back: the state frozen by the unfinished move was not taken back (%d admitted after 5 of 5)", n)
	}
}

// While Envoy drains the connections of the previous configuration, its
// workers (the previous layout) and the new ones decide the same clients:
// once a new worker has moved a client's state, an old one follows it to
// its new bucket (the layout record names the newer layout) instead of
// starting the client over; an old worker that finds the state marked but
// not yet stored completes the move itself. Every charge lands on one
// state: 4 of 8 alternating charges admitted after 1 of 5 spent.
func TestPreviousLayoutWorkersFollowMovedStates(t *testing.T) {
	for _, race := range []bool{false, true} {
		store := newMemStore()
		fp := movingClients(1)[0]
		old, cur := layoutTables(t, store, fps1(fp), 1)
		at := t0 + int64(2*time.Second)
		if race {
			// The old worker's whole charge runs between the new
			// worker's mark and its write into the new bucket.
			sets := 0
			store.beforeSet = func(string) {
				if sets++; sets == 2 {
					store.beforeSet = nil
					if n := charges(t, old, fp, at, 1); n != 1 {
						t.Error("old worker's charge during the move refused")
					}
				}
			}
		}
		n := charges(t, cur, fp, at, 1)
		if race {
			n++ // the old worker's, counted above
		}
		for i := 0; i < 3; i++ {
			n += charges(t, old, fp, at, 1) + charges(t, cur, fp, at, 1)
		}
		if n != 4 {
			t.Errorf("race %v: %d admitted, want 4 (5 a client, 1 spent before the change)", race, n)
		}
	}
}

// Two configurations live at once (two listeners of one vm_id whose
// configurations differ, so rule a has 2 buckets in one and 4 in the
// other), each worker renewing the layouts once a second: a client that
// first comes long after both started (when the previous layout would no
// longer be read) and alternates between them has one budget, 5, not 5 in
// each.
func TestTwoLiveLayoutsShareOneBudget(t *testing.T) {
	store := newMemStore()
	old, cur := layoutTables(t, store, nil, 0)
	end := cur.regions[0].prevUntil
	at := t0 + int64(time.Second)
	for ; at < end+int64(time.Hour); at += int64(time.Second) {
		old.RenewLayouts(at)
		cur.RenewLayouts(at)
	}
	n := 0
	for _, fp := range movingClients(3) {
		n = 0
		for i := 0; i < 6; i++ {
			n += charges(t, old, fp, at, 1) + charges(t, cur, fp, at, 1)
		}
		if n != 5 {
			t.Errorf("client %x, %v after the second layout: %d admitted through both, want 5", fp, time.Duration(at-end), n)
		}
	}
	// The older configuration goes away: its states are read for one more
	// life, then no longer.
	last := at
	for ; at < last+int64(3*time.Hour); at += int64(time.Minute) {
		cur.RenewLayouts(at)
	}
	if rg := cur.regions[0]; rg.prevUntil > last+int64(rg.life)+int64(time.Second) {
		t.Errorf("previous layout read until %v after its last worker, want at most a life (%v)", time.Duration(rg.prevUntil-last), rg.life)
	}
}

// The same with several workers of each configuration, adopted in every
// order (the record's current layout is the last adopted that differs
// from it), and clients that come back after their states expired through
// any pair of workers: one budget every time.
func TestTwoLiveLayoutsAnyAdoptionOrder(t *testing.T) {
	beside, alone := mustConfig(t, layoutBeside), mustConfig(t, layoutAlone)
	for _, order := range []string{"ab", "aab", "aba", "abab", "abba", "baab", "abaabb"} {
		store := newMemStore()
		var as, bs []*Table
		for i, c := range order {
			at := t0 + int64(i)*int64(time.Millisecond)
			if c == 'a' {
				tb := NewTable(store, Regions(beside))
				tb.AdoptLayouts(at)
				as = append(as, tb)
			} else {
				tb := NewTable(store, Regions(alone))
				tb.AdoptLayouts(at)
				bs = append(bs, tb)
			}
		}
		at := t0 + int64(time.Second)
		for ; at < t0+int64(3*time.Hour); at += int64(time.Second) {
			for _, tb := range append(append([]*Table{}, as...), bs...) {
				tb.RenewLayouts(at)
			}
		}
		for ai := range as {
			for bi := range bs {
				for _, fp := range movingClients(3) {
					n := 0
					for i := 0; i < 6; i++ {
						n += charges(t, as[ai], fp, at, 1) + charges(t, bs[bi], fp, at, 1)
					}
					if n != 5 {
						t.Errorf("adopted in order %s, workers a%d and b%d, client %x: %d admitted, want 5", order, ai, bi, fp, n)
					}
				}
				at += int64(3 * time.Hour)
				for _, tb := range append(append([]*Table{}, as...), bs...) {
					tb.RenewLayouts(at)
				}
			}
		}
	}
}

// TestTableKeyEnumeration: Key's enumeration lists every region's buckets,
// then its overflow key, region after region.
func TestTableKeyEnumeration(t *testing.T) {
	regions := []Region{{ID: 1, Share: 9}, {ID: 2, Share: 50}, {ID: 3, Share: 17}}
	tb := NewTable(newMemStore(), regions)
	var got []string
	for i := 0; i < tb.Keys(); i++ {
		k, r, o := tb.Key(i)
		got = append(got, fmt.Sprintf("%s/%d/%t", k, r, o))
	}
	want := "sluice.v2.1.0/0/false sluice.v2.1.o/0/true " +
		"sluice.v2.2.0/1/false sluice.v2.2.1/1/false sluice.v2.2.2/1/false sluice.v2.2.3/1/false sluice.v2.2.4/1/false sluice.v2.2.5/1/false sluice.v2.2.o/1/true " +
		"sluice.v2.3.0/2/false sluice.v2.3.1/2/false sluice.v2.3.o/2/true"
	if strings.Join(got, " ") != want {
		t.Errorf("enumeration\n%s\nwant\n%s", strings.Join(got, " "), want)
	}
	if k, r, _ := tb.Key(tb.Keys()); k != "" || r != -1 {
		t.Errorf("Key past the end: %q %d", k, r)
	}
}

// TestAppendBucket: bucket numbers are written as strconv writes them (the
// keys are shared with workers of other modules).
func TestAppendBucket(t *testing.T) {
	for _, n := range []uint64{0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 9999, 10000, 12345, 99999, 100000, 999999, 1000000,
		9999999, 10000000, 99999999, 100000000, 999999999, 1000000000, 1<<32 - 1, 1 << 32, 1<<64 - 1} {
		if got, want := string(appendBucket([]byte("p:"), n)), "p:"+strconv.FormatUint(n, 10); got != want {
			t.Errorf("appendBucket(%d) = %q, want %q", n, got, want)
		}
	}
	for n := uint64(0); n < 200000; n += 7 {
		if got, want := string(appendBucket(nil, n)), strconv.FormatUint(n, 10); got != want {
			t.Fatalf("appendBucket(%d) = %q, want %q", n, got, want)
		}
	}
}
