// The circuit of a worker's calls to the rate-limit service.

package engine

import (
	"encoding/binary"
	"time"
)

// circuit stops waiting on the service while it keeps failing.
type circuit struct {
	failures  int
	openUntil int64
	probing   bool
	// failedAt is the moment of the last failure (see peerRecovered);
	// probeAt when the last probe was sent; answeredAt when the service
	// last answered this worker (or, told by another, its Envoy).
	failedAt, probeAt, answeredAt int64
}

// The back-off between probes doubles from circuitMinBackoff up to
// circuitMaxBackoff: once the service answers again, a worker decides by
// on_error at most that much longer (its next probe), and while the
// service is down each worker sends it at most 4 probes a second.
const (
	circuitMinBackoff = 100 * time.Millisecond
	circuitMaxBackoff = 250 * time.Millisecond
)

// recoveredKey is the shared-data key where a worker whose circuit closes
// writes when the service answered it (8 bytes, nanoseconds): the other
// workers of the Envoy whose circuits are open close theirs at their next
// tick, instead of each waiting for a probe of its own to get through. A
// failover of the service's Redis shows why: the service answers again
// for some calls while others still fail, and a worker whose probes kept
// meeting failures would otherwise decide by on_error long after its
// Envoy's other workers were told by the service again.
const recoveredKey = "sluice.v1.circuit.answered"

// probeDue says whether the tick should send a probe at now: once the
// back-off has passed, and while a probe is out only once it has waited
// circuitMaxBackoff (a probe stuck on a connection the service has not
// yet replaced must not keep the circuit open until its timeout; the
// first probe answered closes it).
func (c *circuit) probeDue(now int64) bool {
	if c.failures == 0 || now < c.openUntil || (c.probing && now-c.probeAt < int64(circuitMaxBackoff)) {
		return false
	}
	c.probing, c.probeAt = true, now
	return true
}

func (c *circuit) success() { c.failures, c.probing = 0, false }

// failed counts the failure, at now, of a call sent at sentAt. A call sent
// before the service last answered (one stuck on a connection the service
// has replaced since, failing at its timeout) does not open the circuit
// again: the service answers.
func (c *circuit) failed(sentAt, now int64) {
	if c.answeredAt > sentAt {
		return
	}
	c.failure(now)
}

func (c *circuit) failure(now int64) {
	c.failures++
	c.probing = false
	c.failedAt = now
	b := circuitMinBackoff << min(c.failures-1, 10)
	c.openUntil = now + int64(min(b, circuitMaxBackoff))
}

// CircuitOpen reports whether the worker's circuit to the service is open.
func (e *Engine) CircuitOpen() bool { return e.circuit.failures > 0 }

// answered closes the circuit after an answer of the service at now; a
// circuit that was open tells the Envoy's other workers (recoveredKey).
func (e *Engine) answered(now int64) {
	e.circuit.answeredAt = max(e.circuit.answeredAt, now)
	if e.circuit.failures == 0 {
		return
	}
	e.circuit.success()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(now))
	_, _ = e.table.store.Set(recoveredKey, b[:], 0) // lost: each worker still probes
}

// peerRecovered closes the circuit, on the tick, when another worker of
// the Envoy saw the service answer after this worker's last failure. When
// this worker failed after that answer, the service answers some calls
// and fails others (reconnecting): the next probe goes at the shortest
// back-off, not the one grown while the service was down.
func (e *Engine) peerRecovered(now int64) {
	c := &e.circuit
	if c.failures == 0 {
		return
	}
	v, _, found, err := e.table.store.Get(recoveredKey)
	if err != nil || !found || len(v) != 8 {
		return
	}
	at := int64(binary.LittleEndian.Uint64(v))
	switch {
	case at > c.failedAt:
		c.success()
		c.answeredAt = max(c.answeredAt, at)
	case now-at < int64(circuitMaxBackoff):
		c.openUntil = min(c.openUntil, c.failedAt+int64(circuitMinBackoff))
	}
}
