// The circuit of a worker's calls to the rate-limit service (kept by
// global.Link), shared with the Envoy's other workers when it closes.

package engine

import "encoding/binary"

// CircuitOpen reports whether the worker's circuit to the service is open.
func (e *Engine) CircuitOpen() bool { return e.link.Open() }

// recoveredKey is the shared-data key where a worker whose circuit closes
// writes when the service answered it (8 bytes, nanoseconds): the other
// workers of the Envoy whose circuits are open close theirs at their next
// tick, instead of each waiting for a probe of its own to get through. A
// failover of the service's Redis shows why: the service answers again
// for some calls while others still fail, and a worker whose probes kept
// meeting failures would otherwise decide by on_error long after its
// Envoy's other workers were told by the service again.
const recoveredKey = "sluice.v1.circuit.answered"

// answered is told that the service answered at now, after the circuit
// was open (wasOpen): it tells the Envoy's other workers (recoveredKey).
func (e *Engine) answered(wasOpen bool, now int64) {
	if !wasOpen {
		return
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(now))
	_, _ = e.table.store.Set(recoveredKey, b[:], 0) // lost: each worker still probes
}

// peerRecovered tells an open circuit, on the tick, when another worker of
// the Envoy last had an answer of the service (global.Link.PeerAnswered).
func (e *Engine) peerRecovered(now int64) {
	if !e.link.Open() {
		return
	}
	v, _, found, err := e.table.store.Get(recoveredKey)
	if err != nil || !found || len(v) != 8 {
		return
	}
	e.link.PeerAnswered(int64(binary.LittleEndian.Uint64(v)), now)
}
