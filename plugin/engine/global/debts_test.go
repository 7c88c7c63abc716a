package global

import (
	"testing"

	"github.com/sluicehq/sluice/plugin/internal/lease"
)

// TestDebts: hits add up per client; a paid debt is forgotten; each cost
// rule keeps at most its part of MaxDebts, and a full rule's new client is
// refused while another rule's are not.
func TestDebts(t *testing.T) {
	b := NewDebts(3, 2)
	if d, full := b.Keep(Key{0, 1}, "c1", 0); d != nil || full {
		t.Fatal("no hits: no debt")
	}
	b.Keep(Key{0, 1}, "c1", 5)
	d, _ := b.Keep(Key{0, 1}, "c1", 2)
	if b.Len() != 1 || d.Hits() != 7 || d.Desc() != "c1" || d.Key() != (Key{0, 1}) || b.Owed(Key{0, 1}) != 7 {
		t.Fatalf("len %d, hits %d, desc %q", b.Len(), d.Hits(), d.Desc())
	}
	b.Paid(Key{0, 1}, 3)
	if b.Owed(Key{0, 1}) != 4 {
		t.Fatalf("owed %d after paying 3 of 7", b.Owed(Key{0, 1}))
	}
	b.Paid(Key{0, 1}, 4)
	if b.Len() != 0 || b.Owed(Key{0, 1}) != 0 {
		t.Fatal("a paid debt is forgotten")
	}
	part := MaxDebts / 2
	for i := 0; i < part; i++ {
		if _, full := b.Keep(Key{0, uint64(i)}, "c", 1); full {
			t.Fatalf("rule 0 full at %d of its %d", i, part)
		}
	}
	if _, full := b.Keep(Key{0, 1 << 40}, "c", 1); !full {
		t.Fatal("rule 0 past its part: want full")
	}
	if _, full := b.Keep(Key{0, 1}, "c", 1); full {
		t.Fatal("a client that owes already adds to its debt")
	}
	if _, full := b.Keep(Key{2, 1}, "c", 1); full {
		t.Fatal("rule 2 is not full")
	}
	n := 0
	b.Each(func(d *Debt) bool {
		b.Drop(d.Key())
		n++
		return true
	})
	if n != part+1 || b.Len() != 0 {
		t.Fatalf("dropped %d, %d left", n, b.Len())
	}
	b.Keep(Key{1, 1}, "c", 1<<32-1)
	if got := b.Owed(Key{1, 1}); got != 1<<32-1-lease.MaxK {
		t.Fatalf("owed %d, want what a call may carry beside a lease", got)
	}
}

// A barred client stays barred until its window's end; beyond MaxBarred,
// a bar that has ended makes room, else the oldest.
func TestBarredUntilWindowEnd(t *testing.T) {
	var b Debts
	if b.Barred(Key{1, 1}, 0) {
		t.Fatal("nobody is barred at first")
	}
	b.Bar(Key{1, 1}, 100, 0)
	if !b.Barred(Key{1, 1}, 99) || b.Barred(Key{1, 2}, 99) || b.Barred(Key{2, 1}, 99) {
		t.Fatal("only the client barred is, until its window ends")
	}
	if b.Barred(Key{1, 1}, 100) {
		t.Fatal("barred after its window's end")
	}
	for i := 0; i < MaxBarred; i++ {
		b.Bar(Key{0, uint64(i)}, 200, 150)
	}
	if len(b.barred) != MaxBarred || !b.Barred(Key{0, 0}, 150) {
		t.Fatalf("%d barred, want %d (the ended bar's entry reused)", len(b.barred), MaxBarred)
	}
	b.Bar(Key{1, 7}, 300, 160)
	if !b.Barred(Key{1, 7}, 160) || b.Barred(Key{0, 0}, 160) || !b.Barred(Key{0, 1}, 160) {
		t.Fatal("a new bar beyond MaxBarred did not replace the oldest")
	}
	b.Bar(Key{1, 8}, 300, 250)
	if !b.Barred(Key{1, 8}, 250) || len(b.barred) != MaxBarred {
		t.Fatalf("an ended bar did not make room: %d kept", len(b.barred))
	}
}

// TestDebtsEachAsAMapRange: Each visits each debt once while f returns
// true; a debt dropped before it is reached is not visited; the list stays
// the map's set through Keep and Drop.
func TestDebtsEachAsAMapRange(t *testing.T) {
	b := NewDebts(1, 1)
	for i := range 10 {
		b.Keep(Key{0, uint64(i)}, "c", 1)
	}
	seen := map[uint64]int{}
	b.Each(func(d *Debt) bool {
		seen[d.Key().FP]++
		if d.Key().FP == 3 {
			b.Drop(Key{0, 8}) // not reached yet: not visited
			b.Drop(d.Key())
		}
		return d.Key().FP != 6 // stop after 6
	})
	if len(seen) != 7 || seen[8] != 0 || seen[7] != 0 || seen[0] != 1 || seen[6] != 1 {
		t.Errorf("visited %v: want 0..6 once each", seen)
	}
	if b.Len() != 8 || b.Owed(Key{0, 3}) != 0 || b.Owed(Key{0, 8}) != 0 || b.Owed(Key{0, 9}) != 1 {
		t.Fatalf("%d debts after Each, want 8", b.Len())
	}
	for i, d := range b.list {
		if d.at != i || b.m[d.key] != d {
			t.Fatalf("debt %d of the list (%+v) at %d", i, d.key, d.at)
		}
	}
}
