package engine

import (
	"testing"
	"time"
)

// A request delayed by a local rate rule (1/s, max_delay) that then waits
// for a global rule's call carries a reservation of the rate: B, of the
// same client but not matched by the global rule, arrives while the call
// is in flight and is held behind it. When the global rule refuses A (the
// service answers OVER_LIMIT, or the call fails under on_error: deny), A's
// local charge must not free the turn B was promised: the next request C
// must not be released within a second of B (TestAbandonedWaiterDoesNotFreeAHeldTurn
// for a concurrency waiter, TestUnholdMiddleHeldRequest for a held request).
func TestGlobalRefusalDoesNotFreeAHeldTurn(t *testing.T) {
	for alg, burst := range heldAlgorithms {
		for _, refusal := range []string{"over_limit", "call_failed"} {
			t.Run(alg+"/"+refusal, func(t *testing.T) {
				got := globalRefusal(t, alg, burst, refusal, true, false)
				t.Logf("released at %v", got)
				if n := mostInOneSecond(got); n > 1 {
					t.Errorf("%d requests released within one second at 1/s (releases %v)", n, got)
				}
			})
		}
	}
}

// A request refused by a global rule still gives its local turn back when
// nothing was held behind it, or once what was held behind it leaves too:
// the next request is released at the turn A had (1 s), not behind it.
func TestGlobalRefusalGivesItsTurnBack(t *testing.T) {
	for alg, burst := range heldAlgorithms {
		for _, refusal := range []string{"over_limit", "call_failed"} {
			for _, line := range []string{"none behind", "held leaves after"} {
				t.Run(alg+"/"+refusal+"/"+line, func(t *testing.T) {
					got := globalRefusal(t, alg, burst, refusal, line != "none behind", true)
					if c := got[len(got)-1]; c != time.Second {
						t.Errorf("next request released at %v, want at A's turn, 1s (releases %v)", c, got)
					}
				})
			}
		}
	}
}

// globalRefusal runs the scenario of TestGlobalRefusalDoesNotFreeAHeldTurn:
// W (/fast) is admitted at t0, A (/g) is delayed by the local rule and waits
// for the global rule's call, B (/fast, if behind) arrives 10 ms later and
// is held behind A, the call is answered at 50 ms (refusal: OVER_LIMIT, or
// failed with on_error: deny) and A refused, B leaves at 80 ms if bLeaves,
// C (/fast) comes at 100 ms. It returns when each forwarded request is
// released, from t0.
func globalRefusal(t *testing.T, alg, burst, refusal string, behind, bLeaves bool) []time.Duration {
	t.Helper()
	onError := "allow"
	if refusal == "call_failed" {
		onError = "deny"
	}
	cfg := mustConfig(t, `{"rules":[
		{"name":"r","key":["client_ip"],"algorithm":"`+alg+`","limit":1,"window":"1s"`+burst+`,"max_delay":"10s"},
		{"name":"g","scope":"global","match":{"path_prefix":"/g"},"limit":100,"window":"1m","key":["client_ip"]}],
		"global":{"cluster":"ratelimit","timeout":"100ms"},"on_error":"`+onError+`"}`)
	e := New(cfg, newMemStore(), 1, wallClock)
	svc := &fakeService{limit: 0, down: refusal == "call_failed"}
	var decided []Verdict
	e.SetGlobal(svc, func(p *Pending, v *Verdict) { decided = append(decided, *v) })
	now := t0
	e.Now = func() int64 { return now }
	rq := func(path string) Request { return req(path, "GET", "10.0.0.1:1") }
	vW := e.Decide(rq("/fast"), now)
	vA := e.Decide(rq("/g"), now)
	if vW.Outcome != Allow || vA.Outcome != Call || vA.Delay == 0 {
		t.Fatalf("setup: W %v, A %v (delay %v), want A delayed and waiting for its call", vW.Outcome, vA.Outcome, vA.Delay)
	}
	out := []time.Duration{0}
	var vB Verdict
	if behind {
		now = t0 + int64(10*time.Millisecond)
		vB = e.Decide(rq("/fast"), now)
		if vB.Outcome != Delay {
			t.Fatalf("setup: B %v, want held behind A", vB.Outcome)
		}
		if !bLeaves {
			out = append(out, time.Duration(now-t0)+vB.Delay)
		}
	}
	now = t0 + int64(50*time.Millisecond)
	svc.deliver()
	if len(decided) != 1 || decided[0].Outcome != Reject {
		t.Fatalf("setup: A not refused by the global rule: %+v", decided)
	}
	if bLeaves {
		now = t0 + int64(80*time.Millisecond)
		e.Unhold(&vB, now)
	}
	now = t0 + int64(100*time.Millisecond)
	if vC := e.Decide(rq("/fast"), now); vC.Outcome != Reject {
		out = append(out, time.Duration(now-t0)+vC.Delay)
	}
	return out
}

// Refuse (a local rule rejects the request as it is decided) gives back
// the charges made earlier in the same decision. This worker decides
// nothing in between, but the table is shared by the workers: between A's
// charge of the rate rule r (held until 1 s) and its refund after rule x
// rejects it, a request B of the same client on another worker may be
// held behind A (until 2 s). A's charge must then not free B's turn: the
// next request C must not be released with B.
func TestRefuseDoesNotFreeAnotherWorkersHeldTurn(t *testing.T) {
	for alg, burst := range heldAlgorithms {
		t.Run(alg, func(t *testing.T) {
			cfg := mustConfig(t, `{"rules":[
				{"name":"r","key":["client_ip"],"algorithm":"`+alg+`","limit":1,"window":"1s"`+burst+`,"max_delay":"10s"},
				{"name":"x","match":{"path_prefix":"/x"},"key":["client_ip"],"algorithm":"fixed_window","limit":1,"window":"1m"}]}`)
			rq := func(path string) Request { return req(path, "GET", "10.0.0.1:1") }
			// W takes r's turn at 0 and x's one request; A (/x) is then
			// charged by r (held until 1 s) and rejected by x. A dry run
			// counts the shared-data writes of A's decision: the last is
			// the refund of r.
			n := 0
			{
				st := newMemStore()
				w := New(cfg, st, 1, wallClock)
				w.Decide(rq("/x"), t0)
				st.beforeSet = func(string) { n++ }
				if vA := w.Decide(rq("/x"), t0); vA.Outcome != Reject {
					t.Fatalf("setup: A %v, want rejected by x", vA.Outcome)
				}
			}
			st := newMemStore()
			w1, w2 := New(cfg, st, 1, wallClock), New(cfg, st, 1, wallClock)
			w1.Decide(rq("/x"), t0)
			var vB Verdict
			k := 0
			st.beforeSet = func(string) {
				if k++; k == n { // just before A's refund is written
					vB = w2.Decide(rq("/fast"), t0)
				}
			}
			vA := w1.Decide(rq("/x"), t0)
			st.beforeSet = nil
			if vA.Outcome != Reject || vB.Outcome != Delay {
				t.Fatalf("setup: A %v, B %v, want A rejected and B held behind it", vA.Outcome, vB.Outcome)
			}
			got := []time.Duration{0, vB.Delay}
			now := t0 + int64(100*time.Millisecond)
			if vC := w2.Decide(rq("/fast"), now); vC.Outcome != Reject {
				got = append(got, time.Duration(now-t0)+vC.Delay)
			}
			t.Logf("released at %v", got)
			if m := mostInOneSecond(got); m > 1 {
				t.Errorf("%d requests released within one second at 1/s (releases %v)", m, got)
			}
		})
	}
}

// A client that leaves while its request waits for a global rule's call
// does not pay for it: the local rule's charge comes back (its next
// request is admitted by a local limit of 1), and the late answer takes
// nothing from anyone.
func TestCancelledCallGivesChargesBack(t *testing.T) {
	cfg := mustConfig(t, `{"rules":[
		{"name":"r","key":["client_ip"],"limit":1,"window":"1h"},
		{"name":"g","scope":"global","match":{"path_prefix":"/g"},"limit":100,"window":"1m","key":["client_ip"]}],
		"global":{"cluster":"ratelimit","timeout":"100ms"}}`)
	e := New(cfg, newMemStore(), 1, wallClock)
	svc := &fakeService{limit: 100}
	var decided int
	e.SetGlobal(svc, func(p *Pending, v *Verdict) { decided++ })
	now := t0
	e.Now = func() int64 { return now }
	vA := e.Decide(req("/g", "GET", "10.0.0.1:1"), now)
	if vA.Outcome != Call {
		t.Fatalf("A: %v, want waiting for its call", vA.Outcome)
	}
	now += int64(10 * time.Millisecond)
	e.CancelPending(vA.Pending, now)
	for _, answer := range svc.pending {
		answer()
	}
	if decided != 0 {
		t.Errorf("the cancelled request was decided %d times after its answer", decided)
	}
	if v := e.Decide(req("/other", "GET", "10.0.0.1:1"), now); v.Outcome != Allow {
		t.Errorf("the client's next request: %v, want admitted (the cancelled one's charge given back)", v.Outcome)
	}
	if v := e.Decide(req("/other", "GET", "10.0.0.1:1"), now); v.Outcome != Reject {
		t.Errorf("and the one after: %v, want refused (limit 1)", v.Outcome)
	}
}
