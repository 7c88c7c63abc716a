package engine

import (
	"testing"
	"time"
)

// A request delayed by a rate rule (1/s) that also waits in a concurrency
// rule's queue carries a reservation of the rate: B, held by the rate
// only, is held behind it. When the waiter leaves the queue (its client
// leaves before or after its release, or its max_delay passes), the next
// request C must not be released within a second of B: the rate lets one
// request through per second, never two at once (TestUnholdMiddleHeldRequest
// for a request held by the rate only).
func TestAbandonedWaiterDoesNotFreeAHeldTurn(t *testing.T) {
	leaves := []struct {
		name string
		at   time.Duration
		poll bool // by its max_delay (Poll), not its client (Abandon)
	}{{"client gone before release", 500 * time.Millisecond, false},
		{"client gone after release", 1500 * time.Millisecond, false},
		{"max_delay passed", 1500 * time.Millisecond, true}}
	for alg, burst := range heldAlgorithms {
		for _, l := range leaves {
			t.Run(alg+"/"+l.name, func(t *testing.T) {
				got := waiterLeaves(t, alg, burst, l.at, l.poll)
				t.Logf("released at %v", got)
				if n := mostInOneSecond(got); n > 1 {
					t.Errorf("%d requests released within one second at 1/s (releases %v)", n, got)
				}
			})
		}
	}
}

// waiterLeaves runs the scenario of TestAbandonedWaiterDoesNotFreeAHeldTurn:
// a request takes the one slot of /slow, A (/slow) is delayed and queued,
// B (/fast) held behind A, A leaves at at, C (/fast) comes 100 ms later.
// It returns when each forwarded request is released, from t0.
func waiterLeaves(t *testing.T, alg, burst string, at time.Duration, poll bool) []time.Duration {
	cfg := mustConfig(t, `{"rules":[
		{"name":"r","key":["client_ip"],"algorithm":"`+alg+`","limit":1,"window":"1s"`+burst+`,"max_delay":"10s"},
		{"name":"slot","match":{"path_prefix":"/slow"},"algorithm":"concurrency","limit":1,"key":["path"],"max_delay":"1500ms"}]}`)
	e := New(cfg, newMemStore(), 1, wallClock)
	rq := func(path string, id uint32) streamReq { return streamReq{req(path, "GET", "10.0.0.1:1"), id} }
	v0 := e.Decide(rq("/slow", 1), t0)
	vA := e.Decide(rq("/slow", 2), t0)
	vB := e.Decide(rq("/fast", 3), t0)
	if v0.Outcome != Allow || vA.Outcome != Queue || vA.Delay == 0 || vB.Outcome != Delay {
		t.Fatalf("setup: %v, %v (delay %v), %v", v0.Outcome, vA.Outcome, vA.Delay, vB.Outcome)
	}
	now := t0 + int64(at)
	if poll {
		if ev := e.Poll(now, nil); len(ev) != 1 || ev[0].ID != 2 || ev[0].Verdict.Outcome != Reject {
			t.Fatalf("setup: A not timed out at %v: %+v", at, ev)
		}
	} else {
		e.Abandon(2, now)
	}
	now += int64(100 * time.Millisecond)
	vC := e.Decide(rq("/fast", 4), now)
	out := []time.Duration{0, vB.Delay}
	if vC.Outcome != Reject {
		out = append(out, time.Duration(now-t0)+vC.Delay)
	}
	return out
}

// heldAlgorithms are the rate algorithms that hold requests (max_delay),
// with the burst fields that make each let one request through per second.
var heldAlgorithms = map[string]string{"token_bucket": `,"burst":1`, "leaky_bucket": `,"burst":3`, "fixed_window": ""}

// mostInOneSecond returns the most releases in any second [r, r+1s).
func mostInOneSecond(releases []time.Duration) int {
	most := 0
	for _, r := range releases {
		n := 0
		for _, o := range releases {
			if o >= r && o < r+time.Second {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

// A waiter's reservation still comes back when nothing is held behind it,
// or once what was held behind it is given back too (in either order): the
// next request is released at the turn the waiter had (1 s), not behind it.
func TestAbandonedWaiterGivesItsTurnBack(t *testing.T) {
	for alg, burst := range heldAlgorithms {
		for _, line := range []string{"none behind", "waiter first", "held first"} {
			cfg := mustConfig(t, `{"rules":[
				{"name":"r","key":["client_ip"],"algorithm":"`+alg+`","limit":1,"window":"1s"`+burst+`,"max_delay":"10s"},
				{"name":"slot","match":{"path_prefix":"/slow"},"algorithm":"concurrency","limit":1,"key":["path"],"max_delay":"10s"}]}`)
			e := New(cfg, newMemStore(), 1, wallClock)
			rq := func(path string, id uint32) streamReq { return streamReq{req(path, "GET", "10.0.0.1:1"), id} }
			e.Decide(rq("/slow", 1), t0)
			if vA := e.Decide(rq("/slow", 2), t0); vA.Outcome != Queue {
				t.Fatalf("%s: A %v, want queued", alg, vA.Outcome)
			}
			now := t0 + int64(500*time.Millisecond)
			switch line {
			case "none behind":
				e.Abandon(2, now)
			case "waiter first":
				vB := e.Decide(rq("/fast", 3), t0)
				e.Abandon(2, now)
				e.Unhold(&vB, now)
			case "held first":
				vB := e.Decide(rq("/fast", 3), t0)
				e.Unhold(&vB, now)
				e.Abandon(2, now)
			}
			vC := e.Decide(rq("/fast", 4), now)
			if got := time.Duration(now + int64(vC.Delay) - t0); vC.Outcome != Delay || got != time.Second {
				t.Errorf("%s, %s: next request %v released at %v, want held until 1s", alg, line, vC.Outcome, got)
			}
		}
	}
}
