package engine

import (
	"reflect"
	"testing"

	"github.com/sluicehq/sluice/internal/shape"
)

// engineFieldsGoal is how many fields Engine may hold once each subsystem
// is its own package behind one field; engineFieldsNow is the ceiling
// while the split is under way. It only comes down: a subsystem moved to
// its own package lowers it by what it took along (package global's Link
// took the caller, the circuit, the round trip and the call buffer; the
// route's tracer added one; Debts and Costs took the debts, their count
// per rule and cap, and the cost averages; match.Matcher took the path
// buffers, what the rules need, the index and the matched rules; package
// flight's Adaptive took the learnt limits, their Gauge exchanges, the
// loop's lag and RoundEnded; its Classes the class regions and their
// buffers; its Rules the slots held, their renewal, the hold times, the
// transition and the last slots seen, all behind one field; then the
// queue's waiters, the poll's buffers and the decision's concurrency rules;
// package local's Rules the charges, the key buffer and the kept
// reservations; package global's Calls the calls in flight and whose
// stream is the current context, its Asked the decision's global rules and
// their key bytes; the global rules' counts went into Stats).
const (
	engineFieldsGoal = 15
	engineFieldsNow  = 18
)

// TestEngineFields: Engine holds at most engineFieldsNow fields, counting
// those of its embedded structs (the groups localRules, globalRules, ...
// do not hide theirs); the goal is engineFieldsGoal.
func TestEngineFields(t *testing.T) {
	n, names := shape.Fields(reflect.TypeOf(Engine{}))
	t.Logf("Engine: %d fields (goal %d) %v", n, engineFieldsGoal, names)
	if n > engineFieldsNow {
		t.Fatalf("Engine has %d fields %v, want at most %d (and %d once split)", n, names, engineFieldsNow, engineFieldsGoal)
	}
}
