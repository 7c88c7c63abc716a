package engine

import (
	"testing"
	"time"
)

// A global rule's charge after the response that the lease could not
// cover is a debt, sent to the service at once. When that call fails (the
// service down), and again when the next one (the tick's, or a lease call
// carrying it) fails, the debt stays owed and reaches the service once it
// answers again: the service ends up counting every unit the responses
// reported. (It was dropped: the client got the units free.)
func TestGlobalDebtKeptWhenTheCallFails(t *testing.T) {
	for _, via := range []string{"tick", "lease call"} {
		t.Run(via, func(t *testing.T) { debtAcrossFailure(t, via == "lease call") })
	}
}

func debtAcrossFailure(t *testing.T, viaLease bool) {
	e := New(mustConfig(t, `{"rules":[{"name":"g","scope":"global","limit":100000,"window":"1h","key":["header:x-client"],
		"cost":{"response_header":"x-used","max":1000}}],"global":{"cluster":"ratelimit","timeout":"50ms"}}`), newMemStore(), 7, wallClock)

	svc := &fakeService{limit: 100000}
	var decided []Verdict
	e.SetGlobal(svc, func(p *Pending, v *Verdict) { decided = append(decided, *v) })
	now := t0 + int64(time.Second)
	e.Now = func() int64 { return now }
	deliver := func() {
		for len(svc.pending) > 0 {
			svc.deliver()
		}
	}
	admit := func() Verdict {
		decided = decided[:0]
		v := e.Decide(req("/", "GET", "10.0.0.1:1", "x-client", "c"), now)
		if v.Outcome == Call {
			deliver()
			if len(decided) != 1 {
				t.Fatalf("%d verdicts from the call", len(decided))
			}
			v = decided[0]
		}
		if v.Outcome != Allow {
			t.Fatalf("outcome %v", v.Outcome)
		}
		return v
	}
	v := admit()
	// The service goes down: the call sent with the charge fails.
	svc.down = true
	e.Settle(&v, resp("200", "x-used", "1000"), now) // far more than the lease holds
	deliver()
	if e.PendingCharges() != 1 {
		t.Fatalf("%d debts after a charge of 1000 whose call failed, want 1", e.PendingCharges())
	}
	var owed uint32
	e.debts.Each(func(d *debt) bool { owed = d.Hits(); return true })
	// The next call carrying the debt fails too.
	if viaLease {
		// Drain the lease so that the next admission calls the service,
		// carrying the debt (hits_addend = lease + debt).
		for e.PendingCharges() > 0 && len(svc.pending) == 0 {
			e.Decide(req("/", "GET", "10.0.0.1:1", "x-client", "c"), now)
		}
	} else {
		now += int64(100 * time.Millisecond)
		e.Sweep(now)
	}
	if len(svc.pending) == 0 {
		t.Fatal("no call sent")
	}
	deliver()
	t.Logf("owed %d; after the failed call: %d debts, charge errors %d", owed, e.PendingCharges(), e.Stats.ChargeErrors)
	// The service comes back; the ticks send what is owed.
	svc.down = false
	counted := svc.count
	for i := 0; i < 600 && e.PendingCharges() > 0; i++ {
		now += int64(100 * time.Millisecond)
		e.Sweep(now)
		deliver()
	}
	if e.PendingCharges() != 0 || svc.count-counted < owed {
		t.Errorf("after the service came back: %d debts left, the service counted %d more, want the %d owed", e.PendingCharges(), svc.count-counted, owed)
	}
}
