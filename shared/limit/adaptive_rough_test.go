package limit

import (
	"testing"
	"time"
)

// A cold rule's first round measures Base on 4 latencies: of service
// times that vary by a factor of two (25-75 ms) their mean is a fifth or
// more under the upstream's in about one cold start of twelve. Every later
// round then reads as a queue: slow start backs off, and the round
// measuring under the lowered limit, of more samples than the Base it is
// compared with, reads the same latency again: no queue of the rule's. It
// is measured once more at that limit, as after a stall, and slow start
// goes on from the lowered limit, Base the mean of the two. Before, on an
// upstream that answered in 45 ms every time, the limit backed off again
// (8 -> 5.7 -> 4.1), probed from Base 39.5 ms, read 45 ms as a mild rise
// twice, and held 3.4 for 48 round trips.
func TestAdaptiveRoughBaseSlowStartsAgain(t *testing.T) {
	lim, _ := NewAdaptive(1, 1000)
	now := int64(time.Hour)
	const ms = time.Millisecond
	st, g := roundOf(lim, State{}, &now, 4, 34*ms)
	if g.Limit != 8 || g.Base != 34*ms || g.BaseN != 4 || !g.SlowStart {
		t.Fatalf("cold round of 4 at 34ms: %+v, want limit 8, Base 34ms on 4 samples, slow start", g)
	}
	st, _ = roundOf(lim, st, &now, 4, 45*ms)
	st, g = roundOf(lim, st, &now, 4, 45*ms)
	if want := 8 * 34.0 / 45 * Backoff; !g.Measure || g.SlowStart || g.Limit != want {
		t.Fatalf("two slow-start rounds at 1.32x Base: %+v, want a backoff to %.2f, measuring", g, want)
	}
	backedOff := DecodeGauge(st).Limit
	st, g = roundOf(lim, st, &now, 8, 45*ms)
	if !g.Measure || g.Limit != backedOff || g.Base != 34*ms || !g.Stalled || g.Warned {
		t.Fatalf("the measuring round of 8 at 45ms over a Base of 4 samples: %+v, want no backoff, measured again at %.2f as after a stall", g, backedOff)
	}
	st, g = roundOf(lim, st, &now, 8, 45*ms)
	if want := (34 + 45) * ms / 2; !g.SlowStart || g.Measure || g.Limit != backedOff || g.Base != want || g.BaseN != 8 {
		t.Fatalf("measured again, at 45ms: %+v, want slow start from %.2f, Base %v", g, backedOff, want)
	}
	for range 5 {
		st, g = roundOf(lim, st, &now, max(g.Current()/2, MinRound/4), 45*ms)
	}
	if g.Limit < 20 || !g.SlowStart {
		t.Errorf("five slow-start rounds at 45ms after it: %+v, want it grown by half each (over 20)", g)
	}
	// Over a rough Base, a measuring round 1.5x or more is measured once
	// more at the same limit, as over any (see slower); over a Base of
	// MinRound samples or more, one under 1.5x backs off once more (see
	// TestAdaptiveHoldsAfterBackoff).
	g = Gauge{Limit: 8, Base: 34 * ms, BaseN: 4, Round: 3, Measure: true}
	if _, g = roundOf(lim, EncodeGauge(g), &now, 8, 52*ms); !g.Measure || !g.Warned || g.Limit != 8 || g.Base != 34*ms {
		t.Errorf("a measuring round of 8 at 1.53x a Base of 4 samples: %+v, want it measured once more at 8", g)
	}
}
