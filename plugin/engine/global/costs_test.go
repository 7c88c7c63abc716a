package global

import (
	"encoding/binary"
	"testing"
)

type mapStore map[string][]byte

func (m mapStore) Get(k string) ([]byte, uint32, bool, error) {
	v, ok := m[k]
	return append([]byte(nil), v...), 0, ok, nil
}

func (m mapStore) Set(k string, v []byte, _ uint32) (bool, error) {
	m[k] = append([]byte(nil), v...)
	return false, nil
}

// TestCosts: 1 before anything is known; the first charge sets the
// average, later ones move it by a quarter; a change of the deposit is
// published, and another worker with no charge of its own reads it.
func TestCosts(t *testing.T) {
	st := mapStore{}
	c := NewCosts(2, st)
	if c.Expected(1, "r") != 1 || c.Known(1) {
		t.Fatal("want 1, unknown, before any charge")
	}
	c.Learn(1, "r", 8)
	if c.Expected(1, "r") != 8 || !c.Known(1) {
		t.Fatalf("after a charge of 8: %d", c.Expected(1, "r"))
	}
	c.Learn(1, "r", 0) // 8 + (0-8)/4 = 6
	if got := c.Expected(1, "r"); got != 6 {
		t.Fatalf("after 8 then 0: %d, want 6", got)
	}
	v, ok := st[CostKey("r")]
	if !ok || binary.LittleEndian.Uint64(v) != 6<<costShift {
		t.Fatalf("published %v, want 6 in fixed point", v)
	}
	other := NewCosts(2, st)
	if got := other.Expected(1, "r"); got != 6 || !other.Known(1) {
		t.Fatalf("another worker reads %d, want the published 6", got)
	}
	if c.Expected(0, "s") != 1 {
		t.Fatal("another rule is unknown")
	}
}
