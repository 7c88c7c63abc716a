package flight

// The requests of this worker that wait in a rule's queue (max_delay)
// with a ticket, in arrival order. The tick polls them (PollStart,
// PollNext, PollEnd); a ticket is admitted when fewer tickets wait ahead
// of it than slots are free, whichever worker holds the tickets ahead, so
// the queue is FIFO across workers (within limit.QueueWindow of its head).

// MaxWaiters bounds the requests one worker keeps waiting in queues.
const MaxWaiters = 4096

// MaxPollsPerTick bounds the queues (distinct keys) one tick polls: with
// per-client queues, thousands of waiting keys would otherwise cost
// thousands of shared-data reads every 5 ms. The oldest waiters go first.
const MaxPollsPerTick = 256

// Waiter is a request waiting in a concurrency rule's queue.
type Waiter struct {
	ID       uint32 // the stream
	Deadline int64
	Arrived  int64 // in this queue
	Key      Key
	Ticket   uint16
	Gone     bool // abandoned: the ticket must still leave the queue
	// Request is the engine's waiting request (what it decided so far).
	Request any
	// Not comparable: no equality function in the module for it.
	_ [0]func()
}

// queue is the requests waiting in queues and a poll's progress.
type queue struct {
	waiters  []*Waiter
	requeued []*Waiter // a poll's buffer for the waiters that queue again
	blocked  map[Key]bool
	// blockedKeys are blocked's keys, deleted one by one at the next poll:
	// clearing a map links the runtime's map clearing (2 KB of code).
	blockedKeys []Key
	poll        pollState
	// pending are the concurrency rules of the request being decided.
	pending []Pending
}

type pollState struct {
	all   []*Waiter
	keep  []*Waiter
	next  int
	polls int
}

// ClearPending starts the concurrency rules of a new decision.
func (r *Rules) ClearPending() { r.pending = r.pending[:0] }

// AddPending adds a concurrency rule the request being decided must pass.
func (r *Rules) AddPending(p Pending) { r.pending = append(r.pending, p) }

// Pending returns the concurrency rules of the request being decided
// (valid until the next decision).
func (r *Rules) Pending() []Pending { return r.pending }

// QueueFull reports whether this worker keeps MaxWaiters waiting.
func (r *Rules) QueueFull() bool { return len(r.waiters) >= MaxWaiters }

// Enqueue registers w, which waits with its ticket.
func (r *Rules) Enqueue(w *Waiter) { r.waiters = append(r.waiters, w) }

// Waiting returns the number of requests of this worker waiting in queues
// (abandoned tickets not counted).
func (r *Rules) Waiting() int {
	n := 0
	for _, w := range r.waiters {
		if !w.Gone {
			n++
		}
	}
	return n
}

// Abandon marks the live waiter of stream id gone and returns it (nil if
// none): its ticket leaves the queue (LeaveQueue), on a later poll if it
// cannot at once.
func (r *Rules) Abandon(id uint32) *Waiter {
	for _, w := range r.waiters {
		if w.ID == id && !w.Gone {
			w.Gone = true
			return w
		}
	}
	return nil
}

// LeaveQueue tries to take w's ticket out of its queue at now; it reports
// success (w can then be dropped: its ID is 0).
func (r *Rules) LeaveQueue(w *Waiter, now int64) bool {
	left := r.Leave(w.Key, w.Ticket, now)
	if left {
		w.ID = 0
	}
	return left
}

// ExpireQueue takes w's ticket, and every older one, out of its queue
// (w's deadline passed); w's ID is 0 then.
func (r *Rules) ExpireQueue(w *Waiter, now int64) {
	r.Expire(w.Key, w.Ticket, now)
	w.ID = 0
}

// PollStart begins a poll of the waiting requests. A waiter let in may
// queue again, for a later rule of its request: that Waiter goes to a
// buffer of its own during the poll, and joins the ones kept at its end
// (after them: its ticket is the newest of its queue).
func (r *Rules) PollStart() {
	r.poll = pollState{all: r.waiters, keep: r.waiters[:0]}
	r.waiters = r.requeued[:0]
	if r.blocked == nil {
		r.blocked = map[Key]bool{}
	}
	for _, k := range r.blockedKeys {
		delete(r.blocked, k)
	}
	r.blockedKeys = r.blockedKeys[:0]
}

// block makes the waiters of k after the current one wait for the next
// poll.
//
// Not inlined: a copy at each call site costs more wasm code than
// the call (docs/design/memory.md, "Inlining").
//
//go:noinline
func (r *Rules) block(k Key) {
	if !r.blocked[k] {
		r.blocked[k] = true
		r.blockedKeys = append(r.blockedKeys, k)
	}
}

// PollNext advances the poll at now to the next waiter that something
// happened to: its deadline passed (admitted false: it is to be refused,
// and every ticket up to its own leaves the queue), or a slot admitted it
// (t). Abandoned tickets leave on the way. One shared-data read per queue
// (key) and poll at most, however many wait in it: the first waiter of a
// key that cannot go blocks the younger ones until the next poll. nil: the
// poll is over (PollEnd).
func (r *Rules) PollNext(now int64) (w *Waiter, t Taken, admitted bool) {
	p := &r.poll
	for p.next < len(p.all) {
		w := p.all[p.next]
		p.next++
		if now >= w.Deadline {
			return w, Taken{}, false
		}
		if r.blocked[w.Key] || p.polls >= MaxPollsPerTick {
			p.keep = append(p.keep, w)
			continue
		}
		p.polls++
		if w.Gone {
			if w.ID != 0 && !r.LeaveQueue(w, now) {
				r.block(w.Key)
				p.keep = append(p.keep, w)
			}
			continue
		}
		t, ok := r.Claim(w.Key, w.Ticket, now)
		if !ok {
			// Later tickets of this queue on this worker wait behind it.
			r.block(w.Key)
			p.keep = append(p.keep, w)
			continue
		}
		return w, t, true
	}
	return nil, Taken{}, false
}

// PollEnd ends the poll at now: the waiters kept, then those that queued
// again during it; the slots held renew if due.
func (r *Rules) PollEnd(now int64) {
	p := &r.poll
	keep := append(p.keep, r.waiters...)
	if len(keep) < len(p.all) {
		clear(p.all[len(keep):])
	}
	clear(r.waiters)
	r.waiters, r.requeued = keep, r.waiters[:0]
	r.poll = pollState{}
	r.RenewDue(now)
}
