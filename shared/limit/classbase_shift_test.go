package limit

import (
	"math/rand"
	"sort"
	"testing"
	"time"
)

// shiftRun runs the e2e test TestClassesAdaptiveInEnvoy's first phase
// (8 slots x 50 ms, 64 buyers, a login class reserving 0.25 of the limit,
// the worker stalling as in TestAdaptiveWorkerStalls) whose service time
// moves every second, for 14 s: by shift x (0 or 1, at random) for a
// negative shift, by up to shift x (uniform) for a positive one (a busy
// machine: the upstream, in the test's process, and the Envoy timing it
// run slower or faster by the second). It returns the limit learnt after
// 5 s more at 50 ms.
func shiftRun(t *testing.T, seed int64, shift float64) float64 {
	rng := rand.New(rand.NewSource(seed))
	factor := 1.0
	s := newSim(t, 1, 1000, 8, 64, func() time.Duration {
		return time.Duration(float64(50*time.Millisecond) * factor * (0.9 + 0.2*rng.Float64()))
	})
	s.cb, s.reserve = &ClassBases{}, 0.25
	s.pauses, s.dropLate, s.tickEvery = stalls(rng, s.now, 15*time.Second), true, int64(100*time.Millisecond)
	s.run(time.Second)
	for range 14 {
		if shift < 0 {
			factor = 1 + shift*float64(rng.Intn(2))
		} else {
			factor = 1 + shift*rng.Float64()
		}
		s.run(time.Second)
	}
	factor = 1
	s.run(5 * time.Second)
	return s.g.Limit
}

// TestClassBasesShift: a rule with classes whose upstream's latency moves
// by the second (halves, or rises by up to a third) ends, 5 s after it
// settled, near its capacity (8): over 20 seeds each, a median limit of
// 6-11, none under 3 nor over 16. Before the round that measures after a
// backoff re-measured the class bases and they remembered 64 samples when
// they follow a round, the halving left a median of 5.0, 4 seeds at
// 1.0-1.4 (a base learnt while fast moved up a step per round, every round
// meanwhile read a rise and backed off) and 5 at 17-28, and the rise a
// median of 15.0, up to 34.0 (the bases took in the queue each probe
// built).
// Re-measured in the first measure round, the one where the Gauge still
// waits for a second round before taking a rise of 1.5x as the
// upstream's (see Gauge.endRound), the bases left the second with
// nothing to see: no slow start, and the halving left 14 seeds of 40
// at 1.0-2.2.
func TestClassBasesShift(t *testing.T) {
	for _, shift := range []float64{-0.5, 0.3} {
		var lims []float64
		for seed := int64(1); seed <= 20; seed++ {
			lims = append(lims, shiftRun(t, seed, shift))
		}
		sort.Float64s(lims)
		t.Logf("shift %.1f: limits %.1f-%.1f, median %.1f", shift, lims[0], lims[19], lims[10])
		if lims[10] < 6 || lims[10] > 11 || lims[0] < 3 || lims[19] > 16 {
			t.Errorf("shift %.1f: limits %.1f-%.1f, median %.1f: want a median of 6-11, none under 3 nor over 16", shift, lims[0], lims[19], lims[10])
		}
	}
}
