package engine

import (
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/plugin/config"
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
// A global rule takes one hit of its lease at admission like any request
// (a deposit: the lease design's bound holds for admissions), and a cost
// other than one is settled against the lease: a cost of 0 gives the
// deposit back, a larger one takes the rest from the lease's tokens and
// what they lack is owed to the rate-limit service (hits_addend): it goes
// with the worker's next call for the client, or from the worker's tick,
// in one call per client and rule per tick.

// PostCharge is a rule that admitted a request and charges it once the
// response arrives.
type PostCharge struct {
	rule int
	fp   uint64
	desc string // a global rule's descriptor key at the service
	// win is, for a global rule, the start of the window whose lease gave
	// the request its deposit (the window the service counted it in).
	win int64
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
func (e *Engine) Settle(v *Verdict, resp Request, now int64) {
	status := uint32(0)
	haveStatus := false
	for i := 0; i < v.post.n; i++ {
		c := v.post.at(i)
		r := &e.cfg.Rules[c.rule]
		if len(r.Cost.OnStatus) > 0 {
			if !haveStatus {
				s, _ := resp.Header(":status")
				status, haveStatus = uint32(ParseCost(s, true, 999)), true
			}
			if !r.Cost.ChargesStatus(status) {
				if r.Global {
					e.debitGlobal(c, 0, now)
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
			e.debitGlobal(c, n, now)
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

// debt is what a global rule's client owes the service on this worker:
// hits charged after admission that its lease could not cover, sent from
// the tick (SendCharges).
type debt struct {
	ref  PostCharge
	hits uint32
}

// debitGlobal settles a global rule's charge of n units for the request
// that took one hit of its lease at admission: n = 0 gives that hit back,
// n > 1 takes n-1 more from the lease and owes the service the rest.
// The hit goes back only to the lease of the window it was taken from: the
// service counted it there, and a later window's lease holds only hits
// counted in that window (giving it there would admit one more than the
// service counted).
func (e *Engine) debitGlobal(c *PostCharge, n int64, now int64) {
	r := &e.cfg.Rules[c.rule]
	w := r.Limit.Window()
	end := lease.WindowEnd(now, w)
	if n == 0 {
		if lease.WindowStart(now, w) != c.win {
			return // the deposit's window has ended: it is spent
		}
		e.table.Lease(c.fp, c.rule, now, end, func(s *lease.State) bool {
			if !s.Known && s.Tokens == 0 {
				return false // the lease was lost: nothing to give back to
			}
			s.Tokens++
			return true
		})
		return
	}
	extra := uint32(min(n-1, lease.MaxK))
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
	e.owe(*c, owed)
}

// owe adds hits to what the client of ref owes the service: a charge the
// lease could not cover, or one that a failed call carried. A call that
// fails was not counted by the service (or, timed out after the service
// counted it, is counted twice: the limit errs on the side of holding);
// dropping its hits let the client have them free. Beyond the rule's part
// of maxDebts the hits are dropped and counted.
func (e *Engine) owe(ref PostCharge, hits uint32) {
	if hits == 0 {
		return
	}
	key := callKey{ref.rule, ref.fp}
	if e.debts == nil {
		e.debts = map[callKey]*debt{}
	}
	d := e.debts[key]
	if d == nil && e.debtsFull(ref.rule) {
		e.Stats.ChargeErrors++
		return
	}
	if d == nil {
		d = &debt{ref: ref}
		e.addDebt(key, d)
	}
	d.hits = uint32(min(uint64(d.hits)+uint64(hits), 1<<32-1))
}

// PendingCharges returns the number of clients whose charges wait for the
// tick to be sent to the rate-limit service.
func (e *Engine) PendingCharges() int { return len(e.debts) }

// debtTimeout bounds a charge call (no request waits for it).
const debtTimeout = time.Second

// maxDebts bounds the clients whose charges wait on one worker (while the
// service does not answer); beyond it a charge is dropped and counted.
// Each global rule with a cost has its equal part of it: a flood of
// clients on one rule never drops another rule's charges.
const maxDebts = 4096

// debtsFull reports whether global rule i has its part of maxDebts.
func (e *Engine) debtsFull(i int) bool {
	if e.debtsOf == nil {
		n := 0
		for j := range e.cfg.Rules {
			if r := &e.cfg.Rules[j]; r.Global && r.Cost.Set() {
				n++
			}
		}
		e.debtsOf, e.debtCap = make([]int, len(e.cfg.Rules)), maxDebts/max(n, 1)
	}
	return e.debtsOf[i] >= e.debtCap || len(e.debts) >= maxDebts
}

// addDebt and dropDebt keep the debts and their count per rule.
func (e *Engine) addDebt(key callKey, d *debt) {
	e.debts[key] = d
	e.debtsOf[key.rule]++
}

func (e *Engine) dropDebt(key callKey) {
	if _, ok := e.debts[key]; ok {
		delete(e.debts, key)
		e.debtsOf[key.rule]--
	}
}

// sendCharges sends what each client owes the service, one call per client
// and rule (from the tick, in the root context: no request waits for it).
// The answer tells whether the client is now over its limit: its lease is
// then exhausted until the window ends, so this Envoy refuses it at once.
func (e *Engine) sendCharges(now int64) {
	if len(e.debts) == 0 || e.caller == nil || e.CircuitOpen() {
		return
	}
	for key, d := range e.debts {
		e.dropDebt(key)
		r := &e.cfg.Rules[d.ref.rule]
		unit, _ := rls.UnitOf(r.Limit.Window())
		req := rls.Request{
			Domain:  e.cfg.Global.Domain,
			Entries: []rls.Entry{{Key: "sluice_rule", Value: r.Name}, {Key: "sluice_key", Value: d.ref.desc}},
			Limit:   uint32(r.Limit.Limit()),
			Unit:    unit,
			Hits:    d.hits,
		}
		e.callBuf = rls.AppendFrame(e.callBuf[:0], &req)
		e.Global.Calls++
		e.Global.ChargeCalls++
		ref, hits, fp, rule, w := d.ref, d.hits, d.ref.fp, d.ref.rule, r.Limit.Window()
		err := e.caller.Call(e.cfg.Global.Cluster, e.callBuf, debtTimeout, func(resp rls.Response, err error) {
			if err != nil {
				e.Global.CallFailures++
				e.owe(ref, hits) // for the next tick
				return
			}
			if resp.Code != rls.CodeOverLimit {
				return
			}
			e.Global.OverLimit++
			t := e.now()
			e.table.Lease(fp, rule, t, lease.WindowEnd(t, w), func(s *lease.State) bool {
				s.Exhausted, s.Known, s.Remaining, s.Tokens = true, true, 0, 0
				return true
			})
		})
		if err != nil {
			e.Global.CallFailures++
			e.owe(ref, hits)
		}
	}
}

// owed returns what client key owes the service on this worker, for a
// lease call about to be sent: the call carries it (hits_addend = lease +
// debt), so that the service counts the debt before it grants more. A debt
// exists only when this worker's lease ran dry, which is exactly when its
// next admission calls the service: without this the debt would reach the
// service only on the next tick, while leases were granted on a count that
// missed it. The debt is kept until the call is sent (paid), so a call
// Envoy does not send leaves it for a later call or the tick.
func (e *Engine) owed(key callKey) uint32 {
	d := e.debts[key]
	if d == nil {
		return 0
	}
	return min(d.hits, 1<<32-1-lease.MaxK)
}

// paid forgets hits of what client key owes: a sent call carried them.
func (e *Engine) paid(key callKey, hits uint32) {
	d := e.debts[key]
	if d == nil || hits == 0 {
		return
	}
	d.hits -= min(d.hits, hits)
	if d.hits == 0 {
		e.dropDebt(key)
	}
}

// costSummary describes a rule's cost for the start-up log line.
func costSummary(c *config.Cost) string {
	var b strings.Builder
	if c.RequestHeader != "" {
		b.WriteString(" cost=request_header " + c.RequestHeader)
	} else {
		b.WriteString(" cost=after response")
		if c.ResponseHeader != "" {
			b.WriteString(" header " + c.ResponseHeader)
		}
		for i, st := range c.OnStatus {
			if i == 0 {
				b.WriteString(" on_status ")
			} else {
				b.WriteString(",")
			}
			b.WriteString(strconv.Itoa(int(st)))
		}
	}
	b.WriteString(" max " + strconv.FormatInt(c.Max, 10))
	return b.String()
}
