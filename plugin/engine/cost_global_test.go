package engine

import (
	"math/rand/v2"
	"testing"
	"time"
)

// Three Envoys (one worker each) share a response-charged global rule
// through one service: admissions never exceed the limit (each takes a
// hit of a lease), the service is charged at least what the responses
// said (the rest is leases not used yet), the engines count exactly what
// the responses said, and admission stops once the budget is spent.
func TestCostGlobalFleet(t *testing.T) {
	const doc = `{"rules":[{"name":"g","scope":"global","limit":1000,"window":"1m","key":["header:x-client"],
		"cost":{"response_header":"x-used","max":50}}],"global":{"cluster":"ratelimit","timeout":"50ms"}}`
	cfg := mustConfig(t, doc)
	svc := &fakeService{limit: 1000}
	now := t0 + int64(time.Second)
	var fleet []*Engine
	var decided []Verdict
	for i := 0; i < 3; i++ {
		e := New(cfg, newMemStore(), 7, wallClock)
		e.SetGlobal(svc, func(p *Pending, v *Verdict) { decided = append(decided, *v) })
		e.Now = func() int64 { return now }
		fleet = append(fleet, e)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	admitted, refused, reported := 0, 0, uint64(0)
	settle := func(e *Engine, v *Verdict) {
		n := rng.IntN(50) + 1
		e.Settle(v, resp("200", "x-used", itoa(n)), now)
		reported += uint64(n)
		admitted++
	}
	for round := 0; round < 400; round++ {
		// A few requests in flight at once, on random Envoys.
		type flight struct {
			e *Engine
			v Verdict
		}
		var inflight []flight
		for k := rng.IntN(4) + 1; k > 0; k-- {
			e := fleet[rng.IntN(3)]
			v := e.Decide(req("/", "GET", "10.0.0.1:1", "x-client", "c"), now)
			switch v.Outcome {
			case Allow:
				inflight = append(inflight, flight{e, v})
			case Call:
				decided = decided[:0]
				for len(svc.pending) > 0 {
					svc.deliver()
				}
				for _, d := range decided {
					if d.Outcome == Allow {
						inflight = append(inflight, flight{e, d})
					} else {
						refused++
					}
				}
			default:
				refused++
			}
		}
		for i := range inflight {
			settle(inflight[i].e, &inflight[i].v)
		}
		now += int64(10 * time.Millisecond)
		for _, e := range fleet {
			e.Sweep(now) // the tick sends what the leases could not cover
		}
		for len(svc.pending) > 0 {
			svc.deliver()
		}
	}
	var charged uint64
	for _, e := range fleet {
		charged += e.Stats.Rules[0].Charged
	}
	if charged != reported {
		t.Fatalf("engines charged %d, responses said %d", charged, reported)
	}
	if uint64(svc.count) < reported {
		t.Fatalf("the service counted %d, less than the %d charged", svc.count, reported)
	}
	if admitted > 1000 {
		t.Fatalf("admitted %d requests on a budget of 1000", admitted)
	}
	if refused == 0 {
		t.Fatal("the budget was never spent")
	}
	// Once spent, admission stops: every Envoy refuses.
	for i, e := range fleet {
		v := e.Decide(req("/", "GET", "10.0.0.1:1", "x-client", "c"), now)
		if v.Outcome == Call {
			decided = decided[:0]
			svc.deliver()
			if len(decided) != 1 {
				t.Fatalf("envoy %d: %d decisions", i, len(decided))
			}
			v = decided[0]
		}
		if v.Outcome != Reject {
			t.Fatalf("envoy %d admits after the budget is spent (service count %d)", i, svc.count)
		}
	}
	t.Logf("admitted %d, refused %d; charged %d units (the responses said %d); the service counted %d (leases not used: %d); over the limit by %d",
		admitted, refused, charged, reported, svc.count, uint64(svc.count)-charged, int64(charged)-1000)
}

// Requests that wait for one call each pay their own request_header cost
// once the answer admits them (not the cost of the request that sent the
// call).
func TestCostGlobalWaitersPayTheirOwnCost(t *testing.T) {
	const doc = `{"rules":[{"name":"g","scope":"global","limit":1000,"window":"1m","key":["header:x-client"],
		"cost":{"request_header":"x-cost","max":50}}],"global":{"cluster":"ratelimit","timeout":"50ms"}}`
	svc := &fakeService{limit: 1000}
	now := t0 + int64(time.Second)
	e := New(mustConfig(t, doc), newMemStore(), 7, wallClock)
	var decided []Verdict
	e.SetGlobal(svc, func(p *Pending, v *Verdict) { decided = append(decided, *v) })
	e.Now = func() int64 { return now }
	for _, c := range []string{"5", "9", "2"} {
		if v := e.Decide(req("/", "GET", "10.0.0.1:1", "x-client", "c", "x-cost", c), now); v.Outcome != Call {
			t.Fatalf("cost %s: %v, want a wait for the call", c, v.Outcome)
		}
	}
	for i := 0; i < 5 && (len(svc.pending) > 0 || e.PendingCharges() > 0); i++ {
		svc.deliver()
		now += int64(20 * time.Millisecond)
		e.Sweep(now)
	}
	if len(decided) != 3 {
		t.Fatalf("%d decided, want 3", len(decided))
	}
	if got := e.Stats.Rules[0].Charged; got != 16 {
		t.Fatalf("charged %d, want 5+9+2 = 16", got)
	}
	if svc.count < 16 {
		t.Fatalf("the service counted %d, less than 16", svc.count)
	}
}
