package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A client on a global rule's overflow lease at one Envoy (its share of the
// table is full there) and on its own lease at another is counted at the
// service under two descriptors: without more, it gets its own limit plus
// the overflow's across the fleet.

const overflowFleetDoc = `{"rules":[{"name":"g","scope":"global","limit":%d,"window":"1m","key":["header:x-client"],"max_keys":9}],
	"global":{"cluster":"ratelimit","timeout":"50ms"}}`

// fillShare admits one request of n distinct clients through wk, so that
// every bucket of the rule's share at wk's Envoy holds an active client.
func (f *costFleet) fillShare(wk *costWorker, n int) {
	for i := 0; i < n; i++ {
		if v := f.decide(wk, fmt.Sprint("filler-", i)); v.Outcome != Allow {
			f.t.Fatalf("filler %d: %v, want admitted", i, v.Outcome)
		}
		f.advance(time.Millisecond)
	}
}

// overflowAdmitted sends n requests of client c one after another, each
// spacing after the previous, alternating between the workers of Envoy
// A (where c is on the overflow lease) and those of Envoy B (where c has
// its own lease). It returns the requests admitted through A and B, and how
// many of A's decisions were made on the overflow lease.
func overflowAdmitted(f *costFleet, perEnvoy, n int, spacing time.Duration, c string) (atA, atB int, onOverflow uint64) {
	a, b := f.workers[:perEnvoy], f.workers[perEnvoy:2*perEnvoy]
	ov0 := a[0].e.table.Stats.Overflow
	for i := 0; i < n; i++ {
		f.advance(spacing)
		at := b
		if i%2 == 0 {
			at = a
		}
		wk := at[(i/2)%perEnvoy]
		if v := f.decide(wk, c); v.Outcome == Allow {
			if i%2 == 0 {
				atA++
			} else {
				atB++
			}
		}
	}
	f.advance(time.Second) // the last debts reach the service
	return atA, atB, a[0].e.table.Stats.Overflow - ov0
}

// A client whose requests alternate between an Envoy where the rule's share
// is full (it is decided on the overflow lease) and one where it has its
// own lease gets, across both, at most its limit plus what it sends at the
// first Envoy in one tick and one round trip of the service (the debts of
// its overflow admissions go to its own descriptor from the tick, and the
// answer over the limit bars it from the overflow), per worker of the
// first Envoy: here limit + 4 with requests 5 ms apart (one at each of the
// first Envoy's 2 workers every 20 ms; a tick is 20 ms, answers take up to
// 2 ms), limit + 2 with requests 23 ms apart, limit + 12 with requests
// 1 ms apart. Before, it got its limit on
// its own descriptor plus the overflow's limit (2x).
func TestGlobalOverflowClientWithinItsLimitAcrossTheFleet(t *testing.T) {
	for _, spacing := range []time.Duration{time.Millisecond, 5 * time.Millisecond, 23 * time.Millisecond} {
		for seed := uint64(1); seed <= 10; seed++ {
			overflowClientRun(t, spacing, seed)
		}
	}
}

// overflowClientRun is one run of
// TestGlobalOverflowClientWithinItsLimitAcrossTheFleet: the client's
// requests spacing apart, the service's answers 0-2 ms late at random
// (seed).
func overflowClientRun(t *testing.T, spacing time.Duration, seed uint64) {
	const limit, perEnvoy = 50, 2
	t.Run(fmt.Sprint(spacing, "/seed", seed), func(t *testing.T) {
		f := newCostFleet(t, fmt.Sprintf(overflowFleetDoc, limit), 2, perEnvoy, limit, time.Minute, seed)
		f.svc.maxMS = 2
		f.fillShare(f.workers[0], 8) // max_keys 9: one bucket of 8 and the overflow state
		atA, atB, ov := overflowAdmitted(f, perEnvoy, 6*limit, spacing, "x")
		t.Logf("spacing %v: admitted %d through A (%d decisions on its overflow lease), %d through B; the service counted %v",
			spacing, atA, ov, atB, f.svc.counts)
		if ov == 0 {
			t.Fatal("the client was never decided on A's overflow lease: the test does not set up what it checks")
		}
		// Each worker of A gets one of the client's requests every
		// 2 x perEnvoy x spacing: those admitted between a tick and
		// the answer to its debt are the overshoot, per worker.
		perWorker := 2 * perEnvoy * spacing
		bound := limit + perEnvoy*int((prefetchTick+2*time.Millisecond+perWorker-1)/perWorker)
		if atA+atB > bound {
			t.Errorf("the client was admitted %d times (%d through A on the overflow, %d through B on its own lease), want at most %d (its limit %d plus one tick and a round trip of its requests at A)",
				atA+atB, atA, atB, bound, limit)
		}
		if atA+atB < limit-limit/10 {
			t.Errorf("the client was admitted %d times, want about its limit %d", atA+atB, limit)
		}
	})
}

// A flood of new values on a rule whose share is full: each value admitted
// on the overflow lease owes its own descriptor one hit, and a tick sends
// at most maxChargeCalls of these debts; the rest go with the next ticks,
// until every value's own descriptor has counted its admission.
func TestGlobalOverflowDebtsBoundedPerTick(t *testing.T) {
	const values = 300
	f := newCostFleet(t, fmt.Sprintf(overflowFleetDoc, 100000), 1, 1, 100000, time.Minute, 3)
	wk := f.workers[0]
	f.fillShare(wk, 8)
	for i := 0; i < values; i++ {
		if v := f.decide(wk, fmt.Sprint("flood-", i)); v.Outcome != Allow {
			t.Fatalf("value %d: %v, want admitted on the overflow lease", i, v.Outcome)
		}
	}
	const perTick = 64 // the documented bound (maxChargeCalls)
	owed := wk.e.PendingCharges()
	t.Logf("%d values owe their own descriptor after the flood", owed)
	if owed <= 2*perTick {
		t.Fatalf("%d values owe their own descriptor after the flood, want most of %d (a tick or two may have passed)", owed, values)
	}
	for ticks := 0; wk.e.PendingCharges() > 0; ticks++ {
		if ticks > values {
			t.Fatalf("%d debts still owed after %d ticks", wk.e.PendingCharges(), ticks)
		}
		calls := wk.e.Stats.Global.ChargeCalls
		wk.e.Sweep(f.now)
		if sent := wk.e.Stats.Global.ChargeCalls - calls; sent > perTick {
			t.Fatalf("one tick sent %d calls for debts, want at most %d", sent, perTick)
		}
		f.advance(prefetchTick)
	}
	own := 0
	for k, n := range f.svc.counts {
		if !strings.HasPrefix(k, "g|overflow|") {
			own += int(n)
		}
	}
	if own != values+8 {
		t.Errorf("the values' own descriptors counted %d hits, want %d (8 with a state, %d on the overflow)", own, values+8, values)
	}
}

const overflowCostDoc = `{"rules":[{"name":"g","scope":"global","limit":%d,"window":"1m","key":["header:x-client"],"max_keys":9,
	"cost":{"response_header":"x-used","max":%d}}],"global":{"cluster":"ratelimit","timeout":"50ms"}}`

// A rule charged after the response: the client on the overflow lease at
// the first Envoy costs 20 units a request, the clients with a state
// there 1, so the Envoy's deposit (what its requests have been costing)
// is well under the client's cost. What the client's responses cost beyond
// the deposit is owed to its own descriptor too, so across the two Envoys
// it is charged at most its limit plus max - 1 (the bound of requests one
// after another) plus the requests of one tick and a round trip at the
// first Envoy. Owing the deposit alone, it got its own limit in full at
// the second Envoy on top of the overflow's.
func TestGlobalOverflowClientCostWithinItsLimit(t *testing.T) {
	const limit, cost = 1000, 20
	f := newCostFleet(t, fmt.Sprintf(overflowCostDoc, limit, cost), 2, 1, limit, time.Minute, 5)
	a, b := f.workers[0], f.workers[1]
	f.fillShare(a, 8)
	charged := 0
	for i := 0; i < 4*limit/cost; i++ {
		f.advance(5 * time.Millisecond)
		if v := f.decide(a, fmt.Sprint("filler-", i%8)); v.Outcome == Allow {
			a.e.Settle(&v, resp("200", "x-used", "1"), f.now)
		}
		for _, wk := range []*costWorker{a, b} {
			if v := f.decide(wk, "x"); v.Outcome == Allow {
				wk.e.Settle(&v, resp("200", "x-used", itoa(cost)), f.now)
				charged += cost
			}
		}
	}
	f.advance(time.Second)
	// The client's requests at the first Envoy are 5 ms apart (one worker).
	bound := limit + cost - 1 + cost*int((prefetchTick+2*time.Millisecond+5*time.Millisecond-1)/(5*time.Millisecond))
	t.Logf("the client was charged %d units; the service counted %v", charged, f.svc.counts)
	if charged > bound {
		t.Errorf("the client was charged %d units across the two Envoys, want at most %d (its limit %d, max - 1, a tick and a round trip of its requests on the overflow)", charged, bound, limit)
	}
	if charged < limit*9/10 {
		t.Errorf("the client was charged %d units, want about its limit %d", charged, limit)
	}
}
