package engine

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/plugin/config"
)

// layoutStressSeeds is how many random runs TestLayoutsUnderRandomInterleavings makes.
var layoutStressSeeds = uint64(600)

// TestLayoutsUnderRandomInterleavings: workers of two configurations whose
// layouts of a rule differ (2 and 4 buckets) adopt them in a random order,
// more start while requests are decided (the record flips between the
// layouts, and the others learn it at their next renewal, once a second),
// states expire, buckets fill, and a charge of another worker is injected
// before random sets (the interleavings of workers of one process). No
// client is admitted on its own states more than its burst (5) in ten
// minutes: its state is never duplicated.
func TestLayoutsUnderRandomInterleavings(t *testing.T) {
	beside, alone := mustConfig(t, layoutBeside), mustConfig(t, layoutAlone)
	// Seeds that once found a duplicated state (each about 1 in 4,000; a
	// scan of 36,000 seeds): they run every time.
	// With the count of layout record writes (LayoutSignal: tables skip
	// the record's read before a fresh state while it is unchanged) and
	// without it (the read every time).
	for _, signal := range []bool{true, false} {
		for _, seed := range layoutRaceSeeds {
			layoutInterleaving(t, beside, alone, seed, signal)
		}
		for seed := uint64(0); seed < layoutStressSeeds; seed++ {
			layoutInterleaving(t, beside, alone, seed, signal)
		}
	}
}

// layoutRaceSeeds are seeds of layoutInterleaving that found a client
// admitted on two states (fixed since).
var layoutRaceSeeds = []uint64{3212, 8285, 14986, 15404, 16932, 20726, 23192, 25387, 27356, 30786, 32621, 32749, 33218}

// layoutInterleaving is one random run of TestLayoutsUnderRandomInterleavings.
func layoutInterleaving(t *testing.T, beside, alone *config.Config, seed uint64, signal bool) {
	t.Helper()
	lim := &alone.Rules[0].Limit
	{
		r := rand.New(rand.NewPCG(seed, 11))
		store := newMemStore()
		store.noSignal = !signal
		at := t0
		var tabs []*Table
		start := func() {
			cfg := beside
			if r.IntN(2) == 0 {
				cfg = alone
			}
			tb := NewTable(store, Regions(cfg))
			tb.AdoptLayouts(at)
			tabs = append(tabs, tb)
		}
		for i := 0; i < 2+r.IntN(4); i++ {
			start()
			at += int64(time.Millisecond)
		}
		renew := func() {
			for _, tb := range tabs {
				tb.RenewLayouts(at)
			}
		}
		clients := make([]uint64, 30)
		for i := range clients {
			clients[i] = uint64(i+2) * 0xD6E8FEB86659FD93
		}
		admitted := map[uint64]int{}
		counting := false
		inject := 0
		var busy *Table
		charge := func(tb *Table, fp uint64) {
			if inject == 0 {
				busy = tb
			}
			d, kind, err := tb.Update(Charge, fp, 0, lim, at, 1, 0)
			if err == nil && d.Allowed && counting && kind == SlotOwn {
				admitted[fp]++
			}
		}
		store.beforeSet = func(string) {
			if inject > 0 || r.IntN(4) != 0 {
				return
			}
			other := tabs[r.IntN(len(tabs))]
			if other == busy { // a Table is never re-entered (one per worker)
				return
			}
			inject++
			charge(other, clients[r.IntN(len(clients))])
			inject--
		}
		// Activity, then every state expires, the layouts renewed every
		// minute; workers may start.
		for i := 0; i < 100; i++ {
			charge(tabs[r.IntN(len(tabs))], clients[r.IntN(len(clients))])
		}
		for end := at + int64(3*time.Hour); at < end; at += int64(time.Minute) {
			renew()
			if r.IntN(100) == 0 {
				start()
			}
		}
		for i := 0; i < 60; i++ {
			charge(tabs[r.IntN(len(tabs))], clients[r.IntN(len(clients))])
		}
		at += int64(3 * time.Hour)
		renew()
		// Ten minutes, counted: every worker renews once a second, and
		// one may start in any second (the others learn it at their next
		// renewal).
		counting = true
		for end := at + int64(10*time.Minute); at < end; at += int64(time.Second) {
			renew()
			if r.IntN(60) == 0 {
				start()
			}
			for k := 0; k < 3; k++ {
				charge(tabs[r.IntN(len(tabs))], clients[r.IntN(len(clients))])
			}
		}
		for fp, n := range admitted {
			if n > 5 {
				t.Errorf("seed %d (signal %v): client %x admitted %d times in ten minutes on its own states, want at most 5", seed, signal, fp, n)
			}
		}
	}
}
