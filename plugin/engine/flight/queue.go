package flight

import "github.com/sluicehq/sluice/shared/limit"

// Leave tries to take ticket out of the queue of slot k at now; it
// reports success (the waiter can then be dropped).
func (r *Rules) Leave(k Key, ticket uint16, now int64) bool {
	op := &r.op
	*op = slotOp{kind: opLeave, lim: r.SlotLimit(k.Rule, k.FP, now), ticket: ticket, class: k.Class}
	if err := r.modify(k.FP, k.Rule, k.Overflow, now, op); err != nil {
		return false
	}
	return op.left
}

// Claim asks for a slot of k with ticket at now; k's slot renews on the
// way. ok reports that the waiter was admitted (false: it still waits, or
// shared data failed: it tries again on the next tick).
func (r *Rules) Claim(k Key, ticket uint16, now int64) (t Taken, ok bool) {
	op := &r.op
	*op = slotOp{kind: opClaim, lim: r.SlotLimit(k.Rule, k.FP, now), ticket: ticket, class: k.Class}
	h := r.holding(k)
	if h != nil {
		op.held, op.epoch = h.n, h.epoch
	}
	if err := r.modify(k.FP, k.Rule, k.Overflow, now, op); err != nil {
		return Taken{}, false
	}
	if h != nil {
		h.epoch = op.out.Epoch
	}
	if !op.out.Admitted {
		return Taken{}, false
	}
	return Taken{ConcDecision: op.out, Lim: op.lim, Key: k}, true
}

// Expire takes ticket, and every older one, out of the queue of slot k
// (its deadline passed).
func (r *Rules) Expire(k Key, ticket uint16, now int64) {
	op := &r.op
	*op = slotOp{kind: opExpire, lim: &r.cfg.Rules[k.Rule].Limit, ticket: ticket, class: k.Class}
	_ = r.modify(k.FP, k.Rule, k.Overflow, now, op)
}

// RenewDue renews this worker's slots if it has not yet in the epoch of
// now. The tick calls it, and so do acquisitions and releases: a worker
// swamped by a burst runs its streams' callbacks but its timer late, by
// seconds on an overloaded machine, and slots renewed only on the tick
// would then lapse while their requests are still at the backend (the
// other workers would admit more than the limit).
func (r *Rules) RenewDue(now int64) {
	if ep := limit.EpochAt(now); ep != r.renewed && len(r.holdings) > 0 {
		r.renewed = ep
		r.renew(now)
	}
}

// renew re-registers every slot this worker holds in the current epoch:
// the lease that keeps them counted (see limit.Slots).
func (r *Rules) renew(now int64) {
	ep := limit.EpochAt(now)
	for i := range r.held {
		h := &r.held[i]
		k := h.key
		if h.epoch == ep {
			continue
		}
		op := &r.op
		*op = slotOp{kind: opRenew, lim: &r.cfg.Rules[k.Rule].Limit, held: h.n, epoch: h.epoch, class: k.Class}
		if err := r.modify(k.FP, k.Rule, k.Overflow, now, op); err == nil {
			h.epoch = op.out.Epoch
		}
	}
}

// InFlight returns the slots of rule i held for the key of fp, as shared
// data says at now (all workers).
func (r *Rules) InFlight(i int, fp uint64, now int64) (inFlight, waiting int64, err error) {
	op := &r.op
	*op = slotOp{kind: opView, lim: &r.cfg.Rules[i].Limit}
	if err := r.modify(fp, i, false, now, op); err != nil {
		return 0, 0, err
	}
	return op.observed.InFlight(), op.observed.Queued(), nil
}

// LastSlots returns the requests in flight and queued of concurrency rule
// i for the key of this worker's last admission or release of the rule, as
// shared data holds them at now (every worker then shows the same figures
// for a rule with one key; what it saw then if shared data fails).
func (r *Rules) LastSlots(i int, now int64) (inFlight, queued int64) {
	ls := r.lastSlots[i]
	if !ls.known {
		return 0, 0
	}
	op := &r.op
	*op = slotOp{kind: opView, lim: r.ReleaseLimit(i, ls.fp)}
	if err := r.modify(ls.fp, i, ls.overflow, now, op); err != nil {
		return ls.inFlight, ls.queued
	}
	return op.observed.InFlight(), op.observed.Queued()
}

// SlotsKnown reports whether this worker has seen the slots of concurrency
// rule i (an admission, a wait or a release of it): until then LastSlots
// has nothing to say, and an idle worker must not publish its zeros over
// the figures of the others.
func (r *Rules) SlotsKnown(i int) bool { return r.lastSlots[i].known }

// ClassSlots returns the requests in flight and queued of class k of rule
// i as this worker last saw them (LastSlots refreshes them); ok is false
// when this worker has not seen the rule's slots yet (an idle worker must
// not publish zeros over the figures of the others).
func (r *Rules) ClassSlots(i, k int) (inFlight, queued int64, ok bool) {
	inFlight, queued = r.Seen(i, k)
	return inFlight, queued, r.lastSlots[i].known
}
