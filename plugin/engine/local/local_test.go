package local

import (
	"testing"

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
	l := New(cfg, tb)
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
	l.KeepKey(append(l.KeyBuf(), "abc"...))
	if string(l.Key()) != "abc" || len(l.KeyBuf()) != 0 {
		t.Fatalf("key %q", l.Key())
	}
}
