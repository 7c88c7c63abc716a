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
// buffers, what the rules need, the index and the matched rules).
const (
	engineFieldsGoal = 15
	engineFieldsNow  = 46
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
