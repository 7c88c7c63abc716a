package engine

import (
	"bytes"
	"math"
	"testing"

	"github.com/sluicehq/sluice/shared/limit"
)

// TestSlotStateAsLimits: update reads and writes a slot's state with the
// table's own 64-bit loads and stores (no calls), which must be
// limit.State's encoding, byte for byte: the shared data is read by every
// worker and by older modules.
func TestSlotStateAsLimits(t *testing.T) {
	for _, st := range []limit.State{{}, {A: 1, B: -1}, {A: math.MaxInt64, B: math.MinInt64}, {A: 0x0102030405060708, B: -0x0a0b0c0d0e0f1011}} {
		want := make([]byte, limit.StateSize)
		st.Encode(want)
		got := make([]byte, limit.StateSize)
		putUint64(got[0:8], uint64(st.A))
		putUint64(got[8:16], uint64(st.B))
		if !bytes.Equal(got, want) {
			t.Errorf("%+v: written % x, limit encodes % x", st, got, want)
		}
		if back := (limit.State{A: int64(getUint64(want[0:8])), B: int64(getUint64(want[8:16]))}); back != limit.DecodeState(want) {
			t.Errorf("%+v: read %+v, limit decodes %+v", st, back, limit.DecodeState(want))
		}
	}
}
