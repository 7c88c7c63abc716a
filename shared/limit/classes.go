package limit

import (
	"math"
	"time"
)

// Priority classes divide the slots of one key of a concurrency rule. Each
// class keeps a Slots of its own (its leases and its FIFO queue, exactly
// as a key without classes), and all of a key's classes are updated
// together, in one value and one compare-and-swap, so that the caps below
// hold across workers:
//
//   - Classes are numbered from 0, the highest priority; the last is the
//     implicit default class.
//   - Cap k = max(1, floor(L × (1 − the reserves of the classes above k))):
//     the requests of class k and of every class below it hold at most
//     Cap k slots together. Cap 0 is L: the highest class may use all.
//   - A class c request may take a slot when, for every k <= c, the
//     classes k.. hold fewer than Cap k (Free), and no ticket of a class
//     above c waits (a freed slot goes to the highest class waiting); within
//     class c, tickets go in arrival order as in Slots.
//
// A slot is given back, renewed and leased exactly as in Slots: only the
// class's own counts move.

// ClassCaps writes the caps of classes with these reserves (the default
// class's last) under limit lim into caps (len(reserves) long).
func ClassCaps(lim int64, reserves []float64, caps []int64) {
	above := 0.0
	for k := range reserves {
		// The small epsilon keeps floor(4 × 0.75) at 3 whatever the float
		// rounding of the sum of reserves.
		c := int64(math.Floor(float64(lim)*(1-above) + 1e-9))
		caps[k] = max(1, min(c, lim))
		above += reserves[k]
	}
}

// ClassFree returns how many more slots class c may take: the least, over
// the classes k <= c, of Cap k minus what the classes k.. hold.
func ClassFree(ss []Slots, caps []int64, c int) int64 {
	held, free := int64(0), int64(math.MaxInt64)
	for j := len(ss) - 1; j >= 0; j-- {
		held += ss[j].InFlight()
		if j <= c {
			free = min(free, caps[j]-held)
		}
	}
	return free
}

// waitingAbove returns the tickets waiting in the classes above c.
func waitingAbove(ss []Slots, c int) int64 {
	n := int64(0)
	for j := 0; j < c; j++ {
		n += ss[j].Queued()
	}
	return n
}

// ClassInFlight returns the slots held by all classes.
func ClassInFlight(ss []Slots) int64 {
	n := int64(0)
	for j := range ss {
		n += ss[j].InFlight()
	}
	return n
}

// classRoll brings every class to now and skips a stuck queue of class c
// (see Slots.stall: slots free for it, Head unmoved for Stall).
func classRoll(ss []Slots, caps []int64, c int, now int64) {
	for j := range ss {
		ss[j].roll(now)
	}
	s := &ss[c]
	if s.Head != s.Tail && ClassFree(ss, caps, c)-waitingAbove(ss, c) > 0 && int32(msAt(now)-s.Last) > int32(Stall/time.Millisecond) {
		s.Head, s.Done, s.Last = s.Tail, 0, msAt(now)
	}
}

// ClassAcquire is Acquire for a request of class c; held and heldEpoch
// are what the caller's worker holds of class c. InFlight and Waiting of
// the decision are the whole key's; Free is what class c may still take.
func ClassAcquire(ss []Slots, caps []int64, c int, now int64, held int64, heldEpoch uint16, queue int64) ClassDecision {
	ss[c].roll(now)
	ss[c].register(held, heldEpoch)
	classRoll(ss, caps, c, now)
	s := &ss[c]
	d := ConcDecision{Epoch: s.Epoch}
	room := ClassFree(ss, caps, c) - waitingAbove(ss, c)
	switch {
	case s.Head == s.Tail && room > 0:
		s.Cur++
		d.Admitted = true
	case int64(uint16(s.Tail-s.Head)) < min(queue, MaxQueue):
		if s.Head == s.Tail {
			s.Last = msAt(now)
		}
		d.Queued, d.Ticket = true, s.Tail
		s.Tail++
		if n, in, _ := s.ahead(d.Ticket); in && n < room {
			s.Cur++
			s.leave(d.Ticket, now)
			d.Admitted, d.Queued = true, false
		}
	}
	return classDecision(ss, caps, c, d)
}

// ClassDecision is a concurrency decision about one class.
type ClassDecision struct {
	ConcDecision
	// Free is what the class may still take after the decision.
	Free int64
}

func classDecision(ss []Slots, caps []int64, c int, d ConcDecision) ClassDecision {
	d.InFlight, d.Waiting = ClassInFlight(ss), 0
	for j := range ss {
		d.Waiting += ss[j].Queued()
	}
	return ClassDecision{ConcDecision: d, Free: max(0, ClassFree(ss, caps, c))}
}

// ClassClaim is Claim for a waiting ticket of class c: admitted when fewer
// tickets wait ahead of it, in its class and in the classes above, than
// class c may take.
func ClassClaim(ss []Slots, caps []int64, c int, now int64, ticket uint16, held int64, heldEpoch uint16) ClassDecision {
	ss[c].roll(now)
	ss[c].register(held, heldEpoch)
	classRoll(ss, caps, c, now)
	s := &ss[c]
	d := ConcDecision{Epoch: s.Epoch, Queued: true, Ticket: ticket}
	room := ClassFree(ss, caps, c) - waitingAbove(ss, c)
	if n, in, passed := s.ahead(ticket); in && n < room {
		s.Cur++
		if !passed {
			s.leave(ticket, now)
		}
		d.Admitted, d.Queued = true, false
	}
	return classDecision(ss, caps, c, d)
}

// ClassLeave is Leave for a ticket of class c.
func ClassLeave(ss []Slots, caps []int64, c int, now int64, ticket uint16) bool {
	classRoll(ss, caps, c, now)
	s := &ss[c]
	i := ticket - s.Head
	if i >= 1<<15 || s.Head == s.Tail {
		return true
	}
	if i >= QueueWindow {
		return false
	}
	s.leave(ticket, now)
	return true
}

// ClassRelease is Release of n slots of class c.
func ClassRelease(ss []Slots, caps []int64, c int, now int64, n int64, heldEpoch uint16) {
	for j := range ss {
		ss[j].roll(now)
	}
	// A freed slot restarts the Stall of every queue it may serve.
	for j := range ss {
		if q := &ss[j]; q.Head != q.Tail && ClassFree(ss, caps, j) <= 0 {
			q.Last = msAt(now)
		}
	}
	s := &ss[c]
	switch d := s.Epoch - heldEpoch; d {
	case 0:
		s.Cur = uint16(max(int64(s.Cur)-n, 0))
	case 1:
		s.Prev = uint16(max(int64(s.Prev)-n, 0))
	}
}

// ClassRenew is Renew of n slots of class c; it returns the epoch.
func ClassRenew(ss []Slots, c int, now int64, n int64, heldEpoch uint16) uint16 {
	ss[c].roll(now)
	ss[c].register(n, heldEpoch)
	return ss[c].Epoch
}

// ClassExpire is Expire for a ticket of class c.
func ClassExpire(ss []Slots, c int, now int64, ticket uint16) {
	var l Limit
	ss[c] = DecodeSlots(l.Expire(EncodeSlots(ss[c]), now, ticket))
}
