package engine

// CircuitOpen reports whether the worker's circuit to the service is open.
func (e *Engine) CircuitOpen() bool { return e.link.Open() }
