package engine

// A request's refusal by a rule (Engine.decide).

// refused makes v the rejection by rule rejected (refuse's first part).
func (e *Engine) refused(v *Verdict, ri *requestInfo, rejected int) {
	e.trace(StepReject, rejected)
	v.Outcome = Reject
	v.Delay = 0
	v.Client = ri.client
	v.post = postList{} // a refused request is never charged
}

// refuse goes on with the rejection of v by rule rejected (after refused),
// when there is more to do: the charges already made are refunded, and the
// Retry-After is the longest among the rules not yet evaluated, so that
// the client's retry is not rejected by the next rule in line. A later
// rule is asked as it would decide the request, with its max_delay: one
// that would only hold it did not refuse it, so it is not violated and
// its hold does not lengthen the Retry-After.
func (e *Engine) refuse(v *Verdict, ri *requestInfo, rejected int, now int64) {
	// Refund with the fingerprints already computed: recomputing them would
	// read keyed headers from the host again. Through the held path: this
	// worker decided nothing since the charges, but another worker may have
	// held a request of the client behind a reservation made here
	// (TestRefuseDoesNotFreeAnotherWorkersHeldTurn); with nothing behind
	// it, a charge comes back at once.
	if c := e.local.Charged(); len(c) > 0 {
		e.refundCharges(c, now)
	}
	matched := e.matcher.Matched()
	if len(matched) == 1 {
		return // no rule after the one that refused
	}
	after := false
	for _, i := range matched {
		if i == rejected {
			after = true
			continue
		}
		r := &e.cfg.Rules[i]
		if !after || r.Shadow || IsConcurrency(r) {
			continue
		}
		// The request's cost at admission (a rule charged after the
		// response admits while the balance is positive: one unit).
		n := int64(1)
		if !r.Cost.AfterResponse() {
			n = e.requestCost(r, ri)
		}
		d, _, err := e.table.Update(Peek, e.fingerprint(r, ri), i, &r.Limit, now, n, e.local.MaxDelay(r))
		if err != nil || d.Allowed {
			continue
		}
		v.violate(i)
		if d.RetryAfter > v.RetryAfter {
			v.Report, v.Reset, v.RetryAfter = r, d.Reset, d.RetryAfter
		}
	}
}
