package shape

import (
	"reflect"
	"testing"
)

type inner struct{ a, b int }

type outer struct {
	inner
	c string
	d *inner // a pointer to a struct is one field
}

func TestFieldsCountsEmbeddedInPlace(t *testing.T) {
	n, names := Fields(reflect.TypeOf(outer{}))
	if n != 4 || !reflect.DeepEqual(names, []string{"a", "b", "c", "d"}) {
		t.Fatalf("Fields = %d %v, want 4 [a b c d]", n, names)
	}
}
