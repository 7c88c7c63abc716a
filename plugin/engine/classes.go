package engine

import (
	"github.com/sluicehq/sluice/plugin/config"
)

// Priority classes (rule field `classes`) divide the slots of one key of a
// concurrency rule (package flight, Classes: one shared value per key with
// every class's slots, changed with one compare-and-swap). The engine
// finds the request's class; flight's slot transitions run on its value.

// HasClasses reports whether rule i has priority classes.
func (e *Engine) HasClasses(i int) bool { return e.flight.Has(i) }

// ClassRefused returns how many requests of class k of rule i this worker
// refused (at once, or after a wait in the queue).
func (e *Engine) ClassRefused(i, k int) uint64 { return e.flight.Refused(i, k) }

// classOf returns the class of the request being decided under rule r.
func classOf(r *config.Rule, ri *requestInfo) uint8 {
	if len(r.Classes) == 0 {
		return 0
	}
	return uint8(r.ClassOf(&ri.t))
}

// ClassSlots returns the requests in flight and queued of class k of rule
// i as this worker last saw them (LastSlots refreshes them); ok is false
// when this worker has not seen the rule's slots yet (an idle worker must
// not publish zeros over the figures of the others).
func (e *Engine) ClassSlots(i, k int) (inFlight, queued int64, ok bool) {
	return e.flight.ClassSlots(i, k)
}

// SlotsKnown reports whether this worker has seen the slots of concurrency
// rule i (an admission, a wait or a release of it): until then LastSlots
// has nothing to say, and an idle worker must not publish its zeros over
// the figures of the others.
func (e *Engine) SlotsKnown(i int) bool { return e.flight.SlotsKnown(i) }
