package engine

import (
	"time"

	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/shared/limit"
)

// Concurrency rules (algorithm "concurrency") hold a slot from admission
// until the stream ends. The shared state and its leases are in
// shared/limit (Slots); this file keeps what one worker knows:
//
//   - holdings: how many slots this worker holds per (rule, key) and the
//     epoch they were last registered in. Tick renews them once per epoch,
//     which is what keeps them alive in the shared count; a worker that
//     vanishes stops renewing and its slots are dropped within
//     2 × limit.Epoch.
//   - waiters: requests of this worker that wait in a rule's queue
//     (max_delay) with a ticket, in arrival order. Tick polls them; a
//     ticket is admitted when fewer tickets wait ahead of it than slots are
//     free, whichever worker holds the tickets ahead, so the queue is FIFO
//     across workers (within limit.QueueWindow of its head).
//   - hold: the observed mean time a slot is held, per rule, which
//     estimates Retry-After, Reset and how long a queue may grow before its
//     last ticket could not start within max_delay.

// SlotRef is a concurrency slot held by a request, to be released when its
// stream ends.
type SlotRef struct {
	Rule     int
	FP       uint64
	Overflow bool  // the slot is the rule's overflow slot of the bucket
	Since    int64 // when it was acquired (ns)
	// Saturated: an adaptive rule's slot taken at its learnt limit (or
	// after a wait in its queue): see limit.Gauge.AtLimit.
	Saturated bool
	// Waited is how long the request waited in the rule's queue for the
	// slot (0: taken at once); counted once the request is admitted.
	Waited time.Duration
	// Ticket is an adaptive rule's limit.Sampler ticket for the request's
	// sample (0: no sample, see admitSamples, or given already: Engine.Sample
	// uses it up).
	Ticket uint32
	// Class is the slot's priority class (rules with classes).
	Class uint8
}

type holdKey struct {
	rule     int
	fp       uint64
	overflow bool
	class    uint8
}

type holding struct {
	n     int64
	epoch uint16
}

// pendingConc is a concurrency rule still to be acquired by a request.
type pendingConc struct {
	rule  int
	fp    uint64
	class uint8
}

// Waiter is a request waiting in a concurrency rule's queue.
type Waiter struct {
	ID       uint32 // the stream
	Deadline int64
	arrived  int64 // in this queue
	rule     int
	fp       uint64
	overflow bool
	class    uint8
	ticket   uint16
	gone     bool // abandoned: the ticket must still leave the queue
	rest     []pendingConc
	carry    carried
	verdict  Verdict
}

// carried is what a request takes through the concurrency queues: the
// rate charges to refund if it is not served, its global rules (asked once
// every slot is its) and their keys, and when it first waited.
type carried struct {
	charges []charge
	globals []globalRef
	keys    []byte
	since   int64
}

// ConcEvent is what Poll decided for a waiting request.
type ConcEvent struct {
	ID      uint32
	Verdict Verdict // Outcome Allow (resume, or Delay: hold then resume) or Reject
	Waited  time.Duration
}

// concOp is the Modifier of every concurrency transition (one per engine,
// so that no transition allocates).
type concOp struct {
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

// concurrencyRules is the engine's state for concurrency rules: the slots
// this worker's requests hold (re-registered every epoch), the requests
// waiting in queues, the observed hold time per rule.
type concurrencyRules struct {
	pending  []pendingConc
	op       concOp
	holdings map[holdKey]*holding
	waiters  []*Waiter
	requeued []*Waiter // Poll's buffer for the waiters that queue again
	blocked  map[holdKey]bool
	hold     []int64 // observed mean slot hold time per rule (ns)
	renewed  uint16  // the epoch of the last renewal
}

func (o *concOp) Modify(st limit.State, now int64, overflow bool) (limit.State, int64, bool) {
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

// IsConcurrency reports whether rule r limits requests in flight.
func IsConcurrency(r *config.Rule) bool {
	return r.Limit.Algorithm() == limit.Concurrency || IsAdaptive(r)
}

// HasConcurrency reports whether any rule of c is a concurrency rule (the
// plugin then ticks often enough to renew its slots every epoch).
func HasConcurrency(c *config.Config) bool {
	for i := range c.Rules {
		if IsConcurrency(&c.Rules[i]) {
			return true
		}
	}
	return false
}

// MaxWaiters bounds the requests one worker keeps waiting in queues.
const MaxWaiters = 4096

// MaxPollsPerTick bounds the queues (distinct keys) one tick polls: with
// per-client queues, thousands of waiting keys would otherwise cost
// thousands of shared-data reads every 5 ms. The oldest waiters go first.
const MaxPollsPerTick = 256

// HoldEstimate returns the mean time requests of concurrency rule i held
// their slot on this worker (0 until one has ended).
func (e *Engine) HoldEstimate(i int) time.Duration { return time.Duration(e.hold[i]) }

// waitEstimate estimates how long a request with waiting tickets ahead of
// it waits for a slot of rule i under lim (the key's limit): slots free at
// about lim per hold time.
func (e *Engine) waitEstimate(i int, lim int64, waiting int64) time.Duration {
	h := e.hold[i]
	if h <= 0 {
		return time.Second
	}
	return time.Duration((waiting + 1) * h / max(lim, 1))
}

// queueBound is how many tickets rule i's queue may hold under lim (the
// key's limit: an adaptive rule learns one per key): MaxQueue, or fewer
// when the observed hold time says the last could not start within
// max_delay.
func (e *Engine) queueBound(i int, lim int64) int64 {
	r := &e.cfg.Rules[i]
	if r.Shadow || r.MaxDelay <= 0 {
		return 0
	}
	q := int64(limit.MaxQueue)
	if h := e.hold[i]; h > 0 {
		q = min(q, int64(r.MaxDelay)*lim/h)
	}
	return q
}

// acquire takes the concurrency slots of pending for the request being
// decided (v), in order. It returns the index of the rule that rejected
// the request (-1 if none), or queues the request (v.Outcome = Queue,
// with a Waiter registered for id, which carries c).
func (e *Engine) acquire(id uint32, v *Verdict, pending []pendingConc, c carried, now int64) int {
	e.renewDue(now)
	for k, p := range pending {
		r := &e.cfg.Rules[p.rule]
		lim := e.slotLimit(p.rule, p.fp, now)
		op := e.acquireOp(p, lim)
		if err := e.concModify(p.fp, p.rule, false, now, op); err != nil {
			if e.acquireFailed(v, p.rule, err, now) {
				return p.rule
			}
			continue
		}
		d := op.out
		hk := holdKey{rule: p.rule, fp: p.fp, overflow: op.overflow, class: p.class}
		if h := e.holdings[hk]; h != nil {
			h.epoch = d.Epoch // renewed on the way
		}
		st := &e.Stats.Rules[p.rule]
		e.lastSlots[p.rule] = slotsSeen{d.InFlight, d.Waiting, p.fp, op.overflow, true}
		switch {
		case d.Admitted:
			e.trace(StepSlot, p.rule)
			e.holdSlot(v, hk, lim, &d, now)
		case d.Queued:
			e.trace(StepQueue, p.rule)
			e.overLimit(p.rule, p.fp)
			e.enqueue(id, v, hk, d.Ticket, pending[k+1:], c, now)
			return -1
		case r.Shadow:
			e.overLimit(p.rule, p.fp)
			st.ShadowRejected++
			if v.Shadow == nil {
				v.Shadow, v.ShadowRetryAfter = r, e.waitEstimate(p.rule, lim.Limit(), d.Waiting)
			}
		default:
			e.trace(StepSlotRefuse, p.rule)
			e.overLimit(p.rule, p.fp)
			e.classRefuse(p.rule, p.class)
			st.Rejected++
			e.rejectFull(v, p.rule, lim, d.Waiting, now)
			return p.rule
		}
	}
	return -1
}

// acquireOp readies e.op to take a slot of rule p.rule for the key of p.fp
// under lim. It carries what this worker holds in both slots the bucket may
// use, its own and the rule's overflow slot (the table picks one), so that
// the slots renew on the way; and the queue bound, none when this worker
// already keeps MaxWaiters waiting.
func (e *Engine) acquireOp(p pendingConc, lim *limit.Limit) *concOp {
	op := &e.op
	*op = concOp{kind: opAcquire, lim: lim, queue: e.queueBound(p.rule, lim.Limit()), class: p.class}
	if len(e.waiters) >= MaxWaiters {
		op.queue = 0
	}
	if h := e.holdings[holdKey{rule: p.rule, fp: p.fp, class: p.class}]; h != nil {
		op.held, op.epoch = h.n, h.epoch
	}
	if h := e.holdings[holdKey{rule: p.rule, fp: p.fp, overflow: true, class: p.class}]; h != nil {
		op.heldOv, op.epochOv = h.n, h.epoch
	}
	return op
}

// acquireFailed decides the request being decided (v) when shared data
// failed to give it a slot of rule i: with on_error deny (and rule i not in
// shadow) it is rejected and gives back the slots it took, else it goes on
// without that slot. It reports whether the request was rejected.
func (e *Engine) acquireFailed(v *Verdict, i int, err error, now int64) bool {
	r := &e.cfg.Rules[i]
	v.Err, v.ErrRule = err, r
	if e.cfg.OnErrorDeny && !r.Shadow {
		e.Stats.OnErrorDenied++
		e.releaseAll(v, now)
		v.Report, v.Remaining, v.Reset, v.RetryAfter = r, 0, time.Second, time.Second
		v.violate(i)
		return true
	}
	e.Stats.OnErrorAllowed++
	return false
}

// holdSlot records the slot d granted to the request being decided (v): this
// worker holds it under hk and v releases it when its stream ends. v
// reports the rule that leaves the fewest slots free (on a tie, the one
// whose slots free the latest): the headers describe the most constrained.
func (e *Engine) holdSlot(v *Verdict, hk holdKey, lim *limit.Limit, d *limit.ConcDecision, now int64) {
	r := &e.cfg.Rules[hk.rule]
	e.hold1(hk, d.Epoch)
	v.Slots = append(v.Slots, SlotRef{Rule: hk.rule, FP: hk.fp, Overflow: hk.overflow, Since: now, Class: hk.class,
		Saturated: e.atLimit(hk.rule, hk.fp, d.InFlight)})
	e.learnerTakes(hk.rule, hk.fp)
	e.noteUse(hk.rule, hk.fp, d.InFlight, lim)
	rem := e.remaining(hk.rule, lim, d.InFlight)
	// A shadow rule reports nothing but x-ratelimit-shadow (when it would
	// refuse): its slots are not the client's limit.
	if !r.Shadow && (v.Report == nil || rem < v.Remaining || (rem == v.Remaining && e.HoldEstimate(hk.rule) > v.Reset)) {
		v.Report, v.Remaining, v.Reset, v.ReportLimit, v.measured = r, rem, e.HoldEstimate(hk.rule), lim.Limit(), 0
	}
}

// countSlots counts the request of v, admitted, in the stats of the
// concurrency rules whose slots it holds: allowed (taken at once) or
// delayed (after a wait in the rule's queue, with its wait); a shadow
// rule, allowed when it had a slot for it. A request that a later rule
// refuses is counted by that rule only.
func (e *Engine) countSlots(v *Verdict) {
	for _, s := range v.Slots {
		st := &e.Stats.Rules[s.Rule]
		if s.Waited > 0 { // never for a shadow rule: it does not queue
			st.Delayed++
			st.WaitNS += uint64(s.Waited)
		} else {
			st.Allowed++
		}
	}
}

// enqueue makes the request being decided (v) wait with ticket in the
// queue of hk's slot: a Waiter registered for id keeps its verdict so far,
// the concurrency rules it has still to pass (rest) and c, copied since the
// caller's slices are reused.
func (e *Engine) enqueue(id uint32, v *Verdict, hk holdKey, ticket uint16, rest []pendingConc, c carried, now int64) {
	r := &e.cfg.Rules[hk.rule]
	w := &Waiter{
		ID: id, Deadline: now + int64(r.MaxDelay), arrived: now, rule: hk.rule, fp: hk.fp,
		overflow: hk.overflow, class: hk.class, ticket: ticket, rest: append([]pendingConc(nil), rest...), verdict: *v,
		carry: carried{charges: append([]charge(nil), c.charges...), globals: append([]globalRef(nil), c.globals...),
			keys: append([]byte(nil), c.keys...), since: c.since},
	}
	e.waiters = append(e.waiters, w)
	v.Outcome = Queue
}

// rejectFull rejects the request being decided (v) on rule i, whose slots
// under lim are all held (and whose queue, if any, is full): v gives back
// the slots it took and its Retry-After is when one may free for it, with
// waiting tickets ahead.
func (e *Engine) rejectFull(v *Verdict, i int, lim *limit.Limit, waiting int64, now int64) {
	e.releaseAll(v, now)
	wait := e.waitEstimate(i, lim.Limit(), waiting)
	v.Report, v.Remaining, v.Reset, v.RetryAfter, v.ReportLimit = &e.cfg.Rules[i], 0, wait, wait, lim.Limit()
	v.violate(i)
}

// hold1 counts one more slot held by this worker under hk.
func (e *Engine) hold1(hk holdKey, epoch uint16) {
	h := e.holdings[hk]
	if h == nil {
		h = &holding{}
		e.holdings[hk] = h
	}
	h.n++
	h.epoch = epoch
}

// releaseAll gives back the slots v holds.
func (e *Engine) releaseAll(v *Verdict, now int64) {
	e.Release(v.Slots, now)
	v.Slots = v.Slots[:0]
}

// Release gives back the concurrency slots of a request whose stream ended
// (response done, reset, client gone, another filter's local reply: Envoy
// ends every stream the plugin saw).
func (e *Engine) Release(slots []SlotRef, now int64) {
	e.renewDue(now)
	for _, s := range slots {
		e.trace(StepRelease, s.Rule)
		e.learnerReleases(&s)
		hk := holdKey{rule: s.Rule, fp: s.FP, overflow: s.Overflow, class: s.Class}
		h := e.holdings[hk]
		if h == nil {
			continue
		}
		op := &e.op
		*op = concOp{kind: opRelease, lim: e.releaseLimit(s.Rule, s.FP), held: 1, epoch: h.epoch, class: s.Class}
		if err := e.concModify(s.FP, s.Rule, s.Overflow, now, op); err != nil {
			// The slot is dropped with its lease at the latest (2 epochs)
			// once this worker stops renewing it, which it does now.
			e.Stats.ReleaseErrors++
		} else {
			// The gauges show the slots as this worker last changed them:
			// a release too, or an idle rule would show its last burst.
			e.lastSlots[s.Rule] = slotsSeen{op.observed.InFlight(), op.observed.Queued(), s.FP, s.Overflow, true}
		}
		if h.n--; h.n <= 0 {
			delete(e.holdings, hk)
		}
		if d := now - s.Since; d > 0 {
			if e.hold[s.Rule] == 0 {
				e.hold[s.Rule] = d
			} else {
				e.hold[s.Rule] += (d - e.hold[s.Rule]) / 8
			}
		}
	}
}

// HeldSlots returns the number of concurrency slots this worker holds.
func (e *Engine) HeldSlots() int64 {
	var n int64
	for _, h := range e.holdings {
		n += h.n
	}
	return n
}

// Waiting returns the number of requests of this worker waiting in queues
// (abandoned tickets not counted).
func (e *Engine) Waiting() int {
	n := 0
	for _, w := range e.waiters {
		if !w.gone {
			n++
		}
	}
	return n
}

// Abandon forgets the waiting request id (its stream ended); its ticket
// leaves the queue on a later Poll if it cannot at once.
func (e *Engine) Abandon(id uint32, now int64) {
	for _, w := range e.waiters {
		if w.ID == id && !w.gone {
			w.gone = true
			e.refund(w, now)
			e.releaseAll(&w.verdict, now)
			e.leave(w, now)
			return
		}
	}
}

// refund gives back the rate charges of a waiter that will not be served
// (its client left, its max_delay passed, a later rule refused it). They
// go back as a held request's do (refundHeld), not at once: a waiter's
// charges are reservations too (a rate rule may have delayed it), and
// while it waited other requests may have been held behind them; given
// back at once, the next request would take the last held one's turn, two
// released together.
func (e *Engine) refund(w *Waiter, now int64) {
	e.refundCharges(w.carry.charges, now)
	w.carry.charges = nil
}

// leave tries to take w's ticket out of its queue; it reports success (w
// can then be dropped).
func (e *Engine) leave(w *Waiter, now int64) bool {
	op := &e.op
	*op = concOp{kind: opLeave, lim: e.slotLimit(w.rule, w.fp, now), ticket: w.ticket, class: w.class}
	if err := e.concModify(w.fp, w.rule, w.overflow, now, op); err != nil {
		return false
	}
	if op.left {
		w.ID = 0
	}
	return op.left
}

// Poll advances the waiting requests at now: a waiter past its deadline is
// rejected (and every ticket up to its own leaves the queue: they have timed
// out too); each other live waiter, in arrival order, claims a slot;
// abandoned tickets leave. One shared-data read per queue (key) and tick at
// most, however many wait in it: the first waiter of a key that cannot go
// blocks the younger ones until the next tick. It appends what happened to
// requests to out.
func (e *Engine) Poll(now int64, out []ConcEvent) []ConcEvent {
	// A waiter let in may queue again, for a later rule of its request
	// (resume): that Waiter is appended to e.waiters, here a buffer of its
	// own, and joins the ones kept at the end (after them: its ticket is
	// the newest of its queue).
	waiters := e.waiters
	e.waiters = e.requeued[:0]
	keep := waiters[:0]
	if e.blocked == nil {
		e.blocked = map[holdKey]bool{}
	}
	clear(e.blocked)
	polls := 0
	for _, w := range waiters {
		key := holdKey{rule: w.rule, fp: w.fp, overflow: w.overflow, class: w.class}
		if now >= w.Deadline {
			out = e.timeOut(w, now, out)
			continue
		}
		if e.blocked[key] || polls >= MaxPollsPerTick {
			keep = append(keep, w)
			continue
		}
		polls++
		if w.gone {
			if w.ID != 0 && !e.leave(w, now) {
				e.blocked[key] = true
				keep = append(keep, w)
			}
			continue
		}
		op := e.claim(w, now)
		if op == nil {
			// Later tickets of this queue on this worker wait behind it.
			e.blocked[key] = true
			keep = append(keep, w)
			continue
		}
		out = e.resume(w, op, now, out)
	}
	keep = append(keep, e.waiters...)
	if len(keep) < len(waiters) {
		clear(waiters[len(keep):])
	}
	clear(e.waiters)
	e.waiters, e.requeued = keep, e.waiters[:0]
	e.renewDue(now)
	return out
}

// timeOut rejects w, whose deadline passed: its ticket and every older one
// leave the queue, its rate charges are refunded and the slots it took are
// given back. It appends the rejection to out, unless w was abandoned (its
// stream is gone: nothing to answer).
func (e *Engine) timeOut(w *Waiter, now int64, out []ConcEvent) []ConcEvent {
	id := w.ID
	if w.ID != 0 {
		e.expire(w, now)
	}
	if w.gone {
		return out
	}
	w.gone = true
	e.Stats.Rules[w.rule].Rejected++
	e.classRefuse(w.rule, w.class)
	v := w.verdict
	e.refund(w, now)
	e.releaseAll(&w.verdict, now)
	wait := e.waitEstimate(w.rule, e.slotLimit(w.rule, w.fp, now).Limit(), 0)
	v.Outcome, v.Delay, v.Slots = Reject, 0, nil
	v.Report, v.Remaining, v.Reset, v.RetryAfter = &e.cfg.Rules[w.rule], 0, wait, wait
	v.ReportLimit = e.slotLimit(w.rule, w.fp, now).Limit()
	v.violate(w.rule)
	return append(out, ConcEvent{ID: id, Verdict: v, Waited: time.Duration(now - w.carry.since)})
}

// claim asks for a slot with w's ticket; w's slot renews on the way. It
// returns e.op with the decision if w was admitted, nil if it still waits
// (or shared data failed: it tries again on the next tick).
func (e *Engine) claim(w *Waiter, now int64) *concOp {
	op := &e.op
	*op = concOp{kind: opClaim, lim: e.slotLimit(w.rule, w.fp, now), ticket: w.ticket, class: w.class}
	h := e.holdings[holdKey{rule: w.rule, fp: w.fp, overflow: w.overflow, class: w.class}]
	if h != nil {
		op.held, op.epoch = h.n, h.epoch
	}
	if err := e.concModify(w.fp, w.rule, w.overflow, now, op); err != nil {
		return nil
	}
	if h != nil {
		h.epoch = op.out.Epoch
	}
	if !op.out.Admitted {
		return nil
	}
	return op
}

// resume goes on with w, admitted by op after its wait: the slot joins w's
// verdict and the wait is counted, then w passes the concurrency rules it
// has still to (they may reject it, or queue it again). It appends what
// happened to out.
func (e *Engine) resume(w *Waiter, op *concOp, now int64, out []ConcEvent) []ConcEvent {
	r := &e.cfg.Rules[w.rule]
	e.trace(StepDequeue, w.rule)
	e.hold1(holdKey{rule: w.rule, fp: w.fp, overflow: w.overflow, class: w.class}, op.out.Epoch)
	v := &w.verdict
	v.Slots = append(v.Slots, SlotRef{Rule: w.rule, FP: w.fp, Overflow: w.overflow, Since: now, Saturated: IsAdaptive(r), Class: w.class,
		Waited: time.Duration(max(now-w.arrived, 1))})
	e.learnerTakes(w.rule, w.fp)
	e.noteUse(w.rule, w.fp, op.out.InFlight, op.lim)
	e.lastSlots[w.rule] = slotsSeen{op.out.InFlight, op.out.Waiting, w.fp, w.overflow, true}
	if rem := e.remaining(w.rule, op.lim, op.out.InFlight); v.Report == nil || rem < v.Remaining {
		v.Report, v.Remaining, v.Reset, v.ReportLimit, v.measured = r, rem, e.HoldEstimate(w.rule), op.lim.Limit(), 0
	}
	if v.Delayer == nil {
		v.Delayer = r // it waited in r's queue
	}
	if len(w.rest) > 0 {
		// More concurrency rules to pass: they may queue again.
		v.Outcome = Allow
		if i := e.acquire(w.ID, v, w.rest, w.carry, now); i >= 0 {
			e.trace(StepReject, i)
			e.refund(w, now)
			v.Outcome, v.Delay = Reject, 0
			return append(out, ConcEvent{ID: w.ID, Verdict: *v, Waited: time.Duration(now - w.carry.since)})
		}
		if v.Outcome == Queue {
			return out // a new Waiter took over
		}
	}
	if len(w.carry.globals) > 0 {
		// Every slot is its: now the global rules (which count it as the
		// request leaves for the upstream, or refuse it and give back all
		// it took).
		*v = e.askGlobal(*v, w.carry, now, false)
		return append(out, ConcEvent{ID: w.ID, Verdict: *v, Waited: time.Duration(now - w.carry.since)})
	}
	e.countAdmitted(v, w.carry.charges)
	v.Outcome = Allow
	if v.Delay > 0 {
		v.Outcome = Delay
	}
	e.admitSamples(v, now)
	return append(out, ConcEvent{ID: w.ID, Verdict: *v, Waited: time.Duration(now - w.carry.since)})
}

// renewDue renews this worker's slots if it has not yet in the epoch of
// now. Poll (on the tick) calls it, and so do acquisitions and releases: a
// worker swamped by a burst runs its streams' callbacks but its timer late,
// by seconds on an overloaded machine, and slots renewed only on the tick
// would then lapse while their requests are still at the backend (the
// other workers would admit more than the limit).
func (e *Engine) renewDue(now int64) {
	if ep := limit.EpochAt(now); ep != e.renewed && len(e.holdings) > 0 {
		e.renewed = ep
		e.renew(now)
	}
}

// expire takes w's ticket, and every older one, out of its queue (w's
// deadline passed).
func (e *Engine) expire(w *Waiter, now int64) {
	op := &e.op
	*op = concOp{kind: opExpire, lim: &e.cfg.Rules[w.rule].Limit, ticket: w.ticket, class: w.class}
	_ = e.concModify(w.fp, w.rule, w.overflow, now, op)
	w.ID = 0
}

// renew re-registers every slot this worker holds in the current epoch:
// the lease that keeps them counted (see limit.Slots).
func (e *Engine) renew(now int64) {
	ep := limit.EpochAt(now)
	for hk, h := range e.holdings {
		if h.epoch == ep {
			continue
		}
		op := &e.op
		*op = concOp{kind: opRenew, lim: &e.cfg.Rules[hk.rule].Limit, held: h.n, epoch: h.epoch, class: hk.class}
		if err := e.concModify(hk.fp, hk.rule, hk.overflow, now, op); err == nil {
			h.epoch = op.out.Epoch
		}
	}
}

// InFlight returns the slots of rule i held for the key of fp, as shared
// data says at now (all workers).
func (e *Engine) InFlight(i int, fp uint64, now int64) (inFlight, waiting int64, err error) {
	op := &e.op
	*op = concOp{kind: opView, lim: &e.cfg.Rules[i].Limit}
	if err := e.concModify(fp, i, false, now, op); err != nil {
		return 0, 0, err
	}
	return op.observed.InFlight(), op.observed.Queued(), nil
}
