package flight

import "github.com/sluicehq/sluice/shared/limit"

// slotOp is the Modifier of every concurrency transition (one per worker,
// so that no transition allocates).
type slotOp struct {
	_        [0]func() // not comparable: no equality function in the module
	kind     uint8
	lim      *limit.Limit
	held     int64 // slots this worker holds in the slot modified
	epoch    uint16
	heldOv   int64 // for opAcquire: held and epoch if it is the overflow slot
	epochOv  uint16
	overflow bool // the slot modified was the overflow slot
	ticket   uint16
	queue    int64
	out      limit.ConcDecision
	free     int64 // what the class may still take (rules with classes)
	class    uint8
	left     bool
	observed limit.Slots
}

const (
	opAcquire = iota
	opClaim
	opLeave
	opRelease
	opRenew
	opView
	opExpire
)

func (o *slotOp) Modify(st limit.State, now int64, overflow bool) (limit.State, int64, bool) {
	var next limit.State
	o.overflow = overflow
	switch o.kind {
	case opAcquire:
		held, epoch := o.held, o.epoch
		if overflow {
			held, epoch = o.heldOv, o.epochOv
		}
		next, o.out = o.lim.Acquire(st, now, held, epoch, o.queue)
	case opClaim:
		next, o.out = o.lim.Claim(st, now, o.ticket, o.held, o.epoch)
	case opLeave:
		next, o.left = o.lim.Leave(st, now, o.ticket)
	case opExpire:
		next = o.lim.Expire(st, now, o.ticket)
	case opRelease:
		next = o.lim.Release(st, now, o.held, o.epoch)
	case opRenew:
		next, o.out.Epoch = o.lim.Renew(st, now, o.held, o.epoch)
	case opView:
		o.observed = o.lim.View(st, now)
		return st, 0, false
	}
	s := limit.DecodeSlots(next)
	if o.kind == opRelease {
		o.observed = s // the in-flight gauges follow releases too
	}
	return next, s.Expiry(now), true
}

// modifyClasses is Modify for a rule with classes: o.class's transition on
// the key's classes ss (caps at the rule's limit). It reports whether ss
// changed.
func (o *slotOp) modifyClasses(ss []limit.Slots, caps []int64, now int64, overflow bool) bool {
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
