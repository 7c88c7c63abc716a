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
// open, its back-off has passed and no probe is out).
func (l *Link) ProbeDue(now int64) bool { return l.circuit.probeDue(now) }

// Failed counts a failure of the service at now: the circuit opens, or its
// back-off doubles.
func (l *Link) Failed(now int64) { l.circuit.failure(now) }

// Succeeded closes the circuit: the service answered.
func (l *Link) Succeeded() { l.circuit.success() }

// Answered closes the circuit and measures the round trip of a call sent
// at sentAt and answered at now.
func (l *Link) Answered(sentAt, now int64) {
	l.circuit.success()
	if d := now - sentAt; d > 0 {
		if l.rtt == 0 {
			l.rtt = d
		}
		l.rtt += (d - l.rtt) / 8
	}
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
	failures  int
	openUntil int64
	probing   bool
}

// The circuit's back-off before a probe: it doubles with each failure
// from CircuitMinBackoff up to CircuitMaxBackoff.
const (
	CircuitMinBackoff = 100 * time.Millisecond
	CircuitMaxBackoff = 500 * time.Millisecond
)

// probeDue says whether the tick should send a probe at now.
func (c *circuit) probeDue(now int64) bool {
	if c.failures == 0 || c.probing || now < c.openUntil {
		return false
	}
	c.probing = true
	return true
}

func (c *circuit) success() { c.failures, c.probing = 0, false }

func (c *circuit) failure(now int64) {
	c.failures++
	c.probing = false
	b := CircuitMinBackoff << min(c.failures-1, 10)
	c.openUntil = now + int64(min(b, CircuitMaxBackoff))
}
