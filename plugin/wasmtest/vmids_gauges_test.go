package wasmtest

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

// TestTwoVMIDsShareGauges: two Sluice filters with their own vm_id in one
// Envoy (two hosts here, with one clock and one metrics store, as Envoy
// keeps one stat per name whatever VM defines it). Their workers publish
// into the same process-wide gauges from records of their own (shared
// data is namespaced by vm_id), so each gauge must be the sum over both:
// neither filter's workers may overwrite the other's counts with their
// own sum, and taking out a vanished worker's counts takes out only those.
func TestTwoVMIDsShareGauges(t *testing.T) {
	clock := wasmhost.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	metrics := wasmhost.NewMetrics()
	shared := wasmhost.NewSharedData()
	cfg := `{"rules":[{"name":"store","algorithm":"concurrency","limit":1,"key":["path"],"max_delay":"60s"}]}`
	busy := newHost(t, wasmhost.WithClock(clock), wasmhost.WithMetrics(metrics), wasmhost.WithSharedData(shared), wasmhost.WithVMID("busy"))
	idle := newHost(t, wasmhost.WithClock(clock), wasmhost.WithMetrics(metrics), wasmhost.WithSharedData(shared), wasmhost.WithVMID("idle"))
	bvms := workers(t, busy, 2, cfg)
	ivms := workers(t, idle, 2, cfg)
	held := open(t, bvms[0], "/a", "10.0.0.1:1")
	waiter := open(t, bvms[0], "/a", "10.0.0.1:2")
	dying := open(t, bvms[1], "/b", "10.0.0.1:3")
	wantState(t, "held", held, wasmhost.StreamUpstream)
	wantState(t, "waiter", waiter, wasmhost.StreamPaused)
	wantState(t, "dying", dying, wasmhost.StreamUpstream)
	wantState(t, "other", open(t, ivms[1], "/a", "10.0.0.1:4"), wasmhost.StreamUpstream)
	// advance moves both hosts' VMs through d in steps of 100 ms, their
	// ticks interleaved, and checks the gauges after each step from check on.
	step := func(d time.Duration, check func(at time.Duration)) {
		for at := time.Duration(0); at < d; at += 100 * time.Millisecond {
			if err := busy.AdvanceClock(100 * time.Millisecond); err != nil {
				t.Fatal(err)
			}
			if err := idle.AdvanceClock(0); err != nil {
				t.Fatal(err)
			}
			check(at)
		}
	}
	want := func(what string, slots, waiting uint64) func(time.Duration) {
		return func(at time.Duration) {
			if at < 1100*time.Millisecond {
				return // not every worker has published yet
			}
			s, w := metrics.Gauge("sluice.concurrency.slots_held"), metrics.Gauge("sluice.concurrency.waiting")
			if s != slots || w != waiting {
				t.Fatalf("%s, %v in: slots_held %d, waiting %d; want %d and %d", what, at, s, w, slots, waiting)
			}
		}
	}
	step(3*time.Second, want("two slots held and a waiter on one vm_id, a slot on the other", 3, 1))
	if err := bvms[1].Kill(); err != nil {
		t.Fatal(err)
	}
	step(15*time.Second, func(time.Duration) {})
	step(2*time.Second, want("a worker holding a slot vanished 15 s ago", 2, 1))
}
