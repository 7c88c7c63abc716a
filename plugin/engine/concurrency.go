package engine

import (
	"time"

	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/plugin/engine/flight"
	"github.com/sluicehq/sluice/shared/limit"
)

// Concurrency rules (algorithm "concurrency") hold a slot from admission
// until the stream ends. What one worker knows of the slots (what it
// holds, their leases' renewal, the observed hold time) is package
// flight's (Rules); this file routes a request through them and keeps the
// requests of this worker that wait in a rule's queue (max_delay) with a
// ticket, in arrival order. Tick polls them; a ticket is admitted when
// fewer tickets wait ahead of it than slots are free, whichever worker
// holds the tickets ahead, so the queue is FIFO across workers (within
// limit.QueueWindow of its head).

// SlotRef is a concurrency slot held by a request, to be released when its
// stream ends (flight.SlotRef).
type SlotRef = flight.SlotRef

// pendingConc is a concurrency rule still to be acquired by a request.
type pendingConc = flight.Pending

// waiter is a request waiting in a concurrency rule's queue: its ticket
// (flight.Waiter, whose Request is the waiter itself), its verdict so far
// and what it carries.
type waiter struct {
	flight.Waiter
	rest    []pendingConc
	carry   carried
	verdict Verdict
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

// IsConcurrency reports whether rule r limits requests in flight.
func IsConcurrency(r *config.Rule) bool { return flight.IsConcurrency(r) }

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
const MaxWaiters = flight.MaxWaiters

// MaxPollsPerTick bounds the queues (distinct keys) one tick polls.
const MaxPollsPerTick = flight.MaxPollsPerTick

// HoldEstimate returns the mean time requests of concurrency rule i held
// their slot on this worker (0 until one has ended).
func (e *Engine) HoldEstimate(i int) time.Duration { return e.flight.HoldEstimate(i) }

// acquire takes the concurrency slots of pending for the request being
// decided (v), in order. It returns the index of the rule that rejected
// the request (-1 if none), or queues the request (v.Outcome = Queue,
// with a Waiter registered for id, which carries c).
func (e *Engine) acquire(id uint32, v *Verdict, pending []pendingConc, c carried, now int64) int {
	e.flight.RenewDue(now)
	for k, p := range pending {
		r := &e.cfg.Rules[p.Rule]
		t, err := e.flight.Acquire(p, e.flight.QueueFull(), now)
		if err != nil {
			if e.acquireFailed(v, p.Rule, err, now) {
				return p.Rule
			}
			continue
		}
		st := &e.Stats.Rules[p.Rule]
		switch {
		case t.Admitted:
			e.trace(StepSlot, p.Rule)
			e.holdSlot(v, &t, now)
		case t.Queued:
			e.trace(StepQueue, p.Rule)
			e.enqueue(id, v, t.Key, t.Ticket, pending[k+1:], c, now)
			return -1
		case r.Shadow:
			st.ShadowRejected++
			if v.Shadow == nil {
				v.Shadow, v.ShadowRetryAfter = r, e.flight.WaitEstimate(p.Rule, t.Lim.Limit(), t.Waiting)
			}
		default:
			e.trace(StepSlotRefuse, p.Rule)
			e.flight.Refuse(p.Rule, p.Class)
			st.Rejected++
			e.rejectFull(v, p.Rule, t.Lim, t.Waiting, now)
			return p.Rule
		}
	}
	return -1
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

// holdSlot records the slot t granted to the request being decided (v):
// this worker holds it and v releases it when its stream ends. v reports
// the rule that leaves the fewest slots free (on a tie, the one whose
// slots free the latest): the headers describe the most constrained.
func (e *Engine) holdSlot(v *Verdict, t *flight.Taken, now int64) {
	i := t.Key.Rule
	r := &e.cfg.Rules[i]
	s, rem := e.flight.Take(t, 0, now)
	v.Slots = append(v.Slots, s)
	// A shadow rule reports nothing but x-ratelimit-shadow (when it would
	// refuse): its slots are not the client's limit.
	if !r.Shadow && (v.Report == nil || rem < v.Remaining || (rem == v.Remaining && e.HoldEstimate(i) > v.Reset)) {
		v.Report, v.Remaining, v.Reset, v.ReportLimit, v.measured = r, rem, e.HoldEstimate(i), t.Lim.Limit(), 0
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
// queue of slot k: a Waiter registered for id keeps its verdict so far,
// the concurrency rules it has still to pass (rest) and c, copied since the
// caller's slices are reused.
func (e *Engine) enqueue(id uint32, v *Verdict, k flight.Key, ticket uint16, rest []pendingConc, c carried, now int64) {
	r := &e.cfg.Rules[k.Rule]
	w := &waiter{
		Waiter: flight.Waiter{ID: id, Deadline: now + int64(r.MaxDelay), Arrived: now, Key: k, Ticket: ticket},
		rest:   append([]pendingConc(nil), rest...), verdict: *v,
		carry: carried{charges: append([]charge(nil), c.charges...), globals: append([]globalRef(nil), c.globals...),
			keys: append([]byte(nil), c.keys...), since: c.since},
	}
	w.Request = w
	e.flight.Enqueue(&w.Waiter)
	v.Outcome = Queue
}

// rejectFull rejects the request being decided (v) on rule i, whose slots
// under lim are all held (and whose queue, if any, is full): v gives back
// the slots it took and its Retry-After is when one may free for it, with
// waiting tickets ahead.
func (e *Engine) rejectFull(v *Verdict, i int, lim *limit.Limit, waiting int64, now int64) {
	e.releaseAll(v, now)
	wait := e.flight.WaitEstimate(i, lim.Limit(), waiting)
	v.Report, v.Remaining, v.Reset, v.RetryAfter, v.ReportLimit = &e.cfg.Rules[i], 0, wait, wait, lim.Limit()
	v.violate(i)
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
	e.flight.RenewDue(now)
	for _, s := range slots {
		e.trace(StepRelease, s.Rule)
		if e.flight.Release(&s, now) != nil {
			e.Stats.ReleaseErrors++
		}
	}
}

// HeldSlots returns the number of concurrency slots this worker holds.
func (e *Engine) HeldSlots() int64 { return e.flight.HeldSlots() }

// Waiting returns the number of requests of this worker waiting in queues
// (abandoned tickets not counted).
func (e *Engine) Waiting() int { return e.flight.Waiting() }

// Abandon forgets the waiting request id (its stream ended); its ticket
// leaves the queue on a later Poll if it cannot at once.
func (e *Engine) Abandon(id uint32, now int64) {
	if fw := e.flight.Abandon(id); fw != nil {
		w := fw.Request.(*waiter)
		e.refund(w, now)
		e.releaseAll(&w.verdict, now)
		e.flight.LeaveQueue(fw, now)
	}
}

// refund gives back the rate charges of a waiter that will not be served
// (its client left, its max_delay passed, a later rule refused it). They
// go back as a held request's do (RefundHeld), not at once: a waiter's
// charges are reservations too (a rate rule may have delayed it), and
// while it waited other requests may have been held behind them; given
// back at once, the next request would take the last held one's turn, two
// released together.
func (e *Engine) refund(w *waiter, now int64) {
	e.refundCharges(w.carry.charges, now)
	w.carry.charges = nil
}

// Poll advances the waiting requests at now: a waiter past its deadline is
// rejected (and every ticket up to its own leaves the queue: they have timed
// out too); each other live waiter, in arrival order, claims a slot;
// abandoned tickets leave. One shared-data read per queue (key) and tick at
// most, however many wait in it: the first waiter of a key that cannot go
// blocks the younger ones until the next tick. It appends what happened to
// requests to out.
func (e *Engine) Poll(now int64, out []ConcEvent) []ConcEvent {
	e.flight.PollStart()
	for {
		fw, t, admitted := e.flight.PollNext(now)
		if fw == nil {
			break
		}
		w := fw.Request.(*waiter)
		if admitted {
			out = e.resume(w, &t, now, out)
		} else {
			out = e.timeOut(w, now, out)
		}
	}
	e.flight.PollEnd(now)
	return out
}

// timeOut rejects w, whose deadline passed: its ticket and every older one
// leave the queue, its rate charges are refunded and the slots it took are
// given back. It appends the rejection to out, unless w was abandoned (its
// stream is gone: nothing to answer).
func (e *Engine) timeOut(w *waiter, now int64, out []ConcEvent) []ConcEvent {
	id := w.ID
	if w.ID != 0 {
		e.flight.ExpireQueue(&w.Waiter, now)
	}
	if w.Gone {
		return out
	}
	w.Gone = true
	i := w.Key.Rule
	e.Stats.Rules[i].Rejected++
	e.flight.Refuse(i, w.Key.Class)
	v := w.verdict
	e.refund(w, now)
	e.releaseAll(&w.verdict, now)
	wait := e.flight.WaitEstimate(i, e.flight.SlotLimit(i, w.Key.FP, now).Limit(), 0)
	v.Outcome, v.Delay, v.Slots = Reject, 0, nil
	v.Report, v.Remaining, v.Reset, v.RetryAfter = &e.cfg.Rules[i], 0, wait, wait
	v.ReportLimit = e.flight.SlotLimit(i, w.Key.FP, now).Limit()
	v.violate(i)
	return append(out, ConcEvent{ID: id, Verdict: v, Waited: time.Duration(now - w.carry.since)})
}

// resume goes on with w, admitted by op after its wait: the slot joins w's
// verdict and the wait is counted, then w passes the concurrency rules it
// has still to (they may reject it, or queue it again). It appends what
// happened to out.
func (e *Engine) resume(w *waiter, t *flight.Taken, now int64, out []ConcEvent) []ConcEvent {
	r := &e.cfg.Rules[w.Key.Rule]
	e.trace(StepDequeue, w.Key.Rule)
	v := &w.verdict
	s, rem := e.flight.Take(t, time.Duration(max(now-w.Arrived, 1)), now)
	v.Slots = append(v.Slots, s)
	if v.Report == nil || rem < v.Remaining {
		v.Report, v.Remaining, v.Reset, v.ReportLimit, v.measured = r, rem, e.HoldEstimate(w.Key.Rule), t.Lim.Limit(), 0
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

// InFlight returns the slots of rule i held for the key of fp, as shared
// data says at now (all workers).
func (e *Engine) InFlight(i int, fp uint64, now int64) (inFlight, waiting int64, err error) {
	return e.flight.InFlight(i, fp, now)
}
