package engine

import (
	"testing"
	"time"
)

// TestRedirectNotChargedByGlobalRule: Envoy's internal redirect of a
// request (decided with Redirected) is the same request of the client,
// whose global rule took its hit at the service already: the redirect is
// admitted without a hit of the lease and without a call, and reports the
// rule's numbers. A limit of 3 admits 3 requests, each followed by its
// redirect; the 4th request is refused.
func TestRedirectNotChargedByGlobalRule(t *testing.T) {
	e, svc, decided, now := globalEngine(t, 3, "deny")
	r := req("/", "GET", "10.0.0.1:1", "x-client", "a")
	decide := func() Verdict {
		v := e.Decide(r, *now)
		if v.Outcome != Call {
			return v
		}
		svc.deliver()
		if len(*decided) == 0 {
			t.Fatal("a call's answer decided nothing")
		}
		return *(*decided)[len(*decided)-1]
	}
	for i := 0; i < 3; i++ {
		if v := decide(); v.Outcome != Allow {
			t.Fatalf("request %d: outcome %v, want admitted", i, v.Outcome)
		}
		counted, calls := svc.count, len(svc.calls)
		v := e.DecideRedirect(r, *now)
		svc.deliver()
		if svc.count != counted || len(svc.calls) != calls {
			t.Fatalf("redirect of request %d: the service counted %d more hits in %d more calls, want none",
				i, svc.count-counted, len(svc.calls)-calls)
		}
		if v.Outcome != Allow || v.Report == nil || v.Report.Name != "g" || v.Remaining != int64(2-i) {
			t.Fatalf("redirect of request %d: outcome %v, report %v, remaining %d, want admitted with the rule's numbers (%d left)",
				i, v.Outcome, v.Report, v.Remaining, 2-i)
		}
		*now += int64(10e6)
	}
	if v := decide(); v.Outcome != Reject {
		t.Fatalf("4th request to a limit of 3: outcome %v, want refused", v.Outcome)
	}
	if got := e.Stats.Rules[0].Allowed; got != 3 {
		t.Errorf("allowed %d, want 3 (the redirects are the same requests)", got)
	}
}

// TestRedirectSettlesTheFirstDeposit: a global rule charged after the
// response takes a deposit for the request; Envoy ends its stream to
// follow the upstream's redirect (no response: nothing settled), and the
// redirect's response says what the request cost. The service counts that
// cost once: the first request's deposit is settled on the redirect's
// response (Redirecting), and the redirect takes no deposit of its own.
func TestRedirectSettlesTheFirstDeposit(t *testing.T) {
	const doc = `{"rules":[{"name":"g","scope":"global","limit":100,"window":"1m","key":["header:x-client"],
		"cost":{"response_header":"x-used","max":50}}],"global":{"cluster":"ratelimit","timeout":"50ms"}}`
	now := t0 + int64(time.Second)
	e := New(mustConfig(t, doc), newMemStore(), 7, func() int64 { return now })
	svc := &fakeService{limit: 100}
	var decided []Verdict
	e.SetGlobal(svc, func(p *Pending, v *Verdict) { decided = append(decided, *v) })
	r := req("/", "GET", "10.0.0.1:1", "x-client", "a")
	v := e.Decide(r, now)
	if v.Outcome == Call {
		svc.deliver()
		v = decided[len(decided)-1]
	}
	if v.Outcome != Allow || !v.ChargesAfterResponse() {
		t.Fatalf("request: outcome %v, want admitted and charged after its response", v.Outcome)
	}
	c := e.Redirecting(&v) // its stream ended for Envoy's internal redirect
	w := e.DecideRedirect(r, now)
	if w.Outcome == Call {
		svc.deliver()
		w = decided[len(decided)-1]
	}
	if w.Outcome != Allow {
		t.Fatalf("redirect: outcome %v, want admitted", w.Outcome)
	}
	w.Carry(c)
	e.Settle(&w, resp("200", "x-used", "5"), now)
	for len(svc.pending) > 0 {
		svc.deliver()
	}
	e.Sweep(now + int64(time.Second))
	for len(svc.pending) > 0 {
		svc.deliver()
	}
	if svc.count != 5 || e.Stats.Rules[0].Charged != 5 {
		t.Errorf("the service counted %d hits (calls %v), the rule charged %d: want 5 each (the redirect's response said 5)",
			svc.count, svc.calls, e.Stats.Rules[0].Charged)
	}
}
