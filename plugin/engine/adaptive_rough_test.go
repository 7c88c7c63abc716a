package engine

import (
	"testing"
	"time"
)

// A cold rule whose first round read the upstream 25% faster than it is
// (the noise of its 4 latencies, or a loop lag taken out of responses the
// lag did not delay) takes every later round for a queue and backs off.
// The round measuring under the lowered limit reads the same latency as
// the one it backed off from: no queue of the rule's, and once measured
// again the limit grows on by half per round trip from where it backed
// off to. Before, it
// backed off again, from 5.7 to 4.1, and probed from there by one request
// per round of 16 samples: still at 4 twelve round trips later, on an
// upstream that answered every request in 45 ms.
func TestAdaptiveColdLowBaseRecovers(t *testing.T) {
	e := New(mustConfig(t, adaptiveDoc), newMemStore(), 1, wallClock)
	now := t0
	adaptiveRound(e, now, 34*time.Millisecond, SampleResponse)
	low := e.LearntGauge(0).Limit
	for i := 0; i < 12; i++ {
		now += int64(50 * time.Millisecond)
		adaptiveRound(e, now, 45*time.Millisecond, SampleResponse)
		low = min(low, e.LearntGauge(0).Limit)
	}
	if g := e.LearntGauge(0); g.Current() < 16 || low < 4 {
		t.Errorf("12 round trips at 45 ms after a first round at 34 ms: %+v (lowest limit %.1f), want it grown past 16 from no lower than 4", g, low)
	}
}
