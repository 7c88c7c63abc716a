package engine

import (
	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/shared/limit"
)

// Priority classes (rule field `classes`) divide the slots of one key of a
// concurrency rule (package flight, Classes: one shared value per key with
// every class's slots, changed with one compare-and-swap). The engine's
// concurrency transitions (concOp) run on it for a rule with classes.

// HasClasses reports whether rule i has priority classes.
func (e *Engine) HasClasses(i int) bool { return e.classes.Has(i) }

// ClassRefused returns how many requests of class k of rule i this worker
// refused (at once, or after a wait in the queue).
func (e *Engine) ClassRefused(i, k int) uint64 { return e.classes.Refused(i, k) }

// classOf returns the class of the request being decided under rule r.
func classOf(r *config.Rule, ri *requestInfo) uint8 {
	if len(r.Classes) == 0 {
		return 0
	}
	return uint8(r.ClassOf(&ri.t))
}

// concModify applies op to the slots of key fp of concurrency rule i (the
// class op.class of it for a rule with classes) at now: the state table's
// slot, or the key's class value.
func (e *Engine) concModify(fp uint64, i int, onlyOverflow bool, now int64, op *concOp) error {
	if !e.classes.Has(i) {
		_, err := e.table.Modify(fp, i, onlyOverflow, now, op)
		return err
	}
	return e.classes.Modify(fp, i, onlyOverflow, now, op, op.lim.Limit())
}

// ClassSlots returns the requests in flight and queued of class k of rule
// i as this worker last saw them (LastSlots refreshes them); ok is false
// when this worker has not seen the rule's slots yet (an idle worker must
// not publish zeros over the figures of the others).
func (e *Engine) ClassSlots(i, k int) (inFlight, queued int64, ok bool) {
	inFlight, queued = e.classes.Seen(i, k)
	return inFlight, queued, e.lastSlots[i].known
}

// SlotsKnown reports whether this worker has seen the slots of concurrency
// rule i (an admission, a wait or a release of it): until then LastSlots
// has nothing to say, and an idle worker must not publish its zeros over
// the figures of the others.
func (e *Engine) SlotsKnown(i int) bool { return e.lastSlots[i].known }

// ModifyClasses is Modify for a rule with classes: o.class's transition on
// the key's classes ss (caps at the rule's limit). It reports whether ss
// changed.
func (o *concOp) ModifyClasses(ss []limit.Slots, caps []int64, now int64, overflow bool) bool {
	o.overflow = overflow
	c := int(o.class)
	switch o.kind {
	case opAcquire:
		held, epoch := o.held, o.epoch
		if overflow {
			held, epoch = o.heldOv, o.epochOv
		}
		d := limit.ClassAcquire(ss, caps, c, now, held, epoch, o.queue)
		o.out, o.free = d.ConcDecision, d.Free
	case opClaim:
		d := limit.ClassClaim(ss, caps, c, now, o.ticket, o.held, o.epoch)
		o.out, o.free = d.ConcDecision, d.Free
	case opLeave:
		o.left = limit.ClassLeave(ss, caps, c, now, o.ticket)
	case opExpire:
		limit.ClassExpire(ss, c, now, o.ticket)
	case opRelease:
		limit.ClassRelease(ss, caps, c, now, o.held, o.epoch)
	case opRenew:
		o.out.Epoch = limit.ClassRenew(ss, c, now, o.held, o.epoch)
	case opView:
		var l limit.Limit
		for k := range ss {
			ss[k] = l.View(limit.EncodeSlots(ss[k]), now)
		}
	}
	if o.kind == opRelease || o.kind == opView {
		// The rule's gauges show the whole key: every class's slots.
		var in, q int64
		for k := range ss {
			in += ss[k].InFlight()
			q += ss[k].Queued()
		}
		o.observed = limit.Slots{Cur: uint16(min(in, limit.MaxConcurrency)), Tail: uint16(q)}
	}
	return o.kind != opView
}

// remaining is what a request admitted by concurrency rule i under lim
// leaves free: the limit less the slots in flight, or for a rule with
// classes what the request's class may still take (e.op.free, just
// decided).
func (e *Engine) remaining(i int, lim *limit.Limit, inFlight int64) int64 {
	if e.classes.Has(i) {
		return e.op.free
	}
	return lim.Limit() - inFlight
}

// noteUse counts, for an adaptive rule with classes, the share of the
// limit lim in flight at an admission of key fp (flight.Adaptive.NoteUse,
// with what the request's class may still take, e.op.free, just decided).
func (e *Engine) noteUse(i int, fp uint64, inFlight int64, lim *limit.Limit) {
	if e.classes.Has(i) {
		e.adaptive.NoteUse(i, fp, inFlight, lim, e.op.free)
	}
}
