package engine

import (
	"time"

	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/shared/limit"
)

// Adaptive concurrency rules (algorithm "adaptive_concurrency") are
// concurrency rules (concurrency.go: the same slots, leases, queue and
// release paths) whose limit is learnt: limit.Gauge, one per rule and key,
// in the same shared table as the slots (in a region of its own, see
// Regions) and updated with the same CAS loop by every worker. This file keeps what
// one worker knows of it:
//
//   - the Gauge as this worker last read or wrote it: admission uses its
//     limit, so deciding a request costs no extra shared-data access;
//   - the latency samples of its requests, gathered by admission in a
//     limit.Sampler (a sample counts once the requests admitted with it
//     are all back, so a round's mean is not that of its fastest
//     answers), which it adds to the shared Gauge every LearnEvery, or at
//     once when they complete the round, from the response path or the
//     tick; each exchange also refreshes its copy. A worker with nothing
//     to add refreshes its copy on the tick every RefreshEvery while it
//     uses the rule.
//
// A sample is the time from the request's forwarding (after any wait in
// Sluice) to the upstream's response headers; what is not the upstream's
// latency is kept out (see Sample).

// Timing of the exchanges with the shared Gauge.
const (
	LearnEvery   = 10 * time.Millisecond
	RefreshEvery = 50 * time.Millisecond
	// learnerIdle: a worker's copy of a Gauge unused this long is
	// forgotten (it is read again when needed).
	learnerIdle = 5 * time.Second
	// MaxLearners bounds the Gauges one worker keeps a copy of, besides
	// those of keys with a request in flight on it (their latency is
	// still to come: a copy forgotten then would lose it).
	MaxLearners = 4096
	// gaugeSalt makes the ID of a rule's Gauge region out of the rule's.
	gaugeSalt = 0x6761756765000000
)

// SampleKind says what ended a request's wait for the upstream.
type SampleKind uint8

const (
	// SampleResponse: the upstream's own response headers, status < 500.
	SampleResponse SampleKind = iota
	// SampleFailure: a 5xx of the upstream, or Envoy's reply about it
	// (upstream timeout, reset, connection failure). It counts only when
	// it took longer than the learnt latency allows (then it shows the
	// upstream slow); a fast failure says nothing about capacity.
	SampleFailure
	// SampleEnded: the stream ended before any response headers (client
	// gone, reset): counted like SampleFailure, as a lower bound.
	SampleEnded
)

type learnKey struct {
	rule int
	fp   uint64
}

// learner is this worker's view of one Gauge.
type learner struct {
	g limit.Gauge
	// smp gathers this worker's samples of round g.Round (of the requests
	// admitted since it saw the round); smp.Ready is what it adds next.
	smp    limit.Sampler
	synced int64 // last exchange with shared data
	used   int64
	// inFlight counts this worker's requests holding the rule's slot for
	// this key: their samples are still to come.
	inFlight int
	noShare  bool // shared data failed: decide on the copy alone
	// useSum and useN gather the share of the limit in flight at each
	// admission since the last batch, for a rule with classes (see
	// limit.Gauge.Use).
	useSum float64
	useN   int
}

// gaugeOp is the Modifier of Gauge transitions.
type gaugeOp struct {
	lim   *limit.Limit
	batch limit.Samples
	learn bool
	out   limit.Gauge
	// prev is the Gauge the last learning transition started from.
	prev limit.Gauge
}

// adaptiveRules is the engine's state for adaptive concurrency rules: the
// latency samples of this worker per key, batched into the shared Gauge.
type adaptiveRules struct {
	learners   map[learnKey]*learner
	gop        gaugeOp
	slotLim    limit.Limit
	lastGauge  []limit.Gauge
	lastSlots  []slotsSeen
	learnSwept int64
	// gaugeRegion is the table region of adaptive rule i's Gauges.
	gaugeRegion []int
	loop        loopLag
}

// loopLag estimates how late this worker's event loop runs what is due on
// it. An Envoy that is itself swamped (a flood of new clients and their
// 429s, a CPU shared with other work) reads an upstream's response late,
// and that wait is not the upstream's latency: taken for it, it backs the
// limit off an idle upstream. The tick is a timer on the same loop, so how
// late it fires samples the same wait. Two uses:
//
//   - A stall (the loop late by more than it usually is: a worker not
//     scheduled for a while on a busy machine) drops the samples of the
//     requests that were out during it (Sample, see noteStall): a
//     forwarded request waits for the loop more than once (the upstream
//     connection, the request's write, the response's read), so no
//     correction of one sample can say how much of its latency was the
//     stall. The stall is seen on the response path as soon as the loop
//     runs again (the tick is overdue: it fires after the answers read in
//     the same turn of the loop), or by the tick itself.
//   - The loop's usual lateness: Sample takes the recent mean of it
//     (MaxLoopLag at most) out of each latency, leaving at least a
//     quarter, but no more than the last tick's lateness: the mean
//     remembers a stall for a second after it ends, and taken out of the
//     responses read on time after it, it would teach the rule a Base
//     under the upstream's latency.
type loopLag struct {
	done   int64 // when the previous tick's work ended
	period int64 // ns: the tick period
	mean   int64 // ns: the mean lateness of recent ticks
	last   int64 // ns: the last tick's lateness
	// stallFrom is when the last stall seen began (the due time of the
	// tick it held up), stallBy how late over its usual the loop was.
	stallFrom, stallBy int64
}

// MaxLoopLag bounds how late a tick counts: later than that is a stall (a
// paused process) more than a busy loop, and counts as MaxLoopLag.
const MaxLoopLag = time.Second

// Ticked notes a tick that began at now, of a tick timer of the given
// period. Envoy arms the next tick when the callback returns (TickDone),
// so the lateness is measured from then: the tick's own work is not lag.
// The mean weighs the last tick by a quarter (about the last second at
// 100 ms ticks, the period with concurrency rules).
func (e *Engine) Ticked(now int64, period time.Duration) {
	l := &e.loop
	if l.done > 0 && period > 0 {
		l.period = int64(period)
		e.noteStall(now)
		late := min(max(now-l.done-int64(period), 0), int64(MaxLoopLag))
		l.mean += (late - l.mean) / 4
		l.last = late
	}
}

// TickDone notes that the tick's work ended at now.
func (e *Engine) TickDone(now int64) { e.loop.done = now }

// LoopLag returns the loop lag Sample takes out of a latency now (see
// loopLag).
func (e *Engine) LoopLag() time.Duration { return time.Duration(min(e.loop.mean, e.loop.last)) }

// noteStall notes a stall when this worker's loop is late at now by
// more than it usually is: the tick due at done+period has not run yet,
// or runs now. The requests forwarded by then and answered since were
// out during it (see Sample).
func (e *Engine) noteStall(now int64) {
	l := &e.loop
	if l.done <= 0 || l.period <= 0 {
		return
	}
	due := l.done + l.period
	over := now - due - l.mean
	if over < int64(minStall) {
		return
	}
	if due != l.stallFrom {
		l.stallFrom, l.stallBy = due, over
	}
	l.stallBy = max(l.stallBy, over)
}

// lateWindows drops l's sample windows of the requests out during the
// last stall, when a request forwarded at fwd was one of them (answered
// at now, after the stall began) and the stall could move the latency l
// learns (see stallFor).
func (e *Engine) lateWindows(l *learner, fwd, now int64) {
	st := &e.loop
	if st.stallFrom > 0 && fwd <= st.stallFrom && now >= st.stallFrom && time.Duration(st.stallBy) >= stallFor(l.g) {
		e.Stats.LateWindows += uint64(l.smp.Late(st.stallFrom, now))
	}
}

// minStall is the shortest stall noteStall looks for (the lateness of
// a busy but running loop is a few milliseconds, and counted in the
// mean).
const minStall = 2 * time.Millisecond

// stallFor returns how late over its usual a worker's loop must be for
// its stall to drop g's samples: an eighth of the latency learnt (a rise
// of Tolerance in a round is a queue), at least minStall; 5 ms before
// Base is known (the first round measures Base: a stall in it would be
// learnt as the upstream's latency).
func stallFor(g limit.Gauge) time.Duration {
	if g.Base <= 0 {
		return 5 * time.Millisecond
	}
	return max(g.Base/8, minStall)
}

func (o *gaugeOp) Modify(st limit.State, now int64, _ bool) (limit.State, int64, bool) {
	if !o.learn {
		o.out = o.lim.Gauge(st)
		return st, 0, false
	}
	o.prev = o.lim.Gauge(st)
	next, g := o.lim.Learn(st, now, o.batch)
	o.out = g
	return next, now + int64(limit.GaugeTTL), true
}

// IsAdaptive reports whether rule r learns its concurrency limit.
func IsAdaptive(r *config.Rule) bool { return r.Limit.Algorithm() == limit.AdaptiveConcurrency }

// learnerFor returns this worker's view of the Gauge of rule i for key fp,
// reading it from shared data the first time.
func (e *Engine) learnerFor(i int, fp uint64, now int64) *learner {
	k := learnKey{rule: i, fp: fp}
	l := e.learners[k]
	if l == nil {
		if len(e.learners) >= MaxLearners {
			e.forgetLearners(now, true)
		}
		l = &learner{}
		l.g = e.cfg.Rules[i].Limit.Gauge(limit.State{})
		l.smp.Reset(l.g.Round, now)
		e.learners[k] = l
		e.syncGauge(k, l, now)
	}
	l.used = now
	return l
}

// syncGauge adds l's batch to the shared Gauge (or only reads it) and
// refreshes l from it.
func (e *Engine) syncGauge(k learnKey, l *learner, now int64) {
	r := &e.cfg.Rules[k.rule]
	op := &e.gop
	*op = gaugeOp{lim: &r.Limit, batch: l.smp.Ready, learn: l.smp.Ready.N > 0}
	if op.learn && l.useN > 0 {
		op.batch.Use = l.useSum / float64(l.useN)
		l.useSum, l.useN = 0, 0
	}
	l.synced = now
	_, err := e.table.Modify(k.fp, e.gaugeRegion[k.rule], false, now, op)
	if err != nil {
		// Keep learning on this worker's copy until shared data is back.
		e.Stats.GaugeErrors++
		l.noShare = true
		_, op.out = r.Limit.Learn(limit.EncodeGauge(l.g), now, l.smp.Ready)
	} else {
		l.noShare = false
	}
	if op.learn && err == nil && op.out.Round != op.prev.Round && e.RoundEnded != nil {
		e.RoundEnded(k.rule, op.prev, op.out)
	}
	switch {
	case op.out.Round != l.g.Round:
		// A new round: the requests in flight were admitted under the
		// old limit.
		l.smp.Reset(op.out.Round, now)
	case op.learn:
		l.smp.Ready = limit.Samples{Round: l.g.Round}
	}
	l.g = op.out
	e.lastGauge[k.rule] = l.g
}

// gaugeRegions returns, per rule, the table region of its Gauges (see
// Regions; -1 for a rule that is not adaptive).
func gaugeRegions(cfg *config.Config) []int {
	out := make([]int, len(cfg.Rules))
	next := len(cfg.Rules)
	for i := range cfg.Rules {
		out[i] = -1
		if IsAdaptive(&cfg.Rules[i]) {
			out[i] = next
			next++
		}
	}
	return out
}

// forgetLearners drops the views not used for learnerIdle (all idle ones
// with nothing to add when force is set, to make room); never one with a
// request in flight.
func (e *Engine) forgetLearners(now int64, force bool) {
	for k, l := range e.learners {
		if l.smp.Ready.N == 0 && l.inFlight == 0 && (force || now-l.used > int64(learnerIdle)) {
			delete(e.learners, k)
		}
	}
}

// learnerTakes counts a request of this worker holding a slot of rule i
// for key fp, for an adaptive rule: its view is kept while any does (see
// MaxLearners).
func (e *Engine) learnerTakes(i int, fp uint64) {
	if !IsAdaptive(&e.cfg.Rules[i]) {
		return
	}
	if l := e.learners[learnKey{rule: i, fp: fp}]; l != nil {
		l.inFlight++
	}
}

// admitSamples gives the adaptive rules' slots of v, a request forwarded
// to the upstream at now, their Sampler tickets: its sample will count in
// the window of its forwarding. Only a request forwarded as it is
// decided (Allow) gets them. One that a rate rule holds, or that waits
// for a global rule's call or in a later rule's queue, holding the slot
// meanwhile, gives no sample: its window would wait for it (and count it
// at its age when it gave up on it) while it had not reached the
// upstream.
func (e *Engine) admitSamples(v *Verdict, now int64) {
	if v.Outcome != Allow {
		return
	}
	for i := range v.Slots {
		s := &v.Slots[i]
		if !IsAdaptive(&e.cfg.Rules[s.Rule]) || s.Ticket != 0 {
			continue
		}
		if l := e.learners[learnKey{rule: s.Rule, fp: s.FP}]; l != nil {
			span, _ := l.g.SamplerTiming()
			s.Ticket = l.smp.Admit(now, span)
		}
	}
}

// learnerReleases counts the release of slot s: one request fewer in
// flight, and done for the Sampler if it gave no sample (its ticket is
// still there: Sluice or another filter answered it, or it never reached
// the upstream).
func (e *Engine) learnerReleases(s *SlotRef) {
	if !IsAdaptive(&e.cfg.Rules[s.Rule]) {
		return
	}
	if l := e.learners[learnKey{rule: s.Rule, fp: s.FP}]; l != nil {
		l.inFlight = max(l.inFlight-1, 0)
		l.smp.Done(s.Ticket, 0, false, false)
	}
}

// releaseLimit returns the Limit a release of rule i's slot for key fp
// runs on: slotLimit's, without reading a Gauge this worker has no view
// of (the rule's upper bound then: a release needs the limit only to tell
// whether the slots were all held).
func (e *Engine) releaseLimit(i int, fp uint64) *limit.Limit {
	r := &e.cfg.Rules[i]
	l := e.learners[learnKey{rule: i, fp: fp}]
	if !IsAdaptive(r) || l == nil {
		return &r.Limit
	}
	e.slotLim = r.Limit.At(l.g.Current())
	return &e.slotLim
}

// slotLimit returns the Limit the slot transitions of concurrency rule i
// run on for key fp: the rule's own, or for an adaptive rule its bounds at
// the learnt limit (in e.slotLim, valid until the next call).
func (e *Engine) slotLimit(i int, fp uint64, now int64) *limit.Limit {
	r := &e.cfg.Rules[i]
	if !IsAdaptive(r) {
		return &r.Limit
	}
	e.slotLim = r.Limit.At(e.learnerFor(i, fp, now).g.Current())
	return &e.slotLim
}

// atLimit reports whether an admission of rule i with inFlight requests in
// flight used the learnt limit (see limit.Gauge.AtLimit).
func (e *Engine) atLimit(i int, fp uint64, inFlight int64) bool {
	if !IsAdaptive(&e.cfg.Rules[i]) {
		return false
	}
	if l := e.learners[learnKey{rule: i, fp: fp}]; l != nil {
		return l.g.AtLimit(inFlight)
	}
	return false
}

// overLimit notes that rule i's key fp had more requests than its learnt
// limit (one was refused or queued for it): the round used its limit, as
// an admission at the limit says (see limit.Gauge.AtLimit). Under a small
// limit, a round's few samples may include none admitted at the limit.
func (e *Engine) overLimit(i int, fp uint64) {
	if !IsAdaptive(&e.cfg.Rules[i]) {
		return
	}
	if l := e.learners[learnKey{rule: i, fp: fp}]; l != nil {
		l.smp.Ready.Saturated = true
	}
}

// Sample feeds the Gauges of the adaptive rules among slots with one
// request's latency: sent is when it was forwarded to the upstream (at or
// after its admission), now when kind happened. Requests that Sluice or
// another filter answered never reach here (their release counts them
// done); a request admitted before this worker saw its Gauge's current
// round is not counted (it ran under an older limit). It uses up the
// slots' tickets.
func (e *Engine) Sample(slots []SlotRef, sent, now int64, kind SampleKind) {
	for i := range slots {
		s := &slots[i]
		ticket := s.Ticket
		if ticket == 0 || !IsAdaptive(&e.cfg.Rules[s.Rule]) {
			continue
		}
		s.Ticket = 0
		k := learnKey{rule: s.Rule, fp: s.FP}
		l := e.learners[k]
		if l == nil {
			continue
		}
		e.noteStall(now)
		e.lateWindows(l, max(sent, s.Since), now)
		lat := time.Duration(now - max(sent, s.Since))
		lat -= min(e.LoopLag(), lat*3/4)
		counts := kind == SampleResponse || (l.g.Base > 0 && float64(lat) > float64(l.g.Base)*(1+limit.Tolerance))
		var ok bool
		switch {
		case kind == SampleEnded && !counts:
			ok = l.smp.Cut(ticket) // its window would count only the quick
		default:
			ok = l.smp.Done(ticket, lat, counts, s.Saturated)
		}
		if !ok {
			continue
		}
		l.used = now
		if l.smp.Ready.N > 0 && (now-l.synced >= int64(LearnEvery) || l.g.Completes(l.smp.Ready)) {
			e.syncGauge(k, l, now)
		}
	}
}

// Learn is the tick's share of the adaptive rules: it adds the samples
// not yet added, refreshes the views in use and forgets idle ones.
func (e *Engine) Learn(now int64) {
	if len(e.learners) == 0 {
		return
	}
	for k, l := range e.learners {
		span, wait := l.g.SamplerTiming()
		l.smp.Close(now, span)
		l.smp.Expire(now, wait)
		switch {
		case l.smp.Ready.N > 0 && now-l.synced >= int64(LearnEvery):
			e.syncGauge(k, l, now)
		case l.smp.Ready.N == 0 && now-l.synced >= int64(RefreshEvery) && now-l.used < int64(time.Second):
			e.syncGauge(k, l, now)
		}
	}
	if now-e.learnSwept > int64(learnerIdle) {
		e.learnSwept = now
		e.forgetLearners(now, false)
	}
}

// LearntGauge returns the Gauge of adaptive rule i as this worker last saw
// it (any key; the zero Gauge before the first request).
func (e *Engine) LearntGauge(i int) limit.Gauge { return e.lastGauge[i] }

// LastSlots returns the requests in flight and queued of concurrency rule
// i for the key of this worker's last admission or release of the rule, as
// shared data holds them at now (every worker then shows the same figures
// for a rule with one key; what it saw then if shared data fails).
func (e *Engine) LastSlots(i int, now int64) (inFlight, queued int64) {
	ls := e.lastSlots[i]
	if !ls.known {
		return 0, 0
	}
	op := &e.op
	*op = concOp{kind: opView, lim: e.releaseLimit(i, ls.fp)}
	if err := e.concModify(ls.fp, i, ls.overflow, now, op); err != nil {
		return ls.inFlight, ls.queued
	}
	return op.observed.InFlight(), op.observed.Queued()
}

// slotsSeen is a rule's slots as this worker's last admission or release
// left them, and the key's slot (fp, overflow).
type slotsSeen struct {
	inFlight, queued int64
	fp               uint64
	overflow, known  bool
}

// AnyAdaptive reports whether one of slots belongs to an adaptive rule.
func (e *Engine) AnyAdaptive(slots []SlotRef) bool {
	for _, s := range slots {
		if IsAdaptive(&e.cfg.Rules[s.Rule]) {
			return true
		}
	}
	return false
}
