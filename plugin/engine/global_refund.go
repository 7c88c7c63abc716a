// Refunds of global rules: hits given back when a request admitted by a
// global rule is refused by a later rule or leaves before its release.

package engine

import (
	"slices"

	"github.com/sluicehq/sluice/plugin/internal/lease"
)

// refundGlobal gives back every charge p holds (local rules and global leases)
// and the concurrency slots it took. A global rule's hit goes back only to
// the lease of the window it was taken from: the service counted it in
// that window, and a later window's lease holds only hits counted in that
// window (giving it there would admit one more than the service counted).
// Local charges go back through the held path (refundHeld): p may have
// been delayed by a local rate rule, and while its call was in flight (up
// to global.timeout, longer on a loaded worker) later requests of its
// client may have been held behind that reservation; given back at once,
// it would let the next request take the last one's turn, two released
// together (TestGlobalRefusalDoesNotFreeAHeldTurn). With nothing held
// behind it, it comes back at once.
func (e *Engine) refundGlobal(p *Pending, now int64) {
	if len(p.verdict.Slots) > 0 {
		e.releaseAll(&p.verdict, now)
	}
	p.verdict.post = postList{} // a refused request is never charged
	e.refundCharges(p.charged, now)
	p.charged = p.charged[:0]
}

// refundCharges gives back charges made for a request that will not be
// served: a local rule's to its state through refundHeld (a reservation
// that others were held behind since waits for them; with nothing held
// behind it, it comes back at once), a global rule's hit to the lease of
// the window it was taken from, if that window has not ended (see
// refundGlobal). Every refund takes the held path: a request held
// (Unhold), waiting in a concurrency queue (a waiter's refund) or for a
// global rule's call (refundGlobal) may have had requests held behind it
// meanwhile, and so may one refused as it is decided (refuse), by another
// worker between its charges and its refund.
func (e *Engine) refundCharges(charged []charge, now int64) {
	for _, c := range charged {
		e.trace(StepRefund, c.rule)
		r := &e.cfg.Rules[c.rule]
		if !r.Global {
			e.refundHeld(c, now)
			continue
		}
		w := r.Limit.Window()
		if lease.WindowStart(now, w) != c.win {
			continue // the hit's window has ended: it is spent
		}
		e.table.Lease(c.fp, c.rule, now, lease.WindowEnd(now, w), func(s *lease.State) bool {
			if !s.Known && s.Tokens == 0 {
				return false // the lease was lost: nothing to give back to
			}
			s.Tokens += uint32(min(c.n, lease.MaxK))
			return true
		})
	}
}

// refundHeld gives back local charge c of a request that will not be
// served, unless requests were held behind it since (limit.RefundHeld):
// then it is kept until they are given back too (the clients of a line of
// held requests leave in any order), or its release time passes.
func (e *Engine) refundHeld(c charge, now int64) {
	r := &e.cfg.Rules[c.rule]
	back, err := e.table.UpdateHeld(c.fp, c.rule, &r.Limit, now, c.n, c.release)
	if err != nil {
		return
	}
	if !back {
		if len(e.kept) == maxKept { // forget those whose time has passed
			e.kept = slices.DeleteFunc(e.kept, func(o charge) bool { return o.release <= now })
		}
		if c.release > now && len(e.kept) < maxKept {
			e.kept = append(e.kept, c)
		}
		return
	}
	// The line behind c's client is one shorter: the reservations kept
	// before it may now be the latest.
	for again := true; again; {
		again = false
		k := 0
		for _, o := range e.kept {
			switch {
			case o.release <= now:
				continue // its time has passed: spent
			case !again && o.rule == c.rule && o.fp == c.fp:
				if ok, err := e.table.UpdateHeld(o.fp, o.rule, &r.Limit, now, o.n, o.release); err == nil && ok {
					again = true
					continue
				}
			}
			e.kept[k] = o
			k++
		}
		clear(e.kept[k:])
		e.kept = e.kept[:k]
	}
}

// finishAdmit counts p's admission by every rule that charged it.
func (e *Engine) finishAdmit(p *Pending) {
	v := &p.verdict
	v.Outcome = Allow
	if v.Delay > 0 {
		v.Outcome = Delay
	}
	e.countAdmitted(v, p.charged)
}
