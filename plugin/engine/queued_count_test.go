package engine

import (
	"testing"
	"time"
)

// A request that waits in a concurrency rule's queue and is admitted
// later counts in its rate rules' allowed and charged, as one admitted at
// once does: the stats of a rate rule in front of a queue add up to the
// requests that passed it.
func TestQueuedThenAdmittedCountsItsRateRules(t *testing.T) {
	for _, order := range []string{"rate first", "slot first"} {
		t.Run(order, func(t *testing.T) { queuedThenAdmitted(t, order == "slot first") })
	}
}

func queuedThenAdmitted(t *testing.T, slotFirst bool) {
	rate := `{"name":"rate","key":["client_ip"],"limit":100,"window":"1s"}`
	slot := `{"name":"slot","algorithm":"concurrency","limit":1,"key":["path"],"max_delay":"10s"}`
	ri, si := 0, 1
	if slotFirst {
		rate, slot, ri, si = slot, rate, 1, 0
	}
	e := New(mustConfig(t, `{"rules":[`+rate+`,`+slot+`]}`), newMemStore(), 1, wallClock)
	rq := func(id uint32) streamReq { return streamReq{req("/x", "GET", "10.0.0.1:1"), id} }
	v1 := e.Decide(rq(1), t0)
	v2 := e.Decide(rq(2), t0)
	if v1.Outcome != Allow || v2.Outcome != Queue {
		t.Fatalf("setup: %v, %v", v1.Outcome, v2.Outcome)
	}
	now := t0 + int64(100*time.Millisecond)
	e.Release(v1.Slots, now)
	if ev := e.Poll(now, nil); len(ev) != 1 || ev[0].Verdict.Outcome != Allow {
		t.Fatalf("the waiter was not admitted: %+v", ev)
	}
	if st := e.Stats.Rules[ri]; st.Allowed != 2 || st.Charged != 2 {
		t.Errorf("rate rule: allowed %d, charged %d; want 2 and 2 (one admitted at once, one after its wait)", st.Allowed, st.Charged)
	}
	if s := e.Stats.Rules[si]; s.Allowed != 1 || s.Delayed != 1 {
		t.Errorf("slot rule: allowed %d, delayed %d; want 1 and 1", s.Allowed, s.Delayed)
	}
}

// The same with a global rule after the queue: the request admitted from
// the queue is asked of the service, then counted by every rule it passed.
func TestQueuedThenAdmittedCountsItsRateRulesBeforeAGlobalRule(t *testing.T) {
	now := t0 + int64(time.Second)
	e := New(mustConfig(t, `{"rules":[
		{"name":"rate","key":["client_ip"],"limit":100,"window":"1s"},
		{"name":"g","scope":"global","limit":100,"window":"1m","key":["header:x-client"]},
		{"name":"slot","algorithm":"concurrency","limit":1,"key":["path"],"max_delay":"10s"}],
		"global":{"cluster":"ratelimit","timeout":"50ms"}}`), newMemStore(), 7, wallClock)

	svc := &fakeService{limit: 100}
	var admitted []*Verdict
	e.SetGlobal(svc, func(p *Pending, v *Verdict) {
		if v.Outcome == Allow || v.Outcome == Delay {
			c := *v
			admitted = append(admitted, &c)
		}
	})
	e.Now = func() int64 { return now }
	rq := func(id uint32) streamReq { return streamReq{req("/x", "GET", "10.0.0.1:1", "x-client", "a"), id} }
	v1 := e.Decide(rq(1), now)
	v2 := e.Decide(rq(2), now)
	svc.deliver()
	if v2.Outcome != Queue || len(admitted) != 1 {
		t.Fatalf("setup: %v, %v; %d admitted", v1.Outcome, v2.Outcome, len(admitted))
	}
	now += int64(100 * time.Millisecond)
	e.Release(admitted[0].Slots, now)
	e.Poll(now, nil)
	svc.deliver()
	if len(admitted) != 2 {
		t.Fatalf("%d admitted, want 2", len(admitted))
	}
	if st := e.Stats.Rules[0]; st.Allowed != 2 || st.Charged != 2 {
		t.Errorf("rate rule: allowed %d, charged %d; want 2 and 2 (one admitted at once, one after its wait)", st.Allowed, st.Charged)
	}
	if st := e.Stats.Rules[1]; st.Allowed != 2 {
		t.Errorf("global rule: allowed %d, want 2", st.Allowed)
	}
}
