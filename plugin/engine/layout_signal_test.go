package engine

import (
	"strings"
	"testing"
	"time"
)

// recordReads counts the Gets of layout records (keys ending in "n") of a
// memStore.
type recordReads struct {
	*memStore
	n int
}

func (s *recordReads) Get(key string) ([]byte, uint32, bool, error) {
	if strings.HasSuffix(key, ".n") {
		s.n++
	}
	return s.memStore.Get(key)
}

// With the count of layout record writes (LayoutSignal), a decision that
// gives a client a fresh state reads the layout record only when a record
// was written since the table last read it; without it, every time.
func TestFreshStateReadsTheRecordOnlyAfterAWrite(t *testing.T) {
	for _, signal := range []bool{true, false} {
		ms := newMemStore()
		ms.noSignal = !signal
		store := &recordReads{memStore: ms}
		tb := NewTable(store, Regions(mustConfig(t, layoutAlone)))
		tb.AdoptLayouts(t0)
		fps := movingClients(6)
		at := t0 + int64(time.Second)
		before := store.n
		for _, fp := range fps[:3] {
			charges(t, tb, fp, at, 1)
		}
		want := map[bool]int{true: 1, false: 3}[signal]
		if got := store.n - before; got != want {
			t.Errorf("signal %v: 3 fresh states read the record %d times, want %d", signal, got, want)
		}
		// Another configuration's worker writes the record: read again,
		// once.
		other := NewTable(store, Regions(mustConfig(t, layoutBeside)))
		other.AdoptLayouts(at)
		before = store.n
		for _, fp := range fps[3:] {
			charges(t, tb, fp, at, 1)
		}
		if got := store.n - before; got < 1 || (signal && got > 2) {
			t.Errorf("signal %v: after a record write, 3 fresh states read the record %d times, want 1-2 with the signal, 3+ without", signal, got)
		}
	}
}

// A renewal of the record by a worker of the previous layout (its "until"
// pushed a life ahead) counts as a write: a worker of the current layout
// that has not renewed its view since (its tick, once a second) reads it
// before a client's fresh state, and finds the client's active state in
// the previous layout instead of giving it a second budget.
func TestFreshStateSeesARenewedRecord(t *testing.T) {
	store := newMemStore()
	x := movingClients(1)[0]
	old, cur := layoutTables(t, store, []uint64{x}, 5) // x spends 5 of 5 under the old layout at t0
	life := int64(cur.regions[0].life)
	// cur decides another client: its view of the record is now read.
	charges(t, cur, movingClients(2)[1], t0+int64(2*time.Second), 1)
	// The old configuration's worker renews the record a quarter of a life
	// on, and keeps x active in its layout: x spends what it recovered
	// (5 an hour) every 50 minutes.
	at := t0 + life/4 + int64(time.Minute)
	old.RenewLayouts(at)
	for _, m := range []time.Duration{50, 100} {
		if n := charges(t, old, x, t0+int64(m*time.Minute), 6); n == 0 || n == 6 {
			t.Fatalf("old layout: %d of 6 admitted after %v, want the recovered budget spent", n, m*time.Minute)
		}
	}
	// Past the record's first "until", within the renewed one: x has
	// recovered one or two (22 minutes), whichever worker decides it; a
	// fresh state would admit 5.
	at = t0 + life + int64(2*time.Minute)
	if n := charges(t, cur, x, at, 5); n > 2 {
		t.Errorf("current layout: %d of 5 admitted to a client active in the previous layout (life %v), want at most 2 (one budget)", n, time.Duration(life))
	}
}
