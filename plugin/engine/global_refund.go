// Refunds of global rules: hits given back when a request admitted by a
// global rule is refused by a later rule or leaves before its release.

package engine

import (
	"github.com/sluicehq/sluice/plugin/internal/lease"
)

// refundGlobal gives back every charge p holds (local rules and global leases)
// and the concurrency slots it took. A global rule's hit goes back only to
// the lease of the window it was taken from: the service counted it in
// that window, and a later window's lease holds only hits counted in that
// window (giving it there would admit one more than the service counted).
// Local charges go back through the held path (local's RefundHeld): p may
// have been delayed by a local rate rule, and while its call was in flight (up
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
// served: a local rule's to its state through RefundHeld (a reservation
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
		e.trace(StepRefund, c.Rule)
		r := &e.cfg.Rules[c.Rule]
		if !r.Global {
			e.local.RefundHeld(c, now)
			continue
		}
		w := r.Limit.Window()
		if lease.WindowStart(now, w) != c.Win {
			continue // the hit's window has ended: it is spent
		}
		e.table.Lease(c.FP, c.Rule, now, lease.WindowEnd(now, w), func(s *lease.State) bool {
			if !s.Known && s.Tokens == 0 {
				return false // the lease was lost: nothing to give back to
			}
			s.Tokens += uint32(min(c.N, lease.MaxK))
			return true
		})
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
