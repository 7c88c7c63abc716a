package engine

import (
	"testing"
	"time"
)

// Three requests of one client, the last two held behind the first by a
// token bucket of 1/s, burst 1 (released at 1 s and 2 s), or queued by a
// leaky bucket of 1/s; the one held until 1 s leaves. The request that
// comes next must not be released together with the one held until 2 s:
// the bucket lets one request through per second, never two at once.
func TestUnholdMiddleHeldRequest(t *testing.T) {
	for alg, burst := range map[string]string{"token_bucket": `,"burst":1`, "leaky_bucket": `,"burst":3`, "fixed_window": ""} {
		cfg := mustConfig(t, `{"rules":[{"name":"r","algorithm":"`+alg+`","limit":1,"window":"1s"`+burst+`,"max_delay":"10s"}]}`)
		e := New(cfg, newMemStore(), 1, wallClock)
		rq := func() Request { return req("/", "GET", "10.0.0.1:1") }
		release := func(at int64, v Verdict) int64 { return at + int64(v.Delay) }
		v1 := e.Decide(rq(), t0)
		v2 := e.Decide(rq(), t0)
		v3 := e.Decide(rq(), t0)
		if v1.Outcome != Allow || v2.Outcome != Delay || v3.Outcome != Delay {
			t.Fatalf("%s: %v %v %v", alg, v1.Outcome, v2.Outcome, v3.Outcome)
		}
		r3 := release(t0, v3)
		at := t0 + int64(500*time.Millisecond)
		e.Unhold(&v2, at) // its client left before its release
		at += int64(100 * time.Millisecond)
		v4 := e.Decide(rq(), at)
		if v4.Outcome == Reject {
			continue
		}
		if r4 := release(at, v4); r4 > r3-int64(time.Second) && r4 < r3+int64(time.Second) {
			t.Errorf("%s: the request after the one that left is released %v from the one held until %v: two within a second at 1/s",
				alg, time.Duration(r4-r3), time.Duration(r3-t0))
		}
	}
}

// When the requests held behind the one that left leave too, in either
// order, every reservation is given back: the next request is released
// where the first of them would have been.
func TestUnholdWholeLineInAnyOrder(t *testing.T) {
	for alg, burst := range map[string]string{"token_bucket": `,"burst":1`, "leaky_bucket": `,"burst":3`, "fixed_window": ""} {
		for _, firstFirst := range []bool{true, false} {
			cfg := mustConfig(t, `{"rules":[{"name":"r","algorithm":"`+alg+`","limit":1,"window":"1s"`+burst+`,"max_delay":"10s"}]}`)
			e := New(cfg, newMemStore(), 1, wallClock)
			rq := func() Request { return req("/", "GET", "10.0.0.1:1") }
			e.Decide(rq(), t0)
			v2, v3 := e.Decide(rq(), t0), e.Decide(rq(), t0)
			at := t0 + int64(500*time.Millisecond)
			if firstFirst {
				e.Unhold(&v2, at)
				e.Unhold(&v3, at)
			} else {
				e.Unhold(&v3, at)
				e.Unhold(&v2, at)
			}
			v4 := e.Decide(rq(), at)
			if got := time.Duration(at + int64(v4.Delay) - t0); v4.Outcome != Delay || got != time.Second {
				t.Errorf("%s, first to leave first %v: next request %v released at %v, want held until 1s", alg, firstFirst, v4.Outcome, got)
			}
		}
	}
}
