package engine

import (
	"strings"
	"time"

	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/plugin/engine/global"
	"github.com/sluicehq/sluice/plugin/internal/lease"
	"github.com/sluicehq/sluice/plugin/internal/rls"
	"github.com/sluicehq/sluice/shared/limit"
)

// Costs (the rule field "cost"). A rule with a request_header cost charges
// the header's value at admission (AllowN with n). A rule charged after the
// response admits a request while the client's balance is positive
// (limit.Admit, nothing stored) and remembers it in the verdict (a
// PostCharge); once the upstream's response headers arrive, Settle charges
// what the response says (limit.Debit under the table's CAS, so charges of
// every worker add up exactly), which may leave a debt. A request that is
// refused, or whose response does not come from the upstream, is never
// settled, so never charged.
//
// A global rule takes a deposit from its lease at admission: a
// request_header cost whole (capped at the rule's limit), a cost after the
// response what the rule's requests have been costing on this worker (a
// moving average of their charges, rounded up, at least 1; 1 until one is
// known). A lease that cannot cover the deposit does not admit: the
// request waits for a call that asks for at least its deposit, and the
// service refusing that exhausts the client. Once the response says what
// the request costs, the difference is settled against the lease: what the
// deposit held beyond the cost goes back to the lease (of the deposit's
// window), what it lacked is taken from the lease's tokens, and what they
// lack is owed to the rate-limit service (hits_addend) and sent at once,
// from the response's stream, before the response goes on to the client.
// So the service counts every charge a lease did not cover before the
// client can send its next request, and an Envoy that holds a lease
// admits on it only while it covers a typical charge: requests sent one
// after another are charged at most limit + max - 1 in all, whatever the
// number of Envoys (docs/fleet.md). A debt that cannot be sent at once
// (the call refused, the circuit open) goes with the worker's next call
// for the client or from its tick.

// PostCharge is a rule that admitted a request and charges it once the
// response arrives.
type PostCharge struct {
	_    [0]func() // not comparable: no equality function in the module
	rule int
	fp   uint64
	desc string // a global rule's descriptor key at the service
	// win is, for a global rule, the start of the window whose lease gave
	// the request its deposit (the window the service counted it in).
	win int64
	// dep is a global rule's deposit: the hits taken from the lease.
	dep uint32
	// own is, for a request admitted on a global rule's overflow lease,
	// the client's own fingerprint (desc is then its own descriptor: the
	// overflow's is a constant): the settled cost's difference from the
	// deposit is owed there too (settleOwn).
	own uint64
}

// newGlobalRef is the global rule i of a request: its client fp, its key
// bytes at off (n long) and its cost at admission, with the deposit it
// takes from the lease.
func (e *Engine) newGlobalRef(i int, fp uint64, off, n int, cost int64) globalRef {
	r := &e.cfg.Rules[i]
	dep := int64(1)
	switch {
	case r.Cost.AfterResponse():
		dep = e.costs.Expected(i, r.Name)
	case r.Cost.Set():
		dep = cost
	}
	dep = max(min(dep, r.Limit.Limit(), lease.MaxK), 1)
	return globalRef{Rule: i, FP: fp, Off: off, N: n, Cost: cost, Dep: uint32(dep)}
}

// depositOf is the deposit of the waiting request p for global rule i.
func depositOf(p *Pending, i int) uint32 {
	if p.next < len(p.globals) && p.globals[p.next].Rule == i {
		return max(p.globals[p.next].Dep, 1)
	}
	return 1
}

// leaseSize is how many hits the next call for global rule i asks for
// (lease.SizeN), for requests waiting that deposit need in all, each at
// least unit. A rule charged after the response whose cost this worker has
// not learnt yet asks for what is waiting only: deposits of 1 may be far
// below what requests cost, and a lease of them would admit a burst whose
// debts the service learns only after.
func (e *Engine) leaseSize(st *lease.State, i int, now int64, need, unit uint32) uint32 {
	r := &e.cfg.Rules[i]
	if r.Cost.AfterResponse() && e.costs.Expected(i, r.Name) == 1 && !e.costs.Known(i) {
		return max(min(need, lease.MaxK), 1)
	}
	return lease.SizeN(*st, uint32(r.Limit.Limit()), r.Limit.Window(), now, need, unit)
}

// postInline post charges are kept in the Verdict itself: a request
// matched by more rules charged after the response is rare, and the rest
// go to a slice.
const postInline = 2

type postList struct {
	inline [postInline]PostCharge
	n      int
	more   []PostCharge
}

// Not inlined: a copy at each call site costs more wasm code than the
// call (docs/design/memory.md, "Inlining"); not on a request's path
// without a cost or a concurrency rule.
//
//go:noinline
func (l *postList) add(c PostCharge) {
	if l.n < postInline {
		l.inline[l.n] = c
	} else {
		l.more = append(l.more, c)
	}
	l.n++
}

func (l *postList) at(i int) *PostCharge {
	if i < postInline {
		return &l.inline[i]
	}
	return &l.more[i-postInline]
}

// ChargesAfterResponse reports whether a rule charges v's request once the
// upstream's response headers arrive (call Settle then).
func (v *Verdict) ChargesAfterResponse() bool { return v.post.n > 0 }

// Carried is what a request leaves for Envoy's internal redirect of it
// (Redirecting): its global rules' charges after the response.
type Carried struct{ post postList }

// Redirecting returns v's global charges after the response: v's stream
// ended without a response because Envoy follows the upstream's redirect
// itself, and the next decision (DecideRedirect) is that redirect, which its
// global rules do not charge again: the deposits taken for v are settled
// on the redirect's response (Carry).
func (e *Engine) Redirecting(v *Verdict) (c Carried) {
	for i := 0; i < v.post.n; i++ {
		if pc := v.post.at(i); e.cfg.Rules[pc.rule].Global {
			c.post.add(*pc)
		}
	}
	return c
}

// Carry adds what the request v redirects left (Redirecting) to v's
// charges after the response.
func (v *Verdict) Carry(c Carried) {
	for i := 0; i < c.post.n; i++ {
		v.post.add(*c.post.at(i))
	}
}

// DropCharges forgets v's charges after the response: the response did not
// come from the upstream (Envoy answered itself), so nothing is charged.
func (v *Verdict) DropCharges() { v.post = postList{} }

// MaxCostDigits bounds the digits of a cost header read: longer values are
// over any max (4294967295 has 10 digits).
const maxCostDigits = 19

// ParseCost reads a cost header's value: a positive integer (white space
// around it allowed), capped at max; missing, empty, zero, negative or
// anything else costs 1.
func ParseCost(s string, ok bool, max int64) int64 {
	if !ok {
		return 1
	}
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	if s == "" {
		return 1
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 1
		}
		if n <= max { // beyond max the value is capped: stop growing
			n = n*10 + int64(c-'0')
		}
	}
	switch {
	case n == 0:
		return 1
	case n > max:
		return max
	}
	return n
}

// requestCost is what rule r charges the request at admission. A cost
// header sent more than once costs the most a request can (Max): Envoy
// gives the plugin the first field, and an upstream may bill the last, so
// a client could declare 1 and spend 50 (see FieldsRequest).
func (e *Engine) requestCost(r *config.Rule, ri *requestInfo) int64 {
	if r.Cost.RequestHeader == "" {
		return 1
	}
	if fr, ok := ri.req.(FieldsRequest); ok {
		s, n := fr.HeaderFields(r.Cost.RequestHeader)
		if n > 1 {
			return r.Cost.Max
		}
		return ParseCost(s, n == 1, r.Cost.Max)
	}
	s, ok := ri.req.Header(r.Cost.RequestHeader)
	return ParseCost(s, ok, r.Cost.Max)
}

// admitPost decides a local rule charged after the response for the
// client fp: admitted while its balance is positive, charged nothing now.
func (e *Engine) admitPost(v *Verdict, i int, fp uint64, now int64) (limit.Decision, error) {
	r := &e.cfg.Rules[i]
	d, _, err := e.table.Update(Admit, fp, i, &r.Limit, now, 1, 0)
	if err == nil && d.Allowed {
		v.post.add(PostCharge{rule: i, fp: fp})
	}
	return d, err
}

// countPost counts the admissions of v's rules charged after the
// response (they are not in the charged list: nothing to refund).
func (e *Engine) countPost(v *Verdict) {
	for i := 0; i < v.post.n; i++ {
		c := v.post.at(i)
		if e.cfg.Rules[c.rule].Global {
			continue // counted with the charged rules
		}
		if v.Delay > 0 && !e.cfg.Rules[c.rule].Shadow {
			e.Stats.Rules[c.rule].Delayed++
		} else {
			e.Stats.Rules[c.rule].Allowed++
		}
	}
}

// Settle charges v's rules that charge after the response, now that the
// upstream's response headers are here (resp reads them, ":status"
// included), and updates the numbers the headers report. It charges once:
// the charges are forgotten.
func (e *Engine) Settle(v *Verdict, resp Request, now int64) { e.settle(v, resp, now, nil) }

// settle is Settle; sc, when not nil, gathers the debt calls the response
// waits for (SettleHeld).
func (e *Engine) settle(v *Verdict, resp Request, now int64, sc *settling) {
	status := uint32(0)
	haveStatus := false
	for i := 0; i < v.post.n; i++ {
		c := v.post.at(i)
		r := &e.cfg.Rules[c.rule]
		e.trace(StepSettle, c.rule)
		if len(r.Cost.OnStatus) > 0 {
			if !haveStatus {
				s, _ := resp.Header(":status")
				status, haveStatus = uint32(ParseCost(s, true, 999)), true
			}
			if !r.Cost.ChargesStatus(status) {
				if r.Global {
					e.costs.Learn(c.rule, r.Name, 0)
					e.debitGlobal(c, 0, now, sc)
				}
				continue
			}
		}
		n := int64(1)
		if r.Cost.ResponseHeader != "" {
			s, ok := resp.Header(r.Cost.ResponseHeader)
			n = ParseCost(s, ok, r.Cost.Max)
		}
		e.Stats.Rules[c.rule].Charged += uint64(n)
		if r.Global {
			e.costs.Learn(c.rule, r.Name, n)
			e.debitGlobal(c, n, now, sc)
			continue
		}
		d, _, err := e.table.Update(Debit, c.fp, c.rule, &r.Limit, now, n, 0)
		if err != nil {
			e.Stats.ChargeErrors++
			continue
		}
		if !r.Shadow && (v.Report == r || v.Report == nil || d.Remaining < v.Remaining) {
			v.Report, v.Remaining, v.Reset, v.measured = r, d.Remaining, d.Reset, now
		}
	}
	v.post = postList{}
}

// debitGlobal settles a global rule's charge of n units for the request
// that took c.dep hits of its lease at admission: what the deposit holds
// beyond n goes back to the lease, what it lacks is taken from the lease's
// tokens, and what they lack is owed to the service and sent at once
// (sendDebt). The hits go back only to the lease of the window they were
// taken from: the service counted them there, and a later window's lease
// holds only hits counted in that window (giving them there would admit
// more than the service counted).
func (e *Engine) debitGlobal(c *PostCharge, n int64, now int64, sc *settling) {
	r := &e.cfg.Rules[c.rule]
	w := r.Limit.Window()
	end := lease.WindowEnd(now, w)
	dep := int64(max(c.dep, 1))
	if c.own != 0 {
		e.settleOwn(c, n, dep)
	}
	if n < dep {
		if lease.WindowStart(now, w) != c.win {
			return // the deposit's window has ended: it is spent
		}
		back := uint32(dep - max(n, 0))
		e.table.Lease(c.fp, c.rule, now, end, func(s *lease.State) bool {
			if !s.Known && s.Tokens == 0 {
				return false // the lease was lost: nothing to give back to
			}
			s.Tokens += back
			return true
		})
		return
	}
	extra := uint32(min(n-dep, lease.MaxK))
	if extra == 0 {
		return
	}
	owed := extra
	_, err := e.table.Lease(c.fp, c.rule, now, end, func(s *lease.State) bool {
		take := min(s.Tokens, extra)
		owed = extra - take
		if take == 0 {
			return false
		}
		s.Tokens -= take
		return true
	})
	if err != nil {
		owed = extra
	}
	e.owe(c, owed, sc)
}

// settleOwn settles, on the client's own descriptor, the charge of n
// units of a request admitted on the rule's overflow lease, whose deposit
// dep it already owes there (oweOwn): what n exceeds it by is owed too
// (sent from the tick), what the deposit held beyond n is taken off what
// is still owed (if the tick has sent it, the service keeps it: the limit
// errs on the side of holding).
func (e *Engine) settleOwn(c *PostCharge, n, dep int64) {
	if n > dep {
		e.keepOwed(&PostCharge{rule: c.rule, fp: c.own, desc: c.desc}, uint32(min(n-dep, lease.MaxK)))
		return
	}
	e.debts.Paid(callKey{Rule: c.rule, FP: c.own}, uint32(dep-max(n, 0)))
}

// owe records that c's client owes the service hits (a charge the lease
// could not cover) and sends them at once when it can (sendDebt);
// otherwise they wait for the client's next call or the tick.
func (e *Engine) owe(c *PostCharge, hits uint32, sc *settling) {
	if d := e.keepOwed(c, hits); d != nil && e.link.Ready() && !e.CircuitOpen() {
		e.sendDebt(d, sc) // if it is not sent, the tick sends it
	}
}

// keepOwed adds hits to what the client of ref owes the service: a charge
// the lease could not cover, or one that a failed call carried. A call that
// fails was not counted by the service (or, timed out after the service
// counted it, is counted twice: the limit errs on the side of holding);
// dropping its hits would let the client have them free. Beyond the rule's
// part of global.MaxDebts the hits are dropped and counted (nil).
func (e *Engine) keepOwed(ref *PostCharge, hits uint32) *debt {
	desc := ref.desc
	if ref.fp == OverflowLease {
		desc = overflowDescriptor
	}
	d, full := e.debts.Keep(callKey{Rule: ref.rule, FP: ref.fp}, desc, hits)
	if full {
		e.Stats.ChargeErrors++
	}
	return d
}

// debt is what a global rule's client owes the service on this worker:
// hits charged after admission that its lease could not cover, sent at
// once or from the tick (sendCharges).
type debt = global.Debt

// PendingCharges returns the number of clients whose charges wait for the
// tick to be sent to the rate-limit service.
func (e *Engine) PendingCharges() int { return e.debts.Len() }

// debtTimeout bounds a charge call (no request waits for it).
const debtTimeout = time.Second

// sendCharges sends what each client owes the service, one call per client
// and rule (from the tick, in the root context: no request waits for it).
// The answer tells whether the client is now over its limit: its lease is
// then exhausted until the window ends, so this Envoy refuses it at once.
func (e *Engine) sendCharges(now int64) {
	if e.debts.Len() == 0 || !e.link.Ready() || e.CircuitOpen() {
		return
	}
	// A debt that could not be sent stays owed for the next tick, and so
	// do those beyond maxChargeCalls.
	n := 0
	e.debts.Each(func(d *debt) bool {
		e.sendDebt(d, nil)
		n++
		return n < maxChargeCalls
	})
}

// maxChargeCalls bounds the calls a tick sends for debts (one per client
// and rule): a flood on a rule's overflow lease owes a hit to each value's
// own descriptor (oweOwn), and those wait for later ticks rather than
// leave the worker as a storm of calls.
const maxChargeCalls = 64

// DetachedCaller is a Caller that can send a call no request waits for
// (global.DetachedCaller).
type DetachedCaller = global.DetachedCaller

// sendDebt sends what the client key owes the service (d) in one call, in
// the current proxy-wasm context; no request waits for it. The answer
// tells whether the client is now over its limit: its lease is then
// exhausted until the window ends, so this Envoy refuses it at once. It
// reports whether the call was sent (the debt is then paid).
func (e *Engine) sendDebt(d *debt, sc *settling) bool {
	key := d.Key()
	r := &e.cfg.Rules[key.Rule]
	unit, _ := rls.UnitOf(r.Limit.Window())
	req := rls.Request{
		Domain:  e.cfg.Global.Domain,
		Entries: []rls.Entry{{Key: "sluice_rule", Value: r.Name}, {Key: "sluice_key", Value: d.Desc()}},
		Limit:   uint32(r.Limit.Limit()),
		Unit:    unit,
		Hits:    d.Hits(),
	}
	ref, hits, fp, rule, w := PostCharge{rule: key.Rule, fp: key.FP, desc: d.Desc()}, d.Hits(), key.FP, key.Rule, r.Limit.Window()
	// A response held for this call (SettleHeld) waits at most the time
	// a request waits for the service.
	h, timeout := sc.hold(), debtTimeout
	if h != nil {
		timeout = e.cfg.Global.Timeout
	}
	err := e.link.Send(e.cfg.Global.Cluster, &req, timeout, true, func(resp rls.Response, err error) {
		defer h.answered()
		if err != nil {
			e.Stats.Global.CallFailures++
			e.keepOwed(&ref, hits) // for the next tick
			return
		}
		if resp.Code != rls.CodeOverLimit {
			return
		}
		e.Stats.Global.OverLimit++
		t := e.now()
		end := lease.WindowEnd(t, w)
		_, lerr := e.table.Lease(fp, rule, t, end, func(s *lease.State) bool {
			s.Exhausted, s.Known, s.Remaining, s.Tokens = true, true, 0, 0
			return true
		})
		if lerr != nil {
			// No lease of its own here (the rule's share is full): the
			// client is barred from the rule's overflow lease instead.
			e.debts.Bar(callKey{Rule: rule, FP: fp}, end, t)
		}
	})
	if err != nil {
		e.Stats.Global.CallFailures++
		return false
	}
	if h != nil {
		h.n++
	}
	e.Stats.Global.Calls++
	e.Stats.Global.ChargeCalls++
	e.debts.Drop(key)
	return true
}

// retryFailed sends in's call again, for the requests still waiting for
// it, when Envoy could not deliver it to the replica of the service it
// chose (connectFailure) before half its time: Envoy's cluster sends the
// next call to another replica (the plugin's calls have no retry policy of
// their own). Without it each such failure leaves its requests to on_error
// and opens the worker's circuit, which decides the next requests by
// on_error too. Up to maxTries times: the worker's other calls move the
// cluster's round robin too, so a retry may meet the dead replica again
// before Envoy ejects it; after that the failure is the service's.
func (e *Engine) retryFailed(in *inflight, err error, now int64) bool {
	if in.tries >= maxTries || !connectFailure(err) || now-in.sentAt > int64(in.timeout)/2 {
		return false
	}
	if e.call(in.key) != nil {
		return false
	}
	var live, expired []*Pending
	for _, p := range in.waiters {
		switch {
		case p.cancelled:
		case p.Deadline-now < int64(time.Millisecond):
			expired = append(expired, p)
		default:
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		return false
	}
	next := &inflight{key: in.key, ref: in.ref, k: in.k, callAt: now, noLease: in.noLease, waiters: live, desc: in.desc, tries: in.tries + 1}
	if e.sendOrDefer(next, now, waitDeadline(live, now), false, live...) != nil {
		return false
	}
	r := &e.cfg.Rules[in.ref.Rule]
	for _, p := range expired {
		e.Stats.Global.Expired++
		e.afterError(p, r, in.ref.Rule, ErrTimeout, now)
	}
	return true
}

// maxTries bounds the times a call Envoy could not deliver is sent again.
const maxTries = 3

// connectFailure says whether err is Envoy's own reply to a call it could
// not deliver to the upstream it chose (connection refused or reset before
// any answer): gRPC status 14 with Envoy's message, not an error of the
// service (which answers it when Redis fails).
func connectFailure(err error) bool {
	// A type assertion, not errors.As: that links reflection into the
	// plugin (60 KB); the caller's errors are never wrapped.
	ce, ok := err.(*rls.CallError)
	if !ok || ce.GRPCStatus != 14 {
		return false
	}
	return strings.HasPrefix(ce.Msg, "upstream connect error") || strings.HasPrefix(ce.Msg, "upstream_reset_before_response_started")
}
