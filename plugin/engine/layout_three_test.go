package engine

import (
	"testing"
	"time"
)

// layoutThird is rule a in a third share (6 buckets; layoutBeside has 2,
// layoutAlone 4).
const layoutThird = `{"rules":[{"name":"a","limit":5,"window":"1h"}],"max_keys":54}`

// TestThirdLayoutDefersToTheCurrent: two listeners carry configurations
// whose shares of rule a differ (layouts of 2 and 4 buckets); the second
// is reloaded with a third share (6 buckets), so three layouts are live
// while its old workers drain, and the record names only the newest two.
// A new client of the first listener is created where the current
// layout keeps it: the reloaded listener's workers find its state, not a
// fresh budget.
func TestThirdLayoutDefersToTheCurrent(t *testing.T) {
	beside, alone, third := mustConfig(t, layoutBeside), mustConfig(t, layoutAlone), mustConfig(t, layoutThird)
	store := newMemStore()
	l := NewTable(store, Regions(beside)) // the first listener, 2 buckets
	l.AdoptLayouts(t0)
	k := NewTable(store, Regions(alone)) // the second, 4 buckets
	k.AdoptLayouts(t0 + int64(time.Second))
	m := NewTable(store, Regions(third)) // the second, reloaded: 6 buckets
	m.AdoptLayouts(t0 + int64(2*time.Second))
	if m.regions[0].buckets != 6 {
		t.Fatalf("the third layout has %d buckets, want 6", m.regions[0].buckets)
	}
	at := t0 + int64(3*time.Second)
	for _, tb := range []*Table{l, k, m} {
		tb.RenewLayouts(at)
	}
	var xs []uint64 // clients whose buckets differ between 2 and 6 buckets
	for c := uint64(1); len(xs) < 2; c++ {
		if fp := c * 0x9E3779B97F4A7C15; jumpHash(fp, 2) != jumpHash(fp, 6) {
			xs = append(xs, fp)
		}
	}
	if n := charges(t, l, xs[0], at, 3) + charges(t, m, xs[0], at, 3); n != 5 {
		t.Errorf("%d of 6 admitted through the first listener then the reloaded one, want 5 (one budget)", n)
	}
	if n := charges(t, m, xs[1], at, 3) + charges(t, l, xs[1], at, 3); n != 5 {
		t.Errorf("%d of 6 admitted through the reloaded listener then the first one, want 5 (one budget)", n)
	}
}
