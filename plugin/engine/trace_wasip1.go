//go:build wasip1

package engine

// The plugin's build has no tracer (trace.go): the steps compile to
// nothing.

func (e *Engine) trace(Step, int) {}

func (e *Engine) traceMatched() {}
