package limit

import (
	"errors"
	"math/bits"
	"time"
)

// Concurrency limits requests in flight instead of requests per window: at
// most Limit requests admitted under one state may be unfinished at once.
// Its state (Slots) is shared by every Envoy worker and updated with one
// compare-and-swap, like the rate states; what makes it different is that
// a slot must be given back when the request ends, by whoever admitted it,
// and that the admitting worker may vanish (VM crash, reload) with slots
// held. Holdings are therefore leases in epochs:
//
//   - Time is cut in epochs of Epoch. The state counts the slots registered
//     in the current epoch (Cur) and in the previous one (Prev); the slots
//     in flight are Cur+Prev.
//   - A slot is registered in the epoch of its admission. A worker that
//     still holds slots re-registers them once per epoch (Renew: they move
//     from Prev to Cur). When the state enters a new epoch, Prev (slots that
//     nobody renewed during a whole epoch) is dropped and Cur becomes Prev.
//   - A release names the epoch its slots were last registered in, so it
//     decrements the right count, or nothing when they were already dropped.
//
// So a worker that vanishes leaks its slots for at most 2 × Epoch (they are
// dropped when the state enters the second epoch after their last
// registration), while a live worker must renew at least once per epoch
// (the plugin ticks every 100 ms when a concurrency rule exists).
//
// Requests over the limit may wait (max_delay) in a FIFO queue kept in the
// same state as tickets: Tail is the next ticket, Head the oldest ticket
// that may still wait, and Done marks tickets in the QueueWindow after Head
// that already left (admitted out of Head order, or abandoned). A waiting
// ticket is admitted when fewer tickets wait ahead of it than slots are
// free, and only within QueueWindow of Head. A ticket whose holder gave up
// (timeout, client gone) must be abandoned (Leave) so that Head can pass
// it; if Head does not move for Stall while slots are free, the tickets in
// the way belong to a vanished worker and the queue is skipped to Tail.
type Slots struct {
	Epoch      uint16 // epoch (time / Epoch, modulo 2^16) of Cur
	Cur, Prev  uint16 // slots registered in this and the previous epoch
	Head, Tail uint16 // queue tickets: Tail-Head tickets issued and not passed
	Done       uint16 // bit i: ticket Head+i has left the queue (bit 0 is never set)
	Last       uint32 // time (ms, modulo 2^32) Head last moved or the queue became non-empty
}

// Constants of the concurrency algorithm.
const (
	// Epoch is the lease period of held slots: a live worker renews its
	// slots once per epoch; a vanished worker's slots are dropped at most
	// 2 × Epoch after it vanished.
	Epoch = time.Second
	// Stall is how long Head may stay put, with slots free and tickets
	// waiting, before the queue is considered stuck on a vanished worker's
	// tickets and skipped.
	Stall = time.Second
	// QueueWindow is how many tickets after Head can be admitted out of
	// Head order (one bit each in Slots.Done).
	QueueWindow = 16
	// MaxQueue bounds the tickets of one queue (Tail-Head): the ticket
	// arithmetic is modulo 2^16.
	MaxQueue = 4096
	// MaxConcurrency is the largest limit of a concurrency rule (counts
	// are 16 bits).
	MaxConcurrency = 65535
)

// Concurrency is the Algorithm of NewConcurrency limits.
const Concurrency Algorithm = 4

// ErrConcurrency is returned by NewConcurrency for a limit out of range.
var ErrConcurrency = errors.New("must be 1..65535 requests in flight")

// NewConcurrency returns the limit of n requests in flight at once.
func NewConcurrency(n int64) (Limit, error) {
	if n <= 0 || n > MaxConcurrency {
		return Limit{}, ErrConcurrency
	}
	return Limit{algorithm: Concurrency, limit: n, burst: n, interval: 1}, nil
}

// EncodeSlots packs s into a State (16 bytes, the size of every rule's
// state in the shared table).
func EncodeSlots(s Slots) State {
	a := uint64(s.Epoch) | uint64(s.Cur)<<16 | uint64(s.Prev)<<32 | uint64(s.Tail)<<48
	b := uint64(s.Head) | uint64(s.Done)<<16 | uint64(s.Last)<<32
	return State{A: int64(a), B: int64(b)}
}

// DecodeSlots unpacks a State written by EncodeSlots; the zero State is an
// idle key.
//
// Not inlined: its callers are the concurrency rules' (off the rate rules'
// request path), and each inlined copy is module size.
//
//go:noinline
func DecodeSlots(st State) Slots {
	a, b := uint64(st.A), uint64(st.B)
	return Slots{
		Epoch: uint16(a), Cur: uint16(a >> 16), Prev: uint16(a >> 32), Tail: uint16(a >> 48),
		Head: uint16(b), Done: uint16(b >> 16), Last: uint32(b >> 32),
	}
}

// EpochAt returns the epoch number of time now (ns).
func EpochAt(now int64) uint16 { return uint16(floorDiv(now, int64(Epoch))) }

// Not inlined: a copy at each call site costs more wasm code than the
// call (docs/design/memory.md, "Inlining"); not on a request's path
// without a cost or a concurrency rule.
//
//go:noinline
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// msAt is not inlined: its 13 call sites (concurrency rules only, off
// the rate rules' request path) would add 1.2 KB of module.
//
//go:noinline
func msAt(now int64) uint32 { return uint32(floorDiv(now, int64(time.Millisecond))) }

// InFlight returns the slots held.
func (s Slots) InFlight() int64 { return int64(s.Cur) + int64(s.Prev) }

// Queued returns the tickets that may still wait (including abandoned ones
// not yet passed).
func (s Slots) Queued() int64 {
	return int64(uint16(s.Tail-s.Head)) - int64(bits.OnesCount16(s.Done))
}

// Idle reports whether s holds nothing: it may be discarded.
func (s Slots) Idle() bool { return s.Cur == 0 && s.Prev == 0 && s.Head == s.Tail }

// Expiry returns when s, last written at now, stops mattering: two epochs
// after the current one when slots are held (they are dropped by then unless
// renewed, and a renewal writes again), plus Stall for a queue.
func (s Slots) Expiry(now int64) int64 {
	if s.Idle() {
		return now
	}
	return (floorDiv(now, int64(Epoch))+3)*int64(Epoch) + int64(Stall)
}

// roll brings s to the epoch of now: each epoch entered drops the slots
// nobody renewed. A clock that went backwards (now's epoch before s.Epoch,
// modulo 2^16) keeps s as is.
func (s *Slots) roll(now int64) {
	e := EpochAt(now)
	if s.Cur == 0 && s.Prev == 0 {
		s.Epoch = e
		return
	}
	switch d := e - s.Epoch; {
	case d == 0 || d >= 1<<15:
	case d == 1:
		s.Prev, s.Cur = s.Cur, 0
		s.Epoch = e
	default:
		s.Prev, s.Cur = 0, 0
		s.Epoch = e
	}
}

// register moves n slots last registered in epoch held to the current
// epoch: from Prev when held is the previous epoch, nothing when they are
// already current, and back into Cur when they were dropped (the worker is
// alive after all: its requests are in flight).
func (s *Slots) register(n int64, held uint16) {
	if n <= 0 {
		return
	}
	switch d := s.Epoch - held; {
	case d == 0 || d >= 1<<15:
		return
	case d == 1:
		s.Prev = uint16(max(int64(s.Prev)-n, 0))
	}
	s.Cur = uint16(min(int64(s.Cur)+n, MaxConcurrency))
}

// stall skips a queue whose Head has not moved for Stall while slots were
// free: its tickets belong to a worker that vanished.
func (s *Slots) stall(now int64, lim int64) {
	// Signed: a worker's now may be a little older than the Last another
	// worker wrote (each reads the clock before its CAS).
	if s.Head != s.Tail && s.InFlight() < lim && int32(msAt(now)-s.Last) > int32(Stall/time.Millisecond) {
		s.Head, s.Done, s.Last = s.Tail, 0, msAt(now)
	}
}

// leave marks ticket t as gone from the queue and moves Head past the
// tickets that have left.
func (s *Slots) leave(t uint16, now int64) {
	i := t - s.Head
	if i >= QueueWindow {
		return
	}
	s.Done |= 1 << i
	moved := false
	for s.Done&1 != 0 {
		s.Done >>= 1
		s.Head++
		moved = true
	}
	if moved {
		s.Last = msAt(now)
	}
}

// ahead returns how many live tickets wait ahead of ticket t, and whether t
// is within QueueWindow of Head (or already passed by it: passed is true).
func (s *Slots) ahead(t uint16) (n int64, inWindow, passed bool) {
	i := t - s.Head
	if i >= 1<<15 {
		return 0, true, true // Head moved past t (a stall skip): t goes first
	}
	if i >= QueueWindow {
		return int64(i), false, false
	}
	return int64(i) - int64(bits.OnesCount16(s.Done&(1<<i-1))), true, false
}

// ConcDecision is the outcome of a concurrency transition.
type ConcDecision struct {
	_ [0]func() // not comparable: no equality function in the module
	// Admitted: the request holds a slot, registered in Epoch.
	Admitted bool
	// Queued: the request waits with Ticket (Acquire with a queue only).
	Queued bool
	Ticket uint16
	// Epoch is the epoch the caller's slots are now registered in.
	Epoch uint16
	// InFlight and Waiting describe the state after the transition.
	InFlight, Waiting int64
}

// Acquire decides a new request at now: the caller's worker already holds
// held slots of this state, last registered in epoch heldEpoch (they are
// renewed on the way, so one registration covers them all). With queue 0
// the request is admitted if a slot is free and nobody waits, else
// rejected; with queue > 0 a request that cannot be admitted at once takes
// a ticket, unless queue (at most MaxQueue) tickets are already out: then
// it is rejected.
func (l Limit) Acquire(st State, now int64, held int64, heldEpoch uint16, queue int64) (State, ConcDecision) {
	s := DecodeSlots(st)
	s.roll(now)
	s.register(held, heldEpoch)
	s.stall(now, l.limit)
	d := ConcDecision{Epoch: s.Epoch}
	switch {
	case s.Head == s.Tail && s.InFlight() < l.limit:
		s.Cur++
		d.Admitted = true
	case int64(uint16(s.Tail-s.Head)) < min(queue, MaxQueue):
		if s.Head == s.Tail {
			s.Last = msAt(now)
		}
		d.Queued, d.Ticket = true, s.Tail
		s.Tail++
		if n, in, _ := s.ahead(d.Ticket); in && n < l.limit-s.InFlight() {
			s.Cur++
			s.leave(d.Ticket, now)
			d.Admitted, d.Queued = true, false
		}
	}
	d.InFlight, d.Waiting = s.InFlight(), s.Queued()
	return EncodeSlots(s), d
}

// Claim is a waiting ticket's attempt at a slot (the caller polls it): it
// is admitted when fewer live tickets wait ahead of it than slots are free.
// held and heldEpoch are as for Acquire.
func (l Limit) Claim(st State, now int64, ticket uint16, held int64, heldEpoch uint16) (State, ConcDecision) {
	s := DecodeSlots(st)
	s.roll(now)
	s.register(held, heldEpoch)
	s.stall(now, l.limit)
	d := ConcDecision{Epoch: s.Epoch, Queued: true, Ticket: ticket}
	if n, in, passed := s.ahead(ticket); in && n < l.limit-s.InFlight() {
		s.Cur++
		if !passed {
			s.leave(ticket, now)
		}
		d.Admitted, d.Queued = true, false
	}
	d.InFlight, d.Waiting = s.InFlight(), s.Queued()
	return EncodeSlots(s), d
}

// Leave abandons a waiting ticket (its request timed out or went away). It
// reports false when the ticket is too far behind Head to be marked yet:
// the caller keeps it and tries again later (Head only moves forward).
func (l Limit) Leave(st State, now int64, ticket uint16) (State, bool) {
	s := DecodeSlots(st)
	s.roll(now)
	s.stall(now, l.limit)
	i := ticket - s.Head
	if i >= 1<<15 || s.Head == s.Tail {
		return EncodeSlots(s), true // already passed
	}
	if i >= QueueWindow {
		return EncodeSlots(s), false
	}
	s.leave(ticket, now)
	return EncodeSlots(s), true
}

// Expire is a waiting ticket's timeout (its max_delay passed, or it was
// abandoned and would have by now): every ticket up to it has timed out too
// (tickets are issued in arrival order and share the rule's max_delay) or
// been served, so Head moves past it at once. A ticket of another worker
// that Head passes this way and that has not yet noticed its own timeout
// finds itself passed; its worker checks the deadline before claiming.
func (l Limit) Expire(st State, now int64, ticket uint16) State {
	s := DecodeSlots(st)
	s.roll(now)
	i := ticket - s.Head
	if i >= 1<<15 || s.Head == s.Tail {
		return EncodeSlots(s) // already passed
	}
	if i+1 >= QueueWindow {
		s.Done = 0
	} else {
		s.Done >>= i + 1
	}
	s.Head = ticket + 1
	s.Last = msAt(now)
	for s.Done&1 != 0 && s.Head != s.Tail {
		s.Done >>= 1
		s.Head++
	}
	return EncodeSlots(s)
}

// Release gives back n slots last registered in epoch heldEpoch. A
// release that frees a slot for a queue whose slots were all held starts
// the queue's Stall afresh: until now its Head could not move (a head that
// waited through a long hold is not a vanished worker's).
func (l Limit) Release(st State, now int64, n int64, heldEpoch uint16) State {
	s := DecodeSlots(st)
	s.roll(now)
	if s.Head != s.Tail && s.InFlight() >= l.limit {
		s.Last = msAt(now)
	}
	switch d := s.Epoch - heldEpoch; d {
	case 0:
		s.Cur = uint16(max(int64(s.Cur)-n, 0))
	case 1:
		s.Prev = uint16(max(int64(s.Prev)-n, 0))
	}
	return EncodeSlots(s)
}

// Renew registers n slots, last registered in heldEpoch, in the current
// epoch, and returns it.
func (l Limit) Renew(st State, now int64, n int64, heldEpoch uint16) (State, uint16) {
	s := DecodeSlots(st)
	s.roll(now)
	s.register(n, heldEpoch)
	return EncodeSlots(s), s.Epoch
}

// View returns s brought to now (nothing written): what the state says to
// an observer.
func (l Limit) View(st State, now int64) Slots {
	s := DecodeSlots(st)
	s.roll(now)
	return s
}
