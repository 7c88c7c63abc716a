package engine

// Step is a point of one request's route through the engine's subsystems
// (docs/design/request-route.md): matching, the local rate rules, the
// concurrency rules and their queue, the global rules and their calls,
// the refunds when a later rule refuses, the settling after the response
// and the release at the stream's end.
//
// The plugin's build (wasip1) compiles the steps out (trace_wasip1.go):
// each would cost the module a resumable call site (7 KB in all) for a
// hook only tests and debugging use. Other builds (the engine's tests)
// call the Tracer.
type Step uint8

const (
	StepMatch        Step = iota // rule matched the request
	StepExempt                   // the client is in exempt_cidrs: no rule applies
	StepLocal                    // a local rate rule admitted (charged) the request
	StepLocalRefuse              // a local rate rule refused it
	StepSlot                     // a concurrency rule gave it a slot
	StepQueue                    // it waits in a concurrency rule's queue
	StepDequeue                  // it left the queue with a slot (Poll)
	StepSlotRefuse               // a concurrency rule refused it
	StepGlobal                   // a global rule admitted it (from its lease, or a call's answer)
	StepCall                     // it waits for a call to the rate-limit service
	StepGlobalRefuse             // a global rule refused it
	StepRefund                   // what rule charged it was given back
	StepAdmit                    // admitted (Allow, or Delay by a rate rule)
	StepReject                   // refused, by rule
	StepSettle                   // rule charged it after the response
	StepRelease                  // rule's slot was given back at the stream's end
)

// Tracer is told each step of the requests' routes, with the rule it
// concerns (-1 for none): a test's recorder, or a debugging aid. It runs
// inside the engine's decisions, on the worker's thread: it must not call
// the engine.
type Tracer interface {
	Step(s Step, rule int)
}

// SetTracer makes t the engine's tracer (nil: none, the default). In the
// plugin's build (wasip1) it is never called.
func (e *Engine) SetTracer(t Tracer) { e.tracer = t }
