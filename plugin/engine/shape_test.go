package engine

import (
	"reflect"
	"testing"

	"github.com/sluicehq/sluice/internal/shape"
)

// engineFields is how many fields Engine may hold, counting those of its
// embedded structs (a group of fields does not hide them): each subsystem
// is its own package behind one or a few fields and owns its state
// (package local the local rules' charges, key and fingerprint seed, the
// kept reservations and whether the worker may hold a request; package
// flight the in-flight rules; package global the calls in flight, the
// decision's global rules, the link to the service, the debts and costs;
// package match the matching). The engine keeps the configuration, the
// state table, the stats, the clock, the tracer and the waiting request it
// reuses (scratch), and routes a request through the subsystems. What the
// plugin tells about one decision comes with the call
// (DecideRedirect) or through a subsystem (SetHoldsFull).
const engineFields = 15

// TestEngineFields: Engine holds at most engineFields fields.
func TestEngineFields(t *testing.T) {
	n, names := shape.Fields(reflect.TypeOf(Engine{}))
	t.Logf("Engine: %d fields (at most %d) %v", n, engineFields, names)
	if n > engineFields {
		t.Fatalf("Engine has %d fields %v, want at most %d", n, names, engineFields)
	}
}
