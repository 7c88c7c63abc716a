package flight

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/shared/limit"
)

// A worker's Sampler follows the rounds of the shared Gauge it reads: in
// the round after slow start's growth from a round where the fast
// classes read calm (limit.Gauge.WordAtOnce), a fast class's word reaches
// the worker's batch as soon as its sample is back; in the next round,
// which does not watch a growth, only with its window.
func TestAdaptiveWordAtOnceFollowsGauge(t *testing.T) {
	r, _ := newRules(t, `{"rules":[{"name":"store","algorithm":"adaptive_concurrency","key":[],
 "classes":[{"name":"login","match":{"path_prefix":"/login"},"reserve":0.1}]}]}`)
	a := &r.Adaptive
	tab := a.table.(*memTable)
	ms := time.Millisecond
	const fp = 7
	watch := limit.Gauge{Limit: 30, Base: 130 * ms, BaseN: 31, SlowStart: true, Grown: true, FastGrown: true, Round: 900, Use: 0.9}
	tab.states[[2]uint64{uint64(a.gaugeRegion[0]), fp}] = limit.EncodeGauge(watch)
	now := t0
	l := a.learnerFor(0, fp, now)
	if !l.g.WordAtOnce() || l.g.Round != 900 {
		t.Fatalf("the worker's copy %+v, want the watched round 900", l.g)
	}
	word := func() limit.Samples {
		buy := l.smp.Admit(now, ms)
		login := l.smp.Admit(now, ms)
		l.smp.DoneFast(login, 25*ms, 5*ms, true)
		ready := l.smp.Ready
		l.smp.DoneBase(buy, 150*ms, 150*ms, true, true)
		return ready
	}
	if got := word(); got.Fast != 1 || got.Queued != 1 || got.N != 0 {
		t.Errorf("a login 5x its base back before its window's buy: batch %+v, want its word at once", got)
	}
	next := watch
	next.SlowStart, next.Grown, next.FastGrown, next.Measure, next.Round = false, false, false, true, 950
	tab.states[[2]uint64{uint64(a.gaugeRegion[0]), fp}] = limit.EncodeGauge(next)
	l.smp.Ready = limit.Samples{Round: l.g.Round}
	now += int64(time.Second)
	a.syncGauge(l.key, l, now)
	if l.g.Round != 950 || l.g.WordAtOnce() {
		t.Fatalf("the worker's copy %+v, want round 950, not watched", l.g)
	}
	if got := word(); got.Fast != 0 {
		t.Errorf("the next round: batch %+v, want no word before the window completes", got)
	}
}
