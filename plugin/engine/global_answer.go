// The rate-limit service's answers: serving the requests that waited for a
// call, retries, and errors.

package engine

import (
	"time"

	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/plugin/internal/lease"
	"github.com/sluicehq/sluice/plugin/internal/rls"
)

// answer handles the reply to in's call.
func (e *Engine) answer(in *inflight, resp rls.Response, err error, fromTick bool) {
	if in.done {
		return // swept already
	}
	in.done = true
	// Calls sent while handling this answer are registered with the
	// current proxy-wasm context: the owner of this call's stream, or the
	// root context on the tick.
	if fromTick {
		e.answering(nil)
	} else {
		e.answering(in.owner)
	}
	defer e.answering(nil)
	now := e.now()
	e.calls.Forget(in.key, in)
	w := e.cfg.Rules[in.ref.Rule].Limit.Window()
	if err != nil {
		e.Stats.Global.CallFailures++
		// The debt it carried is owed again (see keepOwed), sent with the
		// client's next call or the tick.
		e.keepOwed(&PostCharge{rule: in.key.Rule, fp: in.key.FP, desc: in.desc}, in.debt)
		if e.retryFailed(in, err, now) {
			return
		}
		e.failCall(in, err, now)
		return
	}
	e.answered(e.link.Answered(in.sentAt, now), now)
	if lease.WindowStart(in.callAt, w) != lease.WindowStart(now, w) {
		// The answer crossed a window boundary: the service may have counted
		// the hits in either window. Use none of them (under-admission, at
		// most k once per boundary) and ask again.
		e.retry(in, in.waiters, now)
		return
	}
	if resp.Code == rls.CodeOverLimit {
		e.Stats.Global.OverLimit++
	}
	e.serveAnswer(in, lease.Answer{K: in.k, OK: resp.Code == rls.CodeOK, Remaining: resp.Remaining, Min: in.ref.Dep}, now)
}

// serveAnswer grants the hits of answer a to the lease of in's client and
// serves in's waiters from them: admitted while hits last, refused when
// the client is exhausted, the others sent to one more call.
func (e *Engine) serveAnswer(in *inflight, a lease.Answer, now int64) {
	w := e.cfg.Rules[in.ref.Rule].Limit.Window()
	end := lease.WindowEnd(now, w)
	order := e.serveOrder(in, a.OK && a.K > 0)
	// served: how many of order (in order, the cancelled skipped) the
	// grant and the lease's tokens cover, each its whole deposit.
	served := 0
	cover := func(tokens uint32) uint32 {
		served = 0
		for _, p := range order {
			if p.cancelled {
				served++
				continue
			}
			d := depositOf(p, in.ref.Rule)
			if tokens < d {
				break
			}
			tokens -= d
			served++
		}
		return tokens
	}
	if a.OK {
		e.Stats.Global.Granted += uint64(a.K)
	}
	st, lerr := e.table.Lease(in.ref.FP, in.ref.Rule, now, end, func(s *lease.State) bool {
		var g uint32
		*s, g = lease.Grant(*s, a, w, now)
		s.Tokens = cover(s.Tokens + g)
		return true
	})
	if lerr != nil {
		// No room to keep the lease: the hits beyond the waiters' are lost.
		var g uint32
		st, g = lease.Grant(lease.State{}, a, w, now)
		cover(g)
	}
	var rest []*Pending
	for i, p := range order {
		if p.cancelled {
			continue
		}
		if i < served {
			e.admitGlobal(p, in.ref, &st, now, end)
			p.next++
			e.continueGlobal(p, now)
			continue
		}
		if st.Exhausted || (!a.OK && in.k <= max(in.ref.Dep, 1)) {
			e.rejectGlobal(p, in.ref.Rule, now, end)
			e.decided(p, &p.verdict)
			continue
		}
		rest = append(rest, p)
	}
	if len(rest) > 0 {
		e.retry(in, rest, now)
	}
}

// serveOrder is the order in which in's waiters are served: arrival, but
// when some will wait for one more call, sent from here in the context of
// this call's owner, the owner is kept waiting (served last) so that the
// next answer is delivered.
func (e *Engine) serveOrder(in *inflight, granted bool) []*Pending {
	o := e.ctxOwner()
	if o == nil || o.cancelled || !granted || len(in.waiters) < 2 {
		return in.waiters
	}
	order := make([]*Pending, 0, len(in.waiters))
	for _, p := range in.waiters {
		if p != o {
			order = append(order, p)
		}
	}
	if len(order) < len(in.waiters) {
		order = append(order, o)
	}
	return order
}

// liveWaiters returns the requests of waiters still waiting for rule r
// (index i): those whose timeout has run out are decided by on_error
// (counted as expired), cancelled ones dropped.
func (e *Engine) liveWaiters(waiters []*Pending, r *config.Rule, i int, now int64) []*Pending {
	var live []*Pending
	for _, p := range waiters {
		if p.cancelled {
			continue
		}
		if p.Deadline-now < int64(time.Millisecond) {
			e.Stats.Global.Expired++
			e.afterError(p, r, i, ErrTimeout, now)
			continue
		}
		live = append(live, p)
	}
	return live
}

// retry sends one more call for the requests of in still waiting; those
// whose timeout has run out are decided by on_error.
func (e *Engine) retry(in *inflight, waiters []*Pending, now int64) {
	r := &e.cfg.Rules[in.ref.Rule]
	live := e.liveWaiters(waiters, r, in.ref.Rule, now)
	if len(live) == 0 {
		return
	}
	deadline := waitDeadline(live, now)
	if old := e.call(in.key); old != nil {
		// Another call for this client started meanwhile: wait for it.
		old.waiters = append(old.waiters, live...)
		return
	}
	st, _ := e.table.Lease(in.ref.FP, in.ref.Rule, now, lease.WindowEnd(now, r.Limit.Window()), func(*lease.State) bool { return false })
	k := in.ref.Dep
	if !in.noLease {
		need := uint64(0)
		for _, p := range live {
			need += uint64(depositOf(p, in.ref.Rule))
		}
		k = e.leaseSize(&st, in.ref.Rule, now, uint32(min(need, lease.MaxK)), in.ref.Dep)
	}
	next := &inflight{key: in.key, ref: in.ref, k: k, callAt: now, noLease: in.noLease, waiters: live, desc: in.desc}
	if err := e.sendOrDefer(next, now, deadline, false, live...); err != nil {
		e.link.Failed(now)
		for _, p := range live {
			e.afterError(p, r, in.ref.Rule, err, now)
		}
	}
}

// afterError applies on_error to the waiting request p after err for rule
// r (index i): it goes on with p's next global rules, or tells the plugin
// that p is rejected.
func (e *Engine) afterError(p *Pending, r *config.Rule, i int, err error, now int64) {
	if !e.onError(p, r, i, err) {
		p.next++
		e.continueGlobal(p, now)
		return
	}
	e.decided(p, &p.verdict)
}
