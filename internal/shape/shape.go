// Package shape measures the shape of types for tests that keep them small:
// how many fields a struct holds, counting an embedded struct's fields in
// its place (wrapping fields in an embedded group does not hide them).
package shape

import "reflect"

// Fields counts the fields of struct type t, those of its embedded structs
// in place of the embedded struct itself, and returns their names.
func Fields(t reflect.Type) (n int, names []string) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			m, sub := Fields(f.Type)
			n += m
			names = append(names, sub...)
			continue
		}
		n++
		names = append(names, f.Name)
	}
	return n, names
}
