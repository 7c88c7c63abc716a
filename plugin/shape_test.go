package main

import (
	"reflect"
	"testing"

	"github.com/sluicehq/sluice/internal/shape"
)

// TestPluginContextFields: a worker's plugin context holds at most 15
// fields, counting those of embedded structs: what it does beyond them
// goes into a part that owns its state (worker.go).
func TestPluginContextFields(t *testing.T) {
	n, names := shape.Fields(reflect.TypeOf(pluginContext{}))
	t.Logf("pluginContext: %d fields %v", n, names)
	if n > 15 {
		t.Fatalf("pluginContext has %d fields %v, want at most 15", n, names)
	}
}
