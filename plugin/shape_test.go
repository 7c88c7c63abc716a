package main

import (
	"reflect"
	"testing"
)

// fieldsOf counts the fields of struct type t, those of its embedded
// structs in place of the embedded struct itself.
func fieldsOf(t reflect.Type) (n int, names []string) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			m, sub := fieldsOf(f.Type)
			n += m
			names = append(names, sub...)
			continue
		}
		n++
		names = append(names, f.Name)
	}
	return n, names
}

// TestPluginContextFields: a worker's plugin context holds at most 15
// fields, counting those of embedded structs: what it does beyond them
// goes into a part that owns its state (worker.go).
func TestPluginContextFields(t *testing.T) {
	n, names := fieldsOf(reflect.TypeOf(pluginContext{}))
	t.Logf("pluginContext: %d fields %v", n, names)
	if n > 15 {
		t.Fatalf("pluginContext has %d fields %v, want at most 15", n, names)
	}
}
