package local

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/shared/limit"
)

// heldTable answers UpdateHeld from back (per fingerprint) and records
// the refunds it took.
type heldTable struct {
	back  map[uint64]bool
	given []uint64
}

func (h *heldTable) UpdateHeld(fp uint64, _ int, _ *limit.Limit, _, _, _ int64) (bool, error) {
	if h.back[fp] {
		h.given = append(h.given, fp)
		return true, nil
	}
	return false, nil
}

// TestRefundHeld: a reservation that requests were held behind is kept,
// and given back once the one behind it is; one whose release time passed
// is forgotten.
func TestRefundHeld(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"rules":[{"name":"r","limit":1,"window":"1s","max_delay":"5s"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	tb := &heldTable{back: map[uint64]bool{}}
	l := New(cfg, tb, 1)
	l.RefundHeld(Charge{Rule: 0, FP: 7, N: 1, Release: 100}, 10) // held behind: kept
	l.RefundHeld(Charge{Rule: 0, FP: 8, N: 1, Release: 5}, 10)   // its time passed: spent
	if len(l.kept) != 1 || len(tb.given) != 0 {
		t.Fatalf("kept %+v, given %v: want the first kept, nothing given", l.kept, tb.given)
	}
	tb.back[7] = true
	l.RefundHeld(Charge{Rule: 0, FP: 7, N: 1, Release: 200}, 20) // the later one: both back
	if len(l.kept) != 0 || len(tb.given) != 2 {
		t.Fatalf("kept %+v, given %v: want both given back", l.kept, tb.given)
	}
	l.Begin()
	l.Add(Charge{Rule: 0, FP: 9})
	if c := l.Charged(); len(c) != 1 || c[0].FP != 9 {
		t.Fatalf("charged %+v", c)
	}
	l.KeepKey(append(l.KeyBuf(), "abc"...), 1)
	if string(l.Key()) != "abc" || len(l.KeyBuf()) != 0 {
		t.Fatalf("key %q", l.Key())
	}
}

// TestKeyAndHold: a key's fingerprint depends on the seed, the rule and
// the key; a worker that holds all it can holds nothing more, and a shadow
// rule never holds.
func TestKeyAndHold(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"rules":[{"name":"r","limit":1,"window":"1s","max_delay":"5s"},
	  {"name":"s","limit":1,"window":"1s","max_delay":"5s","shadow":true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	a, b := New(cfg, nil, 1), New(cfg, nil, 2)
	key := []byte("client")
	fa := a.KeepKey(append(a.KeyBuf(), key...), 1)
	if fb := b.KeepKey(append(b.KeyBuf(), key...), 1); fb == fa {
		t.Error("two seeds, one fingerprint")
	}
	if fa2 := a.KeepKey(append(a.KeyBuf(), key...), 2); fa2 == fa {
		t.Error("two rules, one fingerprint")
	}
	if again := a.KeepKey(append(a.KeyBuf(), key...), 1); again != fa || string(a.Key()) != "client" {
		t.Errorf("one key, two fingerprints (%x, %x), key %q", fa, again, a.Key())
	}
	r, s := &cfg.Rules[0], &cfg.Rules[1]
	if a.MaxDelay(r) != 5*time.Second || a.MaxDelay(s) != 0 {
		t.Errorf("max delay %v, shadow %v: want 5s, 0", a.MaxDelay(r), a.MaxDelay(s))
	}
	a.SetHoldsFull(true)
	if a.MaxDelay(r) != 0 {
		t.Error("a worker that holds all it can holds one more")
	}
}
