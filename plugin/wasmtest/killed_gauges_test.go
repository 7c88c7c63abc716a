package wasmtest

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

// TestKilledWorkerLeavesNoGauges: the process-wide gauges slots_held and
// waiting are the sum of what each worker holds. A worker whose VM fails
// (killed, never retired) holding a slot and a waiter is taken out of the
// sums once it has not published for a while (10 s), while a live
// worker's slot stays counted.
func TestKilledWorkerLeavesNoGauges(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, `{"rules":[{"name":"store","algorithm":"concurrency","limit":1,"key":["path"],"max_delay":"60s"}]}`)
	held := open(t, vms[1], "/dead", "10.0.0.1:1")
	waiter := open(t, vms[1], "/dead", "10.0.0.1:2")
	live := open(t, vms[0], "/live", "10.0.0.1:3")
	wantState(t, "held", held, wasmhost.StreamUpstream)
	wantState(t, "waiter", waiter, wasmhost.StreamPaused)
	wantState(t, "live", live, wasmhost.StreamUpstream)
	h.AdvanceClock(1100 * time.Millisecond) // every worker publishes
	gauges := func() (uint64, uint64) {
		m := h.Metrics()
		return m.Gauge("sluice.concurrency.slots_held"), m.Gauge("sluice.concurrency.waiting")
	}
	if s, w := gauges(); s != 2 || w != 1 {
		t.Fatalf("before the kill: slots_held %d, waiting %d; want 2 and 1", s, w)
	}
	if err := vms[1].Kill(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 15; i++ {
		h.AdvanceClock(time.Second)
	}
	if s, w := gauges(); s != 1 || w != 0 {
		t.Errorf("15 s after a worker holding a slot and a waiter was killed: slots_held %d, waiting %d; want 1 (the live worker's) and 0", s, w)
	}
	respond(t, live)
	h.AdvanceClock(1100 * time.Millisecond)
	if s, w := gauges(); s != 0 || w != 0 {
		t.Errorf("after the live request: slots_held %d, waiting %d; want 0 and 0", s, w)
	}
	healthy(t, vms[0])
}
