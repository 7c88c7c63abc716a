package limit

// A Gauge lives in the rule's shared state as one State: 16 bytes that
// every worker reads and writes with the same compare-and-swap, so all of
// it must fit two words.

import (
	"math"
	"time"
)

// EncodeGauge packs g into a State (16 bytes).
func EncodeGauge(g Gauge) State {
	lim := uint64(min(max(g.Limit, 0), MaxConcurrency+0.9375)*16) & (1<<20 - 1)
	n := uint64(min(max(g.N, 0), 1<<16-1))
	var f uint64
	if g.SlowStart {
		f |= 1
	}
	if g.Measure {
		f |= 2
	}
	if g.Saturated {
		f |= 4
	}
	if g.Warned {
		f |= 8
	}
	a := lim | micros(g.Base)<<20 | n<<44 | f<<60
	use := uint64(math.Round(min(max(g.Use, 0), 1) * useSteps))
	b := micros(g.Mean) | uint64(g.Round&roundMask)<<24 | use<<43 | uint64(min(max(g.Calm, 0), maxCalm))<<49
	if g.Measure && g.Stalled || !g.Measure && g.FastGrown {
		// One bit for two flags: Stalled is only set while the limit
		// measures Base (a backoff sets both, measured clears both),
		// FastGrown only while it does not (slow start's growth).
		b |= 1 << 55
	}
	b |= uint64(min(max(g.BaseN, 0), maxBaseN))<<56 | uint64(min(max(g.Fast, 0), FastQueue))<<61
	if g.Grown {
		b |= 1 << 63
	}
	return State{A: int64(a), B: int64(b)}
}

// DecodeGauge unpacks a State written by EncodeGauge (the zero State
// decodes to a zero Limit: a cold rule).
func DecodeGauge(st State) Gauge {
	a, b := uint64(st.A), uint64(st.B)
	f := a >> 60
	bit55 := b>>55&1 != 0
	return Gauge{
		Limit: float64(a&(1<<20-1)) / 16,
		Base:  time.Duration(a>>20&(1<<24-1)) * time.Microsecond,
		N:     int64(a >> 44 & (1<<16 - 1)),
		Mean:  time.Duration(b&(1<<24-1)) * time.Microsecond,
		Round: uint32(b >> 24 & roundMask),
		Use:   float64(b>>43&useSteps) / useSteps,
		Calm:  int64(b >> 49 & maxCalm),
		BaseN: int64(b >> 56 & maxBaseN),
		Fast:  int64(b >> 61 & 3),

		SlowStart: f&1 != 0, Measure: f&2 != 0, Saturated: f&4 != 0, Warned: f&8 != 0,
		Stalled: bit55 && f&2 != 0, FastGrown: bit55 && f&2 == 0, Grown: b>>63 != 0,
	}
}

func micros(d time.Duration) uint64 {
	return uint64(min(max(d, 0), MaxLatency) / time.Microsecond)
}
