package main

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/plugin/engine"
)

// TestLogLimits: one rejection line a second, with the count since the
// last line; one call-error line a second.
func TestLogLimits(t *testing.T) {
	var l logLimits
	s := int64(time.Second)
	if n, due := l.rejection(10*s, true); !due || n != 1 {
		t.Fatalf("first rejection: %d, %v; want a line counting 1", n, due)
	}
	l.rejection(10*s+1, true)
	l.rejection(10*s+2, false) // no rule to report: counted, no line
	if _, due := l.rejection(11*s-1, true); due {
		t.Fatal("a second line within the second")
	}
	if n, due := l.rejection(11*s, true); !due || n != 4 {
		t.Fatalf("a second later: %d, %v; want a line counting 4", n, due)
	}
	if !l.callError(10*s) || l.callError(11*s-1) || !l.callError(11*s) {
		t.Fatal("call errors: want a line at 10s and 11s only")
	}
}

// TestTickerFlush: the counters are published once a second.
func TestTickerFlush(t *testing.T) {
	tk := newTicker(20)
	if tk.period() != 20*time.Millisecond || tk.periodMS() != 20 {
		t.Fatalf("period %v", tk.period())
	}
	s := int64(time.Second)
	if !tk.flushDue(5*s) || tk.flushDue(6*s-1) || !tk.flushDue(6*s) {
		t.Fatal("want a flush at 5s and 6s only")
	}
}

// TestWaitingStreams: a waiting stream is taken once; a dropped one is gone.
func TestWaitingStreams(t *testing.T) {
	var w waitingStreams
	if w.enabled() || w.any() {
		t.Fatal("a new queue is off and empty")
	}
	w.enable()
	a, b := &httpContext{id: 1}, &httpContext{id: 2}
	w.add(a)
	w.add(b)
	if !w.enabled() || !w.any() {
		t.Fatal("want enabled with streams")
	}
	if w.take(1) != a || w.take(1) != nil {
		t.Fatal("take: want stream 1 once")
	}
	w.drop(2)
	if w.any() || w.take(2) != nil {
		t.Fatal("drop: want stream 2 gone")
	}
}

// TestRejectKeySays: a kept key says a verdict's rejection exactly when
// the verdict's own key is the same, field by field.
func TestRejectKeySays(t *testing.T) {
	r1, r2 := &config.Rule{Name: "a"}, &config.Rule{Name: "b"}
	rnd := rand.New(rand.NewPCG(7, 8))
	pick := func() *engine.Verdict {
		v := &engine.Verdict{Outcome: engine.Outcome(rnd.IntN(2)) * engine.Reject, Remaining: rnd.Int64N(3) - 1,
			ReportLimit: rnd.Int64N(2), Reset: time.Duration(rnd.Int64N(3)) * 700 * time.Millisecond,
			RetryAfter: time.Duration(rnd.Int64N(3)) * 600 * time.Millisecond, ShadowRetryAfter: time.Duration(rnd.Int64N(2)) * time.Second}
		if rnd.IntN(2) == 0 {
			v.Report = r1
		} else {
			v.Report = r2
		}
		if rnd.IntN(3) == 0 {
			v.Shadow = r1
		}
		return v
	}
	for range 20000 {
		a, b := pick(), pick()
		ka, kb := rejectKeyOf(a), rejectKeyOf(b)
		same := ka.sameHeaders(&kb) && ka.rejected == kb.rejected && b.ViolatedAs(&ka.violated)
		if got := ka.says(b); got != same {
			t.Fatalf("key of %+v says %+v: %v, keys equal: %v", a, b, got, same)
		}
		if !ka.says(a) {
			t.Fatalf("key of %+v does not say it", a)
		}
	}
}
