// Package global holds the parts of the engine's global rules (one budget
// across a fleet of Envoys, kept by a rate-limit service) that own their
// state: the engine reaches it only through their methods, and they know
// nothing of the engine's requests and verdicts.
package global

import (
	"time"

	"github.com/sluicehq/sluice/plugin/internal/rls"
)

// Caller sends one call to the rate-limit service: a gRPC ShouldRateLimit
// request (framed body) to cluster, answered through done within timeout.
// The plugin implements it with DispatchHttpCall; done runs on the same
// worker, later (never inside Call). An error means the call was not sent.
type Caller interface {
	Call(cluster string, body []byte, timeout time.Duration, done func(rls.Response, error)) error
}

// DetachedCaller is a Caller that can send a call no request waits for
// (a charge) so that the end of the current stream does not cancel it.
type DetachedCaller interface {
	CallDetached(cluster string, body []byte, timeout time.Duration, done func(rls.Response, error)) error
}

// InitialRTT is assumed until calls are measured.
const InitialRTT = 5 * time.Millisecond

// Link is a worker's line to the rate-limit service: the caller that sends
// its calls, the circuit that stops waiting on the service while it keeps
// failing, the measured round trip (which sets how early a lease is
// refilled), and the buffer calls are framed in (reused: a call allocates
// no frame).
type Link struct {
	caller  Caller
	circuit circuit
	// rtt is a moving average of how long the service takes to answer
	// (ns); 0 until an answer is measured.
	rtt int64
	buf []byte
}

// SetCaller gives the link the caller of the service.
func (l *Link) SetCaller(c Caller) { l.caller = c }

// Ready reports whether the link has a caller (the plugin has global
// rules).
func (l *Link) Ready() bool { return l.caller != nil }

// Open reports whether the circuit is open: the last call failed and no
// probe has been answered since.
func (l *Link) Open() bool { return l.circuit.failures > 0 }

// ProbeDue says whether the tick should send a probe at now (the circuit is
// open, its back-off has passed, and no probe is out or the one out has
// waited CircuitMaxBackoff).
func (l *Link) ProbeDue(now int64) bool { return l.circuit.probeDue(now) }

// Failed counts a failure of the service at now: the circuit opens, or its
// back-off doubles.
func (l *Link) Failed(now int64) { l.circuit.failure(now) }

// FailedCall counts the failure, at now, of a call sent at sentAt. A call
// sent before the service last answered (one stuck on a connection the
// service has replaced since, failing at its timeout) does not open the
// circuit again: the service answers.
//
// While closed, a single failure within toleranceWindow of an answer does
// not open it either: a service that answers most calls and fails some
// (reconnecting to Redis after a failover, one stale connection of its
// pool at a time) decides more requests than a circuit that opens at each
// of its failures and leaves every request to on_error until a probe. The
// next failure before an answer opens it: a service that went down fails
// the calls that follow as well.
func (l *Link) FailedCall(sentAt, now int64) {
	c := &l.circuit
	if c.answeredAt > sentAt {
		return
	}
	if c.failures == 0 && !c.tolerated && c.answeredAt > 0 && now-c.answeredAt < int64(toleranceWindow) {
		c.tolerated = true
		return
	}
	c.failure(now)
}

// toleranceWindow: how recent an answer lets one failure pass (see
// FailedCall).
const toleranceWindow = time.Second

// Succeeded closes the circuit: the service answered at now. It reports
// whether the circuit was open (the engine then tells the Envoy's other
// workers).
func (l *Link) Succeeded(now int64) bool {
	was := l.Open()
	l.circuit.answeredAt = max(l.circuit.answeredAt, now)
	l.circuit.success()
	return was
}

// PeerAnswered is told that another worker of the Envoy had an answer of
// the service at at (now is the tick): the circuit closes if it opened
// before that answer. When this worker failed after it, the service
// answers some calls and fails others (it reconnects): the next probe
// goes at the shortest back-off, not the one grown while it was down.
func (l *Link) PeerAnswered(at, now int64) {
	c := &l.circuit
	switch {
	case c.failures == 0:
	case at > c.failedAt:
		c.success()
		c.answeredAt = max(c.answeredAt, at)
	case now-at < int64(CircuitMaxBackoff):
		c.openUntil = min(c.openUntil, c.failedAt+int64(CircuitMinBackoff))
	}
}

// Answered closes the circuit and measures the round trip of a call sent
// at sentAt and answered at now. It reports whether the circuit was open.
func (l *Link) Answered(sentAt, now int64) bool {
	was := l.Succeeded(now)
	if d := now - sentAt; d > 0 {
		if l.rtt == 0 {
			l.rtt = d
		}
		l.rtt += (d - l.rtt) / 8
	}
	return was
}

// RTT is the service's measured round trip, InitialRTT before any.
func (l *Link) RTT() time.Duration {
	if l.rtt == 0 {
		return InitialRTT
	}
	return time.Duration(l.rtt)
}

// Send frames req and sends it to cluster, to be answered through done
// within timeout; detached sends it, when the caller can, so that the end
// of the current stream does not cancel it (no request waits for it). An
// error means the call was not sent.
func (l *Link) Send(cluster string, req *rls.Request, timeout time.Duration, detached bool, done func(rls.Response, error)) error {
	l.buf = rls.AppendFrame(l.buf[:0], req)
	if detached {
		if dc, ok := l.caller.(DetachedCaller); ok {
			return dc.CallDetached(cluster, l.buf, timeout, done)
		}
	}
	return l.caller.Call(cluster, l.buf, timeout, done)
}

// circuit stops waiting on the service while it keeps failing.
type circuit struct {
	_         [0]func() // not comparable: no equality function in the module
	failures  int
	openUntil int64
	probing   bool
	// failedAt is the moment of the last failure (PeerAnswered); probeAt
	// when the last probe was sent; answeredAt when the service last
	// answered this worker (or, told by another, its Envoy).
	failedAt, probeAt, answeredAt int64
	// tolerated: one failure since the last answer left the circuit
	// closed (FailedCall).
	tolerated bool
}

// The circuit's back-off before a probe: it doubles with each failure
// from CircuitMinBackoff up to CircuitMaxBackoff. Once the service answers
// again a worker decides by on_error at most about CircuitMaxBackoff
// longer (its next probe); while the service is down each worker sends it
// at most 4 probes a second.
const (
	CircuitMinBackoff = 100 * time.Millisecond
	CircuitMaxBackoff = 250 * time.Millisecond
)

// probeDue says whether the tick should send a probe at now: once the
// back-off has passed, and while a probe is out only once it has waited
// CircuitMaxBackoff (a probe stuck on a connection the service has not yet
// replaced must not keep the circuit open until its timeout; the first
// probe answered closes it).
func (c *circuit) probeDue(now int64) bool {
	if c.failures == 0 || now < c.openUntil || (c.probing && now-c.probeAt < int64(CircuitMaxBackoff)) {
		return false
	}
	c.probing, c.probeAt = true, now
	return true
}

func (c *circuit) success() { c.failures, c.probing, c.tolerated = 0, false, false }

func (c *circuit) failure(now int64) {
	c.failures++
	c.probing = false
	c.failedAt = now
	b := CircuitMinBackoff << min(c.failures-1, 10)
	c.openUntil = now + int64(min(b, CircuitMaxBackoff))
}
