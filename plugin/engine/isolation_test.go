package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestFloodOnOneRuleLeavesOthersAlone: a flood of invented header values
// on rule keys (5x max_keys) fills only that rule's share of the table.
// New clients of rule login still get their own burst, never on_error; the
// flooding rule's client that held a slot keeps its exact state; its new
// values are limited together on its overflow state.
func TestFloodOnOneRuleLeavesOthersAlone(t *testing.T) {
	for _, onError := range []string{"allow", "deny"} {
		t.Run(onError, func(t *testing.T) {
			cfg := mustConfig(t, `{"rules":[
				{"name":"keys","match":{"path_prefix":"/k"},"key":["header:x-api-key"],"limit":2,"window":"1h","burst":2},
				{"name":"login","match":{"path_prefix":"/login"},"limit":2,"window":"1h","burst":2}],
				"max_keys":900,"on_error":"`+onError+`"}`)
			store := newMemStore()
			e := New(cfg, store, 7, wallClock)
			now := t0
			// An old client of the flooding rule spends one of its two.
			if e.Decide(req("/k", "GET", "10.0.0.1:1", "x-api-key", "old"), now).Outcome != Allow {
				t.Fatal("old client not admitted")
			}
			admitted := 0
			for i := 0; i < 5*900; i++ {
				now += int64(time.Millisecond)
				if e.Decide(req("/k", "GET", "10.0.0.2:1", "x-api-key", fmt.Sprint("flood-", i)), now).Outcome == Allow {
					admitted++
				}
			}
			share := e.Table().RegionCapacity(0)
			t.Logf("flood of %d values: %d admitted, share %d states, %d decisions on the overflow", 5*900, admitted, share, e.Table().Overflow[0])
			// Each value holding a slot had its burst of 2; the overflow
			// state admitted its burst of 2 for all the others together.
			if admitted > 2*share+2 {
				t.Errorf("flood: %d admitted, want at most %d (2 per slot of the rule's share and 2 on its overflow)", admitted, 2*share+2)
			}
			if e.Table().Overflow[0] == 0 {
				t.Error("no decision counted on the flooding rule's overflow state")
			}
			// New values are limited together: none of 20 more gets in.
			for i := 0; i < 20; i++ {
				if v := e.Decide(req("/k", "GET", "10.0.0.2:1", "x-api-key", fmt.Sprint("late-", i)), now); v.Outcome != Reject || v.Err != nil {
					t.Fatalf("new value %d after the flood: outcome %d err %v, want a rejection on the overflow state", i, v.Outcome, v.Err)
				}
			}
			// The old client keeps its state: one left, then rejected.
			if e.Decide(req("/k", "GET", "10.0.0.1:1", "x-api-key", "old"), now).Outcome != Allow ||
				e.Decide(req("/k", "GET", "10.0.0.1:1", "x-api-key", "old"), now).Outcome != Reject {
				t.Error("the old client of the flooding rule lost its state")
			}
			// Four new clients of login: exactly their burst each.
			for c := 0; c < 4; c++ {
				ok := 0
				for i := 0; i < 10; i++ {
					v := e.Decide(req("/login", "POST", fmt.Sprintf("10.1.0.%d:1", c), ""), now)
					if v.Err != nil {
						t.Fatalf("login client %d decided by on_error: %v", c, v.Err)
					}
					if v.Outcome == Allow {
						ok++
					}
				}
				if ok != 2 {
					t.Errorf("login client %d: %d of 10 admitted, want its burst of 2", c, ok)
				}
			}
			if e.Stats.OnErrorAllowed+e.Stats.OnErrorDenied != 0 || e.Table().Stats.Full != 0 {
				t.Errorf("on_error decided %d, full %d: a flood is not an error", e.Stats.OnErrorAllowed+e.Stats.OnErrorDenied, e.Table().Stats.Full)
			}
			if n, max := store.bytes(), 900*slotSize+1024; n > max {
				t.Errorf("store holds %d bytes, bound for max_keys 900 is %d", n, max)
			}
		})
	}
}

// TestRegionKeysDoNotDependOnOtherRules: a rule's bucket keys derive from
// its ID and share only, so adding a rule with its own max_keys leaves the
// other rule's states where they were, and a share that changes moves only
// the clients of the buckets added or dropped.
func TestRegionKeysDoNotDependOnOtherRules(t *testing.T) {
	one := mustConfig(t, `{"rules":[{"name":"a","limit":1,"window":"1h","max_keys":500}],"max_keys":1000}`)
	two := mustConfig(t, `{"rules":[{"name":"b","limit":1,"window":"1h"},{"name":"a","limit":1,"window":"1h","max_keys":500}],"max_keys":1000}`)
	ta, tb := NewTable(nil, Regions(one)), NewTable(nil, Regions(two))
	for fp := uint64(1); fp < 5000; fp += 7 {
		if ka, kb := ta.bucketKey(&ta.regions[0], fp), tb.bucketKey(&tb.regions[1], fp); ka != kb {
			t.Fatalf("fp %d: key %s with one rule, %s with two", fp, ka, kb)
		}
	}
	// Without max_keys, a's share halves: only the clients of the dropped
	// buckets move.
	half := mustConfig(t, `{"rules":[{"name":"b","limit":1,"window":"1h"},{"name":"a","limit":1,"window":"1h"}],"max_keys":1000}`)
	full := mustConfig(t, `{"rules":[{"name":"a","limit":1,"window":"1h"}],"max_keys":1000}`)
	th, tf := NewTable(nil, Regions(half)), NewTable(nil, Regions(full))
	nh, nf := uint64(th.RegionBuckets(1)), uint64(tf.RegionBuckets(0))
	moved, total := 0, 0
	for fp := uint64(1); fp < 200000; fp += 13 {
		total++
		if jumpHash(fp, nh) != jumpHash(fp, nf) {
			moved++
			if jumpHash(fp, nf) < nh {
				t.Fatalf("fp %d moved although its bucket %d is kept", fp, jumpHash(fp, nf))
			}
		}
	}
	if want := float64(nf-nh) / float64(nf); float64(moved)/float64(total) > want*1.1 {
		t.Errorf("%d of %d clients moved from %d to %d buckets, want about %.2f", moved, total, nf, nh, want)
	}
}

// TestStartOverflowOncePerEpisode: of two workers seeing a rule's overflow,
// one reports the start of the episode; none again while decisions keep
// coming; a new episode after OverflowQuiet without any.
func TestStartOverflowOncePerEpisode(t *testing.T) {
	cfg := mustConfig(t, `{"rules":[{"name":"a","limit":1,"window":"1h"},{"name":"b","limit":1,"window":"1h"}]}`)
	store := newMemStore()
	w1, w2 := NewTable(store, Regions(cfg)), NewTable(store, Regions(cfg))
	starts := 0
	now := t0
	for s := 0; s < 120; s++ { // two minutes of overflow, both workers each second
		now += int64(time.Second)
		for _, w := range []*Table{w1, w2} {
			if w.StartOverflow(0, now) {
				starts++
			}
		}
	}
	if starts != 1 {
		t.Errorf("%d episode starts during one continuous flood, want 1", starts)
	}
	if !w2.StartOverflow(1, now) {
		t.Error("rule b's first overflow did not start its own episode")
	}
	if !w2.StartOverflow(0, now+int64(OverflowQuiet)+1) {
		t.Error("no new episode after a quiet minute")
	}
}

// TestGlobalFloodUsesTheOverflowLease: a flood of new header values on
// global rule g past its share of the table is counted on g's overflow
// lease under one descriptor ("overflow"): a call per lease, not one per
// request; a new client of global rule h still gets a lease of its own,
// never on_error.
func TestGlobalFloodUsesTheOverflowLease(t *testing.T) {
	cfg := mustConfig(t, `{"rules":[
		{"name":"g","scope":"global","limit":100000,"window":"1m","key":["header:x-client"]},
		{"name":"h","match":{"path_prefix":"/h"},"scope":"global","limit":5,"window":"1m"}],
		"global":{"cluster":"ratelimit","timeout":"50ms"},"on_error":"deny","max_keys":36}`)
	e := New(cfg, newMemStore(), 7, wallClock)
	svc := &fakeService{limit: 1 << 30}
	var decided []*Verdict
	e.SetGlobal(svc, func(p *Pending, v *Verdict) { c := *v; decided = append(decided, &c) })
	now := t0 + int64(time.Second)
	e.Now = func() int64 { return now }
	decide := func(r *fakeRequest) Verdict {
		v := e.Decide(r, now)
		if v.Outcome == Call {
			svc.deliver()
			svc.deliver() // a waiter's follow-up call
			v = *decided[len(decided)-1]
		}
		return v
	}
	for i := 0; i < 500; i++ {
		now += int64(time.Millisecond)
		if v := decide(req("/", "GET", "10.0.0.1:1", "x-client", fmt.Sprint("k", i))); v.Outcome != Allow || v.Err != nil {
			t.Fatalf("flood request %d: outcome %d err %v", i, v.Outcome, v.Err)
		}
	}
	overflowCalls := 0
	for _, b := range svc.bodies {
		if strings.Contains(string(b), overflowDescriptor) {
			overflowCalls++
		}
	}
	slots := e.Table().RegionCapacity(0) - 1
	t.Logf("500 new values, %d slots: %d calls (%d for the overflow lease), %d decisions on the overflow", slots, len(svc.calls), overflowCalls, e.Table().Overflow[0])
	if len(svc.calls) > slots+20 || overflowCalls == 0 || e.Table().Overflow[0] != uint64(500-slots) {
		t.Errorf("%d calls (%d overflow) for 500 values with %d slots; overflow decisions %d, want %d", len(svc.calls), overflowCalls, slots, e.Table().Overflow[0], 500-slots)
	}
	for c := 0; c < 3; c++ {
		if v := decide(req("/h", "GET", fmt.Sprintf("10.1.0.%d:1", c), "x-client", "k0")); v.Outcome != Allow || v.Err != nil {
			t.Errorf("new client %d of h: outcome %d err %v", c, v.Outcome, v.Err)
		}
	}
	if e.Stats.OnErrorDenied != 0 || e.Table().Overflow[1] != 0 {
		t.Errorf("on_error denied %d, h's overflow decisions %d", e.Stats.OnErrorDenied, e.Table().Overflow[1])
	}
}

// TestConcurrencyFloodSharesTheOverflowSlots: a concurrency rule keyed by a
// header, flooded with new values that each hold a slot past the rule's
// share: the new values share the rule's overflow state (limit in flight
// for all of them together), another rule's new clients are untouched, and
// releasing the slots gives them back on the overflow state.
func TestConcurrencyFloodSharesTheOverflowSlots(t *testing.T) {
	cfg := mustConfig(t, `{"rules":[
		{"name":"conc","match":{"path_prefix":"/c"},"key":["header:x-key"],"algorithm":"concurrency","limit":2},
		{"name":"login","match":{"path_prefix":"/login"},"limit":2,"window":"1h"}],"max_keys":36,"on_error":"deny"}`)
	e := New(cfg, newMemStore(), 7, wallClock)
	now := t0
	var held []SlotRef
	admitted := 0
	for i := 0; i < 100; i++ {
		v := e.Decide(req("/c", "GET", "10.0.0.1:1", "x-key", fmt.Sprint("k", i)), now)
		if v.Err != nil {
			t.Fatalf("value %d: on_error decided: %v", i, v.Err)
		}
		if v.Outcome == Allow {
			admitted++
			held = append(held, v.Slots...)
		}
	}
	slots := e.Table().RegionCapacity(0) - 1
	// One in flight per value with a slot, 2 on the overflow state.
	if admitted != slots+2 {
		t.Errorf("%d of 100 new values in flight, want %d (a slot each) + 2 (the overflow state)", admitted, slots)
	}
	for c := 0; c < 3; c++ {
		ok := 0
		for i := 0; i < 3; i++ {
			if v := e.Decide(req("/login", "POST", fmt.Sprintf("10.1.0.%d:1", c)), now); v.Outcome == Allow {
				ok++
			}
		}
		if ok != 2 {
			t.Errorf("login client %d: %d of 3 admitted, want 2", c, ok)
		}
	}
	e.Release(held, now+int64(time.Millisecond))
	if v := e.Decide(req("/c", "GET", "10.0.0.1:1", "x-key", "late"), now+int64(2*time.Millisecond)); v.Outcome != Allow {
		t.Errorf("after the releases a new value is refused: %d", v.Outcome)
	}
}

// TestShareChangeKeepsStates: when a rule's share changes (another rule
// without max_keys added, then removed), its clients whose bucket moved
// keep their state: found in the previous layout while it may hold active
// states; after that, the lookup stops.
func TestShareChangeKeepsStates(t *testing.T) {
	one := mustConfig(t, `{"rules":[{"name":"a","limit":2,"window":"1h"}],"max_keys":1000}`)
	two := mustConfig(t, `{"rules":[{"name":"b","limit":2,"window":"1h"},{"name":"a","limit":2,"window":"1h"}],"max_keys":1000}`)
	store := newMemStore()
	lim := &one.Rules[0].Limit
	const clients = 300
	fp := func(c int) uint64 { return uint64(c+1) * 0x9E3779B97F4A7C15 }
	tables := []*Table{NewTable(store, Regions(one)), NewTable(store, Regions(two)), NewTable(store, Regions(one))}
	rules := []int{0, 1, 0} // rule a's region in each
	now := t0
	for k, tb := range tables {
		tb.AdoptLayouts(now)
		for c := 0; c < clients; c++ {
			d, _, err := tb.Update(Charge, fp(c), rules[k], lim, now, 1, 0)
			want := k < 2 // 2 per hour: the third charge is refused
			if err != nil || d.Allowed != want {
				t.Fatalf("layout %d, client %d: allowed %v (err %v), want %v: the client lost its state", k, c, d.Allowed, err, want)
			}
		}
		now += int64(time.Minute)
	}
	// Once the previous layout's states have all recovered (2 hours after
	// the change), it is no longer read.
	at := now + int64(3*time.Hour)
	later := NewTable(store, Regions(one))
	later.AdoptLayouts(at)
	rg := &later.regions[0]
	if rg.prevBuckets == 0 || rg.prevUntil > at {
		t.Errorf("layout record: prev %d until %d, want a previous layout that ended before %d", rg.prevBuckets, rg.prevUntil, at)
	}
	for c := 0; c < clients; c++ {
		if ok, _ := later.previous(rg, &spot{fp: fp(c), i: -1}, -1, at); ok {
			t.Fatalf("client %d still looked up in the previous layout after its states recovered", c)
		}
	}
}
