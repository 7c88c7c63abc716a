package wasmtest

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

// TestQueueRateChargedForQueuedRequests: a request that a rate rule with a
// cost admitted and charged, then waited for a concurrency slot and went
// upstream, is counted by the rate rule as allowed and charged (its
// declared units), as one that did not wait.
func TestQueueRateChargedForQueuedRequests(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 1, `{"rules":[
		{"name":"rate","limit":100,"window":"1s","key":["path"],"cost":{"request_header":"x-units","max":10}},
		{"name":"store","algorithm":"concurrency","limit":1,"key":["path"],"max_delay":"2s"}]}`)
	a := openH(t, vms[0], "/buy", "10.0.0.1:1", [2]string{"x-units", "3"})
	b := openH(t, vms[0], "/buy", "10.0.0.2:1", [2]string{"x-units", "4"})
	wantState(t, "waiter", b, wasmhost.StreamPaused)
	h.AdvanceClock(10 * time.Millisecond)
	respond(t, a)
	h.AdvanceClock(10 * time.Millisecond)
	wantState(t, "waiter after the slot freed", b, wasmhost.StreamUpstream)
	respond(t, b)
	idle(t, h)
	m := h.Metrics()
	if got, charged := m.Counter("sluice.rule.rate.allowed"), m.Counter("sluice.rule.rate.charged"); got != 2 || charged != 7 {
		t.Errorf("rate: allowed %d, charged %d; want 2 and 7 (3 + 4 units, the second request after its wait)", got, charged)
	}
	healthy(t, vms...)
}
