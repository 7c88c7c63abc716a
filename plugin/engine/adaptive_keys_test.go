package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/shared/limit"
)

// keyedRound admits up to 64 requests of client ip at now, answers them after
// latency and lets the tick run: one learning round of that key.
func keyedRound(e *Engine, ip string, now int64, latency time.Duration) int {
	var held [][]SlotRef
	for i := 0; i < 64; i++ {
		v := e.Decide(req("/buy", "POST", ip), now)
		if v.Outcome != Allow {
			break
		}
		held = append(held, v.Slots)
	}
	end := now + int64(latency)
	for _, s := range held {
		e.Sample(s, now, end, SampleResponse)
		e.Release(s, end)
	}
	e.Learn(end + int64(LearnEvery))
	return len(held)
}

// TestKeyedRetryAfterUsesOwnKeysLimit: with a keyed adaptive rule each
// key has its own learnt limit ("the limit is learnt per key"); a refused
// request's Retry-After is "whole seconds until this client would be
// admitted" (docs/configuration.md), i.e. for a concurrency rule the slots of *its*
// key freeing: (waiting+1) × hold / limit of that key. It must not depend on
// which other client's Gauge this worker exchanged last.
func TestKeyedRetryAfterUsesOwnKeysLimit(t *testing.T) {
	e := New(mustConfig(t, `{"rules":[{"name":"a","algorithm":"adaptive_concurrency","key":["client_ip"]}]}`), newMemStore(), 1, wallClock)
	now := t0
	// Client A: fast upstream answers, its limit grows well above 4.
	for i := 0; i < 40; i++ {
		now += int64(50 * time.Millisecond)
		keyedRound(e, "10.0.0.1:1", now, 10*time.Millisecond)
	}
	now += int64(time.Second)
	// Client B: cold, limit 4; four in flight.
	var bHeld [][]SlotRef
	for i := 0; i < 4; i++ {
		v := e.Decide(req("/buy", "POST", "10.0.0.2:1"), now)
		if v.Outcome != Allow {
			t.Fatalf("B request %d: %v", i, v.Outcome)
		}
		bHeld = append(bHeld, v.Slots)
	}
	// Meanwhile one of A's requests is answered (its worker exchanges A's Gauge).
	now += int64(20 * time.Millisecond)
	v := e.Decide(req("/buy", "POST", "10.0.0.1:1"), now)
	e.Sample(v.Slots, now, now+int64(10*time.Millisecond), SampleResponse)
	e.Release(v.Slots, now+int64(10*time.Millisecond))
	now += int64(10 * time.Millisecond)
	limA := learnt(e, 0, v.Slots[0].FP).Gauge.Current()
	limB := learnt(e, 0, bHeld[0][0].FP).Gauge.Current()
	// B's fifth request is refused: its Retry-After.
	r := e.Decide(req("/buy", "POST", "10.0.0.2:1"), now)
	if r.Outcome != Reject {
		t.Fatalf("B's fifth request: %v", r.Outcome)
	}
	hold := e.HoldEstimate(0)
	want := hold / time.Duration(limB)
	t.Logf("limit A %d, limit B %d, hold %v: Retry-After %v, want about %v (X-RateLimit-Limit %d)", limA, limB, hold, r.RetryAfter, want, r.ReportLimit)
	if limA <= limB {
		t.Fatalf("the setup did not hold: A learnt %d, not more than B's %d", limA, limB)
	}
	if r.RetryAfter < want*9/10 {
		t.Errorf("B refused at its limit %d: RetryAfter %v = hold/%d (A's limit), want hold/%d = %v", limB, r.RetryAfter, hold/r.RetryAfter, limB, want)
	}
	for _, s := range bHeld {
		e.Release(s, now)
	}
}

// TestKeyedQueueBoundUsesOwnKeysLimit: the queue of a keyed adaptive
// rule with max_delay may hold as many tickets as can start within
// max_delay at that key's limit (queueBound). With client A at a large
// learnt limit, client B (limit 4) must not queue more than
// max_delay × 4 / hold.
func TestKeyedQueueBoundUsesOwnKeysLimit(t *testing.T) {
	e := New(mustConfig(t, `{"rules":[{"name":"a","algorithm":"adaptive_concurrency","key":["client_ip"],"max_delay":"100ms"}]}`), newMemStore(), 1, wallClock)
	now := t0
	for i := 0; i < 40; i++ {
		now += int64(50 * time.Millisecond)
		keyedRound(e, "10.0.0.1:1", now, 10*time.Millisecond)
	}
	now += int64(time.Second)
	for i := 0; i < 4; i++ {
		if v := e.Decide(req("/buy", "POST", "10.0.0.2:1"), now); v.Outcome != Allow {
			t.Fatalf("B request %d: %v", i, v.Outcome)
		}
	}
	now += int64(20 * time.Millisecond)
	v := e.Decide(req("/buy", "POST", "10.0.0.1:1"), now)
	e.Sample(v.Slots, now, now+int64(10*time.Millisecond), SampleResponse)
	e.Release(v.Slots, now+int64(10*time.Millisecond))
	now += int64(10 * time.Millisecond)
	limA := learnt(e, 0, v.Slots[0].FP).Gauge.Current()
	hold := e.HoldEstimate(0)
	bound := int64(100*time.Millisecond) * 4 / int64(hold)
	queued := 0
	for i := 0; i < 2000; i++ {
		w := e.Decide(req("/buy", "POST", "10.0.0.2:1"), now)
		if w.Outcome != Queue {
			break
		}
		queued++
	}
	t.Logf("limit A %d, hold %v: B queued %d, bound at B's limit 4: %d", limA, hold, queued, bound)
	if int64(queued) > bound+1 {
		t.Errorf("B (limit 4) queued %d, more than can start within max_delay at its limit (%d): the bound used another key's limit", queued, bound)
	}
}

// TestManyKeysStillLearn: a keyed adaptive rule ("["client_ip"]: one
// per client") with more clients in flight on one worker than MaxLearners.
// Each client sends 30 requests of 100 ms one after another; the first round
// of a cold key needs 4 samples, so every key has a Base afterwards: a
// worker keeps the view of a key with a request in flight.
func TestManyKeysStillLearn(t *testing.T) {
	for _, clients := range []int{3000, 5000} {
		t.Run(fmt.Sprint(clients), func(t *testing.T) {
			store := newMemStore()
			cfg := mustConfig(t, `{"rules":[{"name":"a","algorithm":"adaptive_concurrency","key":["client_ip"]}]}`)
			e := New(cfg, store, 1, wallClock)
			type inflight struct {
				slots []SlotRef
				sent  int64
				done  int64
			}
			lat := int64(100 * time.Millisecond)
			fps := make([]uint64, clients)
			cur := make([]*inflight, clients)
			ip := func(i int) string { return fmt.Sprintf("10.%d.%d.1:1", i/250, i%250) }
			now := t0
			start := func(i int) {
				v := e.Decide(req("/buy", "POST", ip(i)), now)
				if v.Outcome != Allow || len(v.Slots) != 1 {
					t.Fatalf("client %d: %v", i, v.Outcome)
				}
				fps[i] = v.Slots[0].FP
				cur[i] = &inflight{slots: v.Slots, sent: now, done: now + lat}
			}
			next := 0
			step := int64(100 * time.Microsecond)
			maxLearners := 0
			for now = t0; now < t0+int64(3*time.Second); now += step {
				// Staggered start: all clients within the first 100 ms.
				for next < clients && int64(next)*lat/int64(clients) <= now-t0 {
					start(next)
					next++
				}
				for i := 0; i < next; i++ {
					if f := cur[i]; f != nil && f.done <= now {
						e.Sample(f.slots, f.sent, now, SampleResponse)
						e.Release(f.slots, now)
						start(i)
					}
				}
				if (now-t0)%int64(5*time.Millisecond) == 0 {
					e.Learn(now)
				}
				maxLearners = max(maxLearners, e.flight.Views())
			}
			// Another worker reads each key's shared Gauge.
			o := New(cfg, store, 1, wallClock)
			cold := 0
			for i := 0; i < clients; i++ {
				if g := o.flight.Read(0, fps[i], now); g.Base == 0 {
					cold++
				}
			}
			t.Logf("%d clients: %d keys never learnt a latency; learner copies at most %d", clients, cold, maxLearners)
			if cold > 0 {
				t.Errorf("%d clients × 30 requests of 100 ms: %d of %d keys never learnt (Base 0)", clients, cold, clients)
			}
			// Copies beyond MaxLearners only for keys with a request in
			// flight (here every client always has one).
			if maxLearners > max(MaxLearners, clients) {
				t.Errorf("learner copies grew to %d (MaxLearners %d, %d keys in flight)", maxLearners, MaxLearners, clients)
			}
		})
	}
}

var _ = limit.MaxLatency
