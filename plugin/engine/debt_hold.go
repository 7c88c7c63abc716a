// Holding a response until the service has counted its charge.

package engine

// A request of a global rule charged after the response whose charge the
// lease could not cover leaves a debt, sent to the service as the
// response's headers pass (sendDebt). If the response went on to the
// client at once, the client's next request could reach the service
// (through any Envoy of the fleet) before the debt did, and be granted on
// a count that misses it: requests sent one after another would stay
// within limit + max - 1 only when the debt won that race. So the plugin
// holds such a response until the service has answered the debt's call
// (SettleHeld): the client cannot send its next request before the
// service counted what the previous one cost. Only responses that leave a
// debt wait, one round trip to the service (at most global.timeout); a
// deposit that covers the charge, a rule charged at admission and a rule
// without a cost never hold a response.

// debtHold is a response waiting for the answers of the debt calls its
// charges sent.
type debtHold struct {
	n      int  // debt calls not answered yet
	armed  bool // SettleHeld returned: resume when n reaches 0
	resume func()
}

// answered counts one answer (or failure) of a debt call of the hold.
func (h *debtHold) answered() {
	if h == nil {
		return
	}
	h.n--
	if h.n == 0 && h.armed {
		h.armed = false
		h.resume()
	}
}

// SettleHeld is Settle for a response that can be held. When a charge
// that the lease could not cover was sent to the service, it returns true:
// the response must reach the client only once resume is called, after
// the service has answered every such call (or they failed or timed out,
// within global.timeout). resume runs later, in the answer's context (the
// response's stream), never inside SettleHeld.
func (e *Engine) SettleHeld(v *Verdict, resp Request, now int64, resume func()) bool {
	sc := settling{resume: resume}
	e.settle(v, resp, now, &sc)
	h := sc.h
	if h == nil || h.n == 0 {
		return false
	}
	h.armed = true
	e.Stats.Global.HeldResponses++
	return true
}

// settling is a response being settled by SettleHeld: what it resumes, and
// the hold its debt calls join (made with the first).
type settling struct {
	resume func()
	h      *debtHold
}

// hold returns the hold the debt call about to be sent joins: the
// response's, or nil (sc nil: the tick's calls, Settle).
func (sc *settling) hold() *debtHold {
	if sc == nil {
		return nil
	}
	if sc.h == nil {
		sc.h = &debtHold{resume: sc.resume}
	}
	return sc.h
}
