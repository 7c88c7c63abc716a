package flight

import (
	"time"

	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/shared/limit"
)

// Adaptive concurrency rules (algorithm "adaptive_concurrency") are
// concurrency rules (the same slots, leases, queue and
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
	// GaugeSalt makes the ID of a rule's Gauge region out of the rule's.
	GaugeSalt = 0x6761756765000000
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
	_ [0]func() // not comparable: no equality function in the module
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
	// cb is the no-queue latency per priority class, for a rule with
	// classes (nil otherwise): each sample is compared with its class's.
	cb *limit.ClassBases
	// key is the learner's key in Adaptive.learners, at its index in
	// Adaptive.list.
	key learnKey
	at  int
}

// timing returns how long l's Sampler windows stay open and wait (see
// limit.Gauge.SamplerTiming): for a rule with classes, from its slowest
// class's base.
func (l *learner) timing() (span, wait time.Duration) {
	if l.cb != nil {
		return l.cb.Timing()
	}
	return l.g.SamplerTiming()
}

// classBase returns the no-queue latency of class c for the sample of
// the request Admit gave ticket, of latency lat, counting it in the class's
// base only if its window counts (a sample read late in a stall of the
// worker would teach the class a latency that is not the upstream's).
func (l *learner) classBase(ticket uint32, c uint8, lat time.Duration) time.Duration {
	if !l.smp.Counts(ticket) {
		return l.cb.Base(int(c))
	}
	return l.cb.Expect(int(c), lat)
}

// base returns the no-queue latency a sample of class c is compared with.
func (l *learner) base(c uint8) time.Duration {
	if l.cb != nil {
		return l.cb.Base(int(c))
	}
	return l.g.Base
}

// gaugeOp is the Modifier of Gauge transitions.
type gaugeOp struct {
	_     [0]func() // not comparable: no equality function in the module
	lim   *limit.Limit
	batch limit.Samples
	learn bool
	out   limit.Gauge
	// prev is the Gauge the last learning transition started from.
	prev limit.Gauge
}

// AdaptiveStats counts what went wrong learning (part of the engine's
// Stats).
type AdaptiveStats struct {
	// GaugeErrors counts exchanges with an adaptive rule's shared Gauge
	// that failed (the worker learnt on its own copy meanwhile).
	GaugeErrors uint64
	// LateWindows counts the sample windows of adaptive rules dropped
	// because this worker's loop ran late while their requests were out
	// (see loopLag).
	LateWindows uint64
}

// Adaptive is the state of the adaptive concurrency rules on one worker:
// the latency samples of its requests per key, batched into the shared
// Gauge, and its copy of each Gauge.
type Adaptive struct {
	cfg      *config.Config
	table    Table
	stats    *AdaptiveStats
	learners map[learnKey]*learner
	// list holds the learners for the walks over all of them (Learn,
	// forgetLearners): ranging over the map would link the runtime's map
	// iteration, about 7 KB of code in every Envoy.
	list       []*learner
	gop        gaugeOp
	slotLim    limit.Limit
	lastGauge  []limit.Gauge
	learnSwept int64
	// gaugeRegion is the table region of adaptive rule i's Gauges.
	gaugeRegion []int
	loop        loopLag
	// roundEnded, when set, is told each decision of a Gauge this worker
	// made (OnRoundEnded).
	roundEnded func(i int, prev, next limit.Gauge)
}

// NewAdaptive returns the adaptive rules' state for cfg: Gauges in table
// (after the rules' own regions, one region per adaptive rule, in rule
// order: see GaugeRegions), errors counted in stats.
func NewAdaptive(cfg *config.Config, table Table, stats *AdaptiveStats) Adaptive {
	return Adaptive{
		cfg:         cfg,
		table:       table,
		stats:       stats,
		learners:    map[learnKey]*learner{},
		gaugeRegion: gaugeRegions(cfg),
		lastGauge:   make([]limit.Gauge, len(cfg.Rules)),
	}
}

// OnRoundEnded sets f to be told each decision of an adaptive rule's
// Gauge this worker made: rule i's Gauge went from prev (its last round's
// samples, without the batch that ended it) to next.
func (a *Adaptive) OnRoundEnded(f func(i int, prev, next limit.Gauge)) { a.roundEnded = f }

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

// learnerFor returns this worker's view of the Gauge of rule i for key fp,
// reading it from shared data the first time.
func (a *Adaptive) learnerFor(i int, fp uint64, now int64) *learner {
	k := learnKey{rule: i, fp: fp}
	l := a.learners[k]
	if l == nil {
		if len(a.learners) >= MaxLearners {
			a.forgetLearners(now, true)
		}
		l = &learner{key: k, at: len(a.list)}
		a.list = append(a.list, l)
		if len(a.cfg.Rules[i].Classes) > 0 {
			l.cb = &limit.ClassBases{}
		}
		l.g = a.cfg.Rules[i].Limit.Gauge(limit.State{})
		l.smp.ResetTo(l.g, now)
		a.learners[k] = l
		a.syncGauge(k, l, now)
	}
	l.used = now
	return l
}

// syncGauge adds l's batch to the shared Gauge (or only reads it) and
// refreshes l from it.
func (a *Adaptive) syncGauge(k learnKey, l *learner, now int64) {
	r := &a.cfg.Rules[k.rule]
	op := &a.gop
	*op = gaugeOp{lim: &r.Limit, batch: l.smp.Ready, learn: l.smp.Ready.Pending()}
	if l.smp.Ready.N > 0 && l.useN > 0 {
		op.batch.Use = l.useSum / float64(l.useN)
		l.useSum, l.useN = 0, 0
	}
	l.synced = now
	_, err := a.table.Modify(k.fp, a.gaugeRegion[k.rule], false, now, op)
	if err != nil {
		// Keep learning on this worker's copy until shared data is back.
		a.stats.GaugeErrors++
		l.noShare = true
		_, op.out = r.Limit.Learn(limit.EncodeGauge(l.g), now, l.smp.Ready)
	} else {
		l.noShare = false
	}
	if op.learn && err == nil && op.out.Round != op.prev.Round && a.roundEnded != nil {
		a.roundEnded(k.rule, op.prev, op.out)
	}
	switch {
	case op.out.Round != l.g.Round:
		// A new round: the requests in flight were admitted under the
		// old limit.
		l.smp.ResetTo(op.out, now)
		if l.cb != nil {
			l.cb.RoundEnded(l.g, op.out)
		}
	case op.learn:
		l.smp.Ready = limit.Samples{Round: l.g.Round}
	}
	l.g = op.out
	a.lastGauge[k.rule] = l.g
}

// gaugeRegions returns, per rule, the table region of its Gauges (the
// engine's Regions; -1 for a rule that is not adaptive).
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
func (a *Adaptive) forgetLearners(now int64, force bool) {
	// Backwards: the last learner, which takes a forgotten one's place,
	// has been looked at.
	for i := len(a.list) - 1; i >= 0; i-- {
		l := a.list[i]
		if !l.smp.Ready.Pending() && l.inFlight == 0 && (force || now-l.used > int64(learnerIdle)) {
			delete(a.learners, l.key)
			last := a.list[len(a.list)-1]
			a.list[i], last.at = last, i
			a.list[len(a.list)-1] = nil
			a.list = a.list[:len(a.list)-1]
		}
	}
}

// Takes counts a request of this worker holding a slot of rule i
// for key fp, for an adaptive rule: its view is kept while any does (see
// MaxLearners).
func (a *Adaptive) Takes(i int, fp uint64) {
	if !IsAdaptive(&a.cfg.Rules[i]) {
		return
	}
	if l := a.learners[learnKey{rule: i, fp: fp}]; l != nil {
		l.inFlight++
	}
}

// AdmitSamples gives the adaptive rules' slots of a request forwarded to
// the upstream at now their Sampler tickets: its sample will count in the
// window of its forwarding. Only a request forwarded as it is decided
// (Allow) gets them. One that a rate rule holds, or that waits for a
// global rule's call or in a later rule's queue, holding the slot
// meanwhile, gives no sample: its window would wait for it (and count it
// at its age when it gave up on it) while it had not reached the
// upstream.
func (a *Adaptive) AdmitSamples(slots []SlotRef, now int64) {
	for i := range slots {
		s := &slots[i]
		if !IsAdaptive(&a.cfg.Rules[s.Rule]) || s.Ticket != 0 {
			continue
		}
		if l := a.learners[learnKey{rule: s.Rule, fp: s.FP}]; l != nil {
			if l.cb != nil {
				l.cb.Admitted(int(s.Class))
			}
			span, _ := l.timing()
			if l.cb != nil {
				s.Ticket = l.smp.AdmitBearing(now, span, max(l.cb.Bears(int(s.Class)), minStall))
			} else {
				s.Ticket = l.smp.Admit(now, span)
			}
		}
	}
}

// Releases counts the release of slot s: one request fewer in
// flight, and done for the Sampler if it gave no sample (its ticket is
// still there: Sluice or another filter answered it, or it never reached
// the upstream).
func (a *Adaptive) Releases(s *SlotRef) {
	if !IsAdaptive(&a.cfg.Rules[s.Rule]) {
		return
	}
	if l := a.learners[learnKey{rule: s.Rule, fp: s.FP}]; l != nil {
		l.inFlight = max(l.inFlight-1, 0)
		l.smp.Done(s.Ticket, 0, false, false)
	}
}

// ReleaseLimit returns the Limit a release of rule i's slot for key fp
// runs on: SlotLimit's, without reading a Gauge this worker has no view
// of (the rule's upper bound then: a release needs the limit only to tell
// whether the slots were all held).
func (a *Adaptive) ReleaseLimit(i int, fp uint64) *limit.Limit {
	r := &a.cfg.Rules[i]
	l := a.learners[learnKey{rule: i, fp: fp}]
	if !IsAdaptive(r) || l == nil {
		return &r.Limit
	}
	a.slotLim = r.Limit.At(l.g.Current())
	return &a.slotLim
}

// SlotLimit returns the Limit the slot transitions of concurrency rule i
// run on for key fp: the rule's own, or for an adaptive rule its bounds at
// the learnt limit (in its scratch Limit, valid until the next call).
func (a *Adaptive) SlotLimit(i int, fp uint64, now int64) *limit.Limit {
	r := &a.cfg.Rules[i]
	if !IsAdaptive(r) {
		return &r.Limit
	}
	a.slotLim = r.Limit.At(a.learnerFor(i, fp, now).g.Current())
	return &a.slotLim
}

// AtLimit reports whether an admission of rule i with inFlight requests in
// flight used the learnt limit (see limit.Gauge.AtLimit).
func (a *Adaptive) AtLimit(i int, fp uint64, inFlight int64) bool {
	if !IsAdaptive(&a.cfg.Rules[i]) {
		return false
	}
	if l := a.learners[learnKey{rule: i, fp: fp}]; l != nil {
		return l.g.AtLimit(inFlight)
	}
	return false
}

// OverLimit notes that rule i's key fp had more requests than its learnt
// limit (one was refused or queued for it): the round used its limit, as
// an admission at the limit says (see limit.Gauge.AtLimit). Under a small
// limit, a round's few samples may include none admitted at the limit.
func (a *Adaptive) OverLimit(i int, fp uint64) {
	if !IsAdaptive(&a.cfg.Rules[i]) {
		return
	}
	if l := a.learners[learnKey{rule: i, fp: fp}]; l != nil {
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
func (a *Adaptive) Sample(slots []SlotRef, sent, now int64, kind SampleKind) {
	for i := range slots {
		s := &slots[i]
		ticket := s.Ticket
		if ticket == 0 || !IsAdaptive(&a.cfg.Rules[s.Rule]) {
			continue
		}
		s.Ticket = 0
		k := learnKey{rule: s.Rule, fp: s.FP}
		l := a.learners[k]
		if l == nil {
			continue
		}
		a.noteStall(now)
		a.lateWindows(l, max(sent, s.Since), now)
		lat := time.Duration(now - max(sent, s.Since))
		lag := a.LoopLag()
		lat -= min(lag, lat*3/4)
		b := l.base(s.Class)
		counts := kind == SampleResponse || (b > 0 && float64(lat) > float64(b)*(1+limit.Tolerance))
		var ok bool
		switch {
		case kind == SampleEnded && !counts:
			ok = l.smp.Cut(ticket) // its window would count only the quick
		case l.cb != nil && !l.cb.Timed(int(s.Class), lag):
			ok = l.smp.Done(ticket, lat, false, false) // the loop's lag, not the upstream's latency
		case counts && l.cb != nil && l.cb.Fast(int(s.Class)):
			ok = l.smp.DoneFast(ticket, lat, l.classBase(ticket, s.Class, lat), s.Saturated) // its word on the queue (see limit.Gauge.Fast)
		case counts && l.cb != nil:
			ok = l.smp.DoneBase(ticket, lat, l.classBase(ticket, s.Class, lat), true, s.Saturated)
		default:
			ok = l.smp.Done(ticket, lat, counts, s.Saturated)
		}
		if !ok {
			continue
		}
		l.used = now
		if l.smp.Ready.Pending() && (now-l.synced >= int64(LearnEvery) || l.g.Completes(l.smp.Ready)) {
			a.syncGauge(k, l, now)
		}
	}
}

// Learn is the tick's share of the adaptive rules: it adds the samples
// not yet added, refreshes the views in use and forgets idle ones.
func (a *Adaptive) Learn(now int64) {
	if len(a.learners) == 0 {
		return
	}
	for _, l := range a.list {
		k := l.key
		span, wait := l.timing()
		l.smp.Close(now, span)
		l.smp.Expire(now, wait)
		switch {
		case l.smp.Ready.Pending() && now-l.synced >= int64(LearnEvery):
			a.syncGauge(k, l, now)
		case !l.smp.Ready.Pending() && now-l.synced >= int64(RefreshEvery) && now-l.used < int64(time.Second):
			a.syncGauge(k, l, now)
		}
	}
	if now-a.learnSwept > int64(learnerIdle) {
		a.learnSwept = now
		a.forgetLearners(now, false)
	}
}

// LearntGauge returns the Gauge of adaptive rule i as this worker last saw
// it (any key; the zero Gauge before the first request).
func (a *Adaptive) LearntGauge(i int) limit.Gauge { return a.lastGauge[i] }

// AnyAdaptive reports whether one of slots belongs to an adaptive rule.
func (a *Adaptive) AnyAdaptive(slots []SlotRef) bool {
	for _, s := range slots {
		if IsAdaptive(&a.cfg.Rules[s.Rule]) {
			return true
		}
	}
	return false
}

// NoteUse counts, for an adaptive rule with classes, the share of the
// limit lim in flight (inFlight, all classes) at an admission of key fp:
// the Gauge estimates the upstream's capacity from what was really in
// flight (see limit.Gauge.Use). An admission that fills its class's cap
// (free, what the class may still take, just decided) under the limit
// used the round's limit as far as the reserves let it: the round is
// saturated, as a queued or refused request makes it. The Gauge takes
// Use only from saturated rounds: in any other, a low share is little
// demand, not the reserves' doing.
func (a *Adaptive) NoteUse(i int, fp uint64, inFlight int64, lim *limit.Limit, free int64) {
	if !IsAdaptive(&a.cfg.Rules[i]) {
		return
	}
	if l := a.learners[learnKey{rule: i, fp: fp}]; l != nil {
		l.useSum += min(float64(inFlight)/float64(max(lim.Limit(), 1)), 1)
		l.useN++
		if free <= 0 {
			l.smp.Ready.Saturated = true
		}
	}
}

// LearnerView is a copy of what this worker knows of one key's Gauge
// (tests and diagnostics).
type LearnerView struct {
	Gauge limit.Gauge
	// Ready is the batch of samples it adds next.
	Ready limit.Samples
	// UseN counts the admissions whose share of the limit it gathered.
	UseN int
}

// View returns this worker's view of the Gauge of rule i for key fp, ok
// false when it has none.
func (a *Adaptive) View(i int, fp uint64) (v LearnerView, ok bool) {
	l := a.learners[learnKey{rule: i, fp: fp}]
	if l == nil {
		return LearnerView{}, false
	}
	return LearnerView{Gauge: l.g, Ready: l.smp.Ready, UseN: l.useN}, true
}

// Read returns the Gauge of rule i for key fp, reading it from shared
// data when this worker has no view of it yet.
func (a *Adaptive) Read(i int, fp uint64, now int64) limit.Gauge { return a.learnerFor(i, fp, now).g }

// Views returns how many Gauges this worker keeps a view of.
func (a *Adaptive) Views() int { return len(a.learners) }

// CloseWindow closes the open sample window of rule i's key fp at now, as
// the tick does (Learn) with span.
func (a *Adaptive) CloseWindow(i int, fp uint64, now int64, span time.Duration) {
	if l := a.learners[learnKey{rule: i, fp: fp}]; l != nil {
		l.smp.Close(now, span)
	}
}
