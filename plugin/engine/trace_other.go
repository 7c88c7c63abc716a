//go:build !wasip1

package engine

// trace tells the tracer step s of rule (-1: none); without a tracer it
// costs a nil check.
func (e *Engine) trace(s Step, rule int) {
	if e.tracer != nil {
		e.tracer.Step(s, rule)
	}
}

// traceMatched tells the tracer the rules that matched the request.
func (e *Engine) traceMatched() {
	if e.tracer != nil {
		for _, i := range e.matcher.Matched() {
			e.tracer.Step(StepMatch, i)
		}
	}
}
