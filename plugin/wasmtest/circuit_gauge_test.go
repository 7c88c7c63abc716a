package wasmtest

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

// TestCircuitGaugeClearedByLocalWorker: sluice.global.circuit_open counts
// the workers whose circuit to the service is open. When such a worker
// vanishes (its VM failed), whichever worker publishes next takes its
// counts out of the record of workers, also one of a configuration
// without global rules sharing the vm_id (a second filter, or the
// configuration an update brings): that worker must take the open circuit
// out of the gauge too, or it reads 1 until Envoy restarts.
func TestCircuitGaugeClearedByLocalWorker(t *testing.T) {
	h := newHost(t, wasmhost.WithClusters("ratelimit"))
	global := workers(t, h, 1, globalOnlyConfig)[0]
	local := workers(t, h, 1, `{"rules":[{"name":"l","limit":100,"window":"1m"}]}`)[0]
	s, err := global.NewStream(wasmhost.Properties{"source.address": "10.0.0.1:4000"})
	if err != nil {
		t.Fatal(err)
	}
	r := wasmhost.HTTPRequest("GET", "api.example", "/v1", [2]string{"x-client", "x"})
	if _, err := s.SendRequestHeaders(r.Headers, true); err != nil {
		t.Fatal(err)
	}
	if err := global.RespondHTTPCall(onlyCall(t, global).Token, nil); err != nil { // the call fails: the circuit opens
		t.Fatal(err)
	}
	h.AdvanceClock(1100 * time.Millisecond) // every worker publishes
	if g := h.Metrics().Gauge("sluice.global.circuit_open"); g != 1 {
		t.Fatalf("a worker's call failed: circuit_open %d, want 1", g)
	}
	if err := global.Kill(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 15; i++ {
		h.AdvanceClock(time.Second)
	}
	if g := h.Metrics().Gauge("sluice.global.circuit_open"); g != 0 {
		t.Errorf("15 s after the worker whose circuit was open vanished, with a worker without global rules left: circuit_open %d, want 0", int64(g))
	}
	healthy(t, local)
}
