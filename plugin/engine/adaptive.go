package engine

import (
	"time"

	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/plugin/engine/flight"
	"github.com/sluicehq/sluice/shared/limit"
)

// Adaptive concurrency rules (algorithm "adaptive_concurrency") are
// concurrency rules (concurrency.go: the same slots, leases, queue and
// release paths) whose limit is learnt: package flight (Adaptive) keeps
// what this worker knows of each key's shared Gauge and the latency
// samples of its requests. The engine passes it the slots its requests
// take and release and the tick.

// Timing of the exchanges with the shared Gauge (flight.Adaptive).
const (
	LearnEvery   = flight.LearnEvery
	RefreshEvery = flight.RefreshEvery
	MaxLearners  = flight.MaxLearners
)

// SampleKind says what ended a request's wait for the upstream.
type SampleKind = flight.SampleKind

// What ended a request's wait for the upstream (flight.SampleKind).
const (
	SampleResponse = flight.SampleResponse
	SampleFailure  = flight.SampleFailure
	SampleEnded    = flight.SampleEnded
)

// MaxLoopLag bounds how late a tick counts (flight.MaxLoopLag).
const MaxLoopLag = flight.MaxLoopLag

// IsAdaptive reports whether rule r learns its concurrency limit.
func IsAdaptive(r *config.Rule) bool { return flight.IsAdaptive(r) }

// Ticked notes a tick that began at now, of a tick timer of the given
// period (flight.Adaptive.Ticked: how late this worker's loop runs).
func (e *Engine) Ticked(now int64, period time.Duration) { e.flight.Ticked(now, period) }

// TickDone notes that the tick's work ended at now.
func (e *Engine) TickDone(now int64) { e.flight.TickDone(now) }

// LoopLag returns the loop lag Sample takes out of a latency now.
func (e *Engine) LoopLag() time.Duration { return e.flight.LoopLag() }

// OnRoundEnded sets f to be told each decision of an adaptive rule's
// Gauge this worker made: rule i's Gauge went from prev (its last round's
// samples, without the batch that ended it) to next.
func (e *Engine) OnRoundEnded(f func(i int, prev, next limit.Gauge)) { e.flight.OnRoundEnded(f) }

// admitSamples gives the adaptive rules' slots of v, a request forwarded
// to the upstream at now, their Sampler tickets (flight.Adaptive.
// AdmitSamples): only a request forwarded as it is decided (Allow).
func (e *Engine) admitSamples(v *Verdict, now int64) {
	if v.Outcome != Allow {
		return
	}
	e.flight.AdmitSamples(v.Slots, now)
}

// Sample feeds the Gauges of the adaptive rules among slots with one
// request's latency: sent is when it was forwarded to the upstream (at or
// after its admission), now when kind happened (flight.Adaptive.Sample).
// It uses up the slots' tickets.
func (e *Engine) Sample(slots []SlotRef, sent, now int64, kind SampleKind) {
	e.flight.Sample(slots, sent, now, kind)
}

// Learn is the tick's share of the adaptive rules: it adds the samples
// not yet added, refreshes the views in use and forgets idle ones.
func (e *Engine) Learn(now int64) { e.flight.Learn(now) }

// LearntGauge returns the Gauge of adaptive rule i as this worker last saw
// it (any key; the zero Gauge before the first request).
func (e *Engine) LearntGauge(i int) limit.Gauge { return e.flight.LearntGauge(i) }

// AnyAdaptive reports whether one of slots belongs to an adaptive rule.
func (e *Engine) AnyAdaptive(slots []SlotRef) bool { return e.flight.AnyAdaptive(slots) }

// LastSlots returns the requests in flight and queued of concurrency rule
// i for the key of this worker's last admission or release of the rule, as
// shared data holds them at now (flight.Rules.LastSlots).
func (e *Engine) LastSlots(i int, now int64) (inFlight, queued int64) {
	return e.flight.LastSlots(i, now)
}
