// The circuit of a worker's calls to the rate-limit service.

package engine

import (
	"time"
)

// circuit stops waiting on the service while it keeps failing.
type circuit struct {
	failures  int
	openUntil int64
	probing   bool
}

const (
	circuitMinBackoff = 100 * time.Millisecond
	circuitMaxBackoff = 500 * time.Millisecond
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
	b := circuitMinBackoff << min(c.failures-1, 10)
	c.openUntil = now + int64(min(b, circuitMaxBackoff))
}

// CircuitOpen reports whether the worker's circuit to the service is open.
func (e *Engine) CircuitOpen() bool { return e.circuit.failures > 0 }
