package engine

import (
	"errors"
	"time"

	"github.com/sluicehq/sluice/plugin/internal/rls"
)

// The worker's tick for global rules: deferred calls, calls whose answer
// will not come, failed calls and the circuit's probes.

// Sweep is the worker's tick for global rules (the plugin calls it in the
// root context): it sends probes, charges and deferred calls, decides the
// requests waiting for a call whose answer Envoy will not deliver (the
// stream that sent it is gone: the Go SDK drops its answer), and fails
// calls that should have been answered by now.
func (e *Engine) Sweep(now int64) {
	e.answering(nil) // the tick runs in the root context
	e.peerRecovered(now)
	if e.link.ProbeDue(now) {
		e.probe(now)
	}
	e.sendCharges(now)
	e.calls.Each(func(c any) { e.sweepCall(c.(*inflight), now) })
}

// sweepCall is the tick's work on one call in flight: sent if deferred,
// its requests decided if its answer is lost (its stream ended) or late.
func (e *Engine) sweepCall(in *inflight, now int64) {
	switch {
	case in.deferred:
		e.sendDeferred(in, now)
	case in.owner != nil && in.owner.cancelled:
		e.answerLost(in, now)
	case now-in.sentAt > int64(in.timeout)+int64(10*time.Millisecond):
		e.answer(in, rls.Response{}, ErrTimeout, true)
	}
}

// sendDeferred sends, from the tick, a call registered to be sent in the
// root context: a prefetch, or a call for requests whose streams could not
// receive its answer. A request whose timeout ran out while the call
// waited for the tick (a late tick) is decided by on_error, counted as
// expired: no call was made, so it is no failure of the service and the
// circuit stays as it is. The call answers by the earliest deadline of the
// requests still waiting; one that nobody waits for any more is a refill
// of the lease, given global.timeout from now, and dropped while the
// circuit is open (nothing is prefetched then).
func (e *Engine) sendDeferred(in *inflight, now int64) {
	in.deferred = false
	r := &e.cfg.Rules[in.ref.Rule]
	in.waiters = e.liveWaiters(in.waiters, r, in.ref.Rule, now)
	deadline := waitDeadline(in.waiters, now)
	if len(in.waiters) == 0 {
		if e.CircuitOpen() {
			e.forget(in)
			return
		}
		deadline = now + int64(e.cfg.Global.Timeout)
	}
	if err := e.send(in, now, deadline); err != nil {
		e.forget(in)
		e.failCall(in, err, now)
	}
}

// errAnswerLost: the stream that sent the call ended before its answer.
var errAnswerLost = errors.New("answer of the rate-limit service lost: the stream that sent the call ended")

// answerLost decides the requests waiting for in, whose answer Envoy will
// not deliver (the stream that sent it is gone), by on_error at once
// rather than when the call's time runs out: nothing says the service
// failed, so the circuit stays closed and the call is not counted as a
// failure. The hits the service may have counted for it are lost
// (under-admission).
func (e *Engine) answerLost(in *inflight, now int64) {
	e.forget(in)
	r := &e.cfg.Rules[in.ref.Rule]
	for _, p := range in.waiters {
		if p.cancelled {
			continue
		}
		e.Stats.Global.LostAnswers++
		e.afterError(p, r, in.ref.Rule, errAnswerLost, now)
	}
}

// forget removes in from the calls in flight: an answer that still comes
// is ignored.
func (e *Engine) forget(in *inflight) {
	in.done = true
	e.calls.Forget(in.key, in)
}

// failCall counts a failure of the service (in's call failed or could not
// be sent) and leaves the decision on in's waiters to on_error.
func (e *Engine) failCall(in *inflight, err error, now int64) {
	e.link.FailedCall(in.sentAt, now)
	r := &e.cfg.Rules[in.ref.Rule]
	for _, p := range in.waiters {
		if p.cancelled {
			continue
		}
		e.afterError(p, r, in.ref.Rule, err, now)
	}
}

// probe sends a call that no request waits for, to learn whether the
// service answers again: one hit on a descriptor of its own (its counter
// is never near its limit), from the tick, so in the root context.
func (e *Engine) probe(now int64) {
	g := e.cfg.Global
	req := rls.Request{
		Domain:  g.Domain,
		Entries: []rls.Entry{{Key: "sluice_probe", Value: "1"}},
		Limit:   1<<32 - 1,
		Unit:    rls.UnitSecond,
		Hits:    1,
	}
	e.Stats.Global.Probes++
	err := e.link.Send(g.Cluster, &req, g.Timeout, false, func(resp rls.Response, err error) {
		t := e.now()
		if err != nil {
			e.link.FailedCall(now, t)
			return
		}
		e.answered(e.link.Succeeded(t), t)
	})
	if err != nil {
		e.link.Failed(now)
	}
}

// CallsInFlight returns the number of calls in flight on this worker.
func (e *Engine) CallsInFlight() int { return e.calls.Len() }
