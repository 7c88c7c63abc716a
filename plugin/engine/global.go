package engine

import (
	"errors"
	"time"

	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/plugin/engine/global"
	"github.com/sluicehq/sluice/plugin/internal/lease"
	"github.com/sluicehq/sluice/plugin/internal/rls"
	"github.com/sluicehq/sluice/plugin/internal/sha256"
)

// Global rules: one budget across a fleet of Envoys, kept by a rate-limit
// service (envoyproxy/ratelimit on Redis), decided locally.
//
// A worker that finds a client's lease empty asks the service for k hits in
// one call (plugin/internal/lease sizes k) and pauses the request; the answer fills
// the lease in shared data, where every worker of this Envoy admits from it
// without a call. Requests of the same client and rule that arrive on the
// same worker while a call is in flight wait for that call instead of
// calling again; the answer serves them first, in arrival order, and what
// is left stays in the lease. If they outnumber the hits granted, the rest
// wait for one more call (sized for all of them) as long as their timeout
// allows. Workers do not coordinate their calls: two workers of one Envoy
// may each call for the same client at once, which only makes their leases
// smaller (the service's remaining count falls twice as fast).
//
// Requests rarely wait, though: when a request admitted from a lease leaves
// it at its low-water mark (what the client uses at this Envoy, at the rate
// the lease drained, while a call goes and comes back; lease.Prefetch), the
// next call is prepared in the background and sent from the worker's tick,
// in the root context (an answer to a call sent from a request's stream is
// lost if that stream ends first, and an admitted request does not wait
// for it). The lease keeps admitting meanwhile; only a request that finds
// it empty waits, for that same call, which it then sends at once if the
// tick has not yet. Each worker has at most one call in flight per client
// and rule, prefetched or not. Near the limit (lease.Size gives one hit)
// nothing is prefetched: one request per call, on demand.
//
// A call that fails (timeout, the service or Redis down, a missing
// cluster) leaves the decision to on_error, counted. After a failure the
// worker's circuit opens: requests that need a call are decided by
// on_error at once without waiting, and the worker's tick sends probe calls
// (no request waits for them) after a back-off that doubles from 100ms to
// 250ms; a probe's answer closes the circuit. Leases already held keep serving meanwhile (their hits were
// counted by the service before the failure). Only the service's failures
// open the circuit: a call whose answer Envoy drops (the stream that sent
// it ended) leaves its other requests to on_error at the next tick, and a
// call that waited for a late tick is sent then (Sweep).

// Caller sends one call to the rate-limit service (global.Caller).
type Caller = global.Caller

// Pending is a request waiting for a call to the rate-limit service. The
// plugin keeps it to cancel it if the stream goes away.
type Pending struct {
	// Ctx is the plugin's handle on the request (its HTTP context).
	Ctx any
	// Arrival is when the request was decided first; Deadline the latest
	// moment an answer may still admit it (Arrival + global.timeout).
	Arrival, Deadline int64
	verdict           Verdict
	charged           []charge
	globals           []globalRef // global rules of the request, in order
	keys              []byte      // the key bytes of globals
	next              int         // index in globals of the rule waiting
	cancelled         bool
	persisted         *Pending // the heap copy of the engine's scratch Pending
}

// globalRules is the engine's state for global rules: the calls to the
// rate-limit service in flight on this worker, the circuit that stops
// waiting on it after a failure, the debts of charges after the response,
// and the request being decided.
type globalRules struct {
	decided Decided
	// calls are the calls in flight on this worker and whose stream is
	// the current proxy-wasm context (package global keeps them).
	calls global.Calls
	// link sends the calls, keeps the circuit and measures the service's
	// round trip (package global owns its state).
	link    global.Link
	scratch Pending
	// asked are the global rules the request being decided set aside,
	// with their key bytes (package global keeps them).
	asked global.Asked
	// debts are global rules' charges after the response that wait for
	// a call (cost.go); costs what those rules' requests have been
	// costing, their deposit. Package global owns their state.
	debts global.Debts
	costs global.Costs
}

// persist returns a Pending that outlives the current decision: the
// engine's scratch Pending (which every decision reuses, so that requests
// served from leases allocate nothing) is copied once a request waits.
//
// Not inlined: a copy at each call site costs more wasm code than
// the call (docs/design/memory.md, "Inlining").
//
//go:noinline
func (e *Engine) persist(p *Pending) *Pending {
	if p != &e.scratch {
		return p
	}
	c := *p
	c.charged = append(make([]charge, 0, len(p.charged)+len(p.globals)), p.charged...)
	c.globals = append([]globalRef(nil), p.globals...)
	c.keys = append([]byte(nil), p.keys...)
	p.persisted = &c
	return &c
}

// Cancel forgets p: its stream is gone, it takes no hit from an answer.
// Its charges stay made; CancelPending gives them back.
func (p *Pending) Cancel() { p.cancelled = true }

// CancelPending forgets p, whose stream is gone while it waited for a call
// (its client left): it takes no hit from the answer, and the charges it
// made before the call (local rules, hits taken from leases) go back as a
// refused request's do (refundCharges), so a client that gives up does
// not pay for a request never served. The plugin gives its concurrency
// slots back with the stream's end.
func (e *Engine) CancelPending(p *Pending, now int64) {
	if p.cancelled {
		return
	}
	p.Cancel()
	e.refundCharges(p.charged, now)
	p.charged = p.charged[:0]
}

// globalRef is one global rule of a request (global.Ref): its index, the
// client's fingerprint in this Envoy's table and its descriptor key at the
// service; Off and N address Pending.keys.
type globalRef = global.Ref

// call returns the call in flight on this worker for client k (nil:
// none).
//
// Not inlined: a copy at each call site costs more wasm code than
// the call (docs/design/memory.md, "Inlining").
//
//go:noinline
func (e *Engine) call(k callKey) *inflight {
	in, _ := e.calls.Get(k).(*inflight)
	return in
}

// ctxOwner is the request whose stream is the current proxy-wasm context
// while an answer is handled (nil: the root context).
func (e *Engine) ctxOwner() *Pending {
	p, _ := e.calls.Owner().(*Pending)
	return p
}

// answering makes p's stream the current context while an answer is
// handled (nil: the root context; never a nil *Pending in the interface).
//
// Not inlined: a copy at each call site costs more wasm code than
// the call (docs/design/memory.md, "Inlining").
//
//go:noinline
func (e *Engine) answering(p *Pending) {
	if p == nil {
		e.calls.Answering(nil)
		return
	}
	e.calls.Answering(p)
}

// Decided is called by the engine when a request that waited for a call
// is decided (Outcome Allow, Delay or Reject) after its answer.
type Decided func(p *Pending, v *Verdict)

// GlobalStats counts what global rules did.
type GlobalStats struct {
	Calls          uint64 // calls sent to the service
	CallFailures   uint64 // calls that failed (timeout, error reply, not sent)
	OverLimit      uint64 // calls answered OVER_LIMIT
	LeaseAdmits    uint64 // requests admitted from a lease, without a call
	Waited         uint64 // requests that waited for a call
	ShortCircuited uint64 // requests decided by on_error without a call (circuit open)
	Probes         uint64 // calls sent by the tick to learn whether a failing service is back
	Expired        uint64 // waiting requests whose timeout ran out before a hit came
	LostAnswers    uint64 // waiting requests decided by on_error: their call's answer was lost (its stream ended)
	Prefetches     uint64 // calls prepared before the lease ran out (counted in Calls once sent)
	ChargeCalls    uint64 // calls that charged costs after admission (counted in Calls)
	// Granted is the hits the service granted this worker's calls: less
	// the deposits its requests took (one per request without a cost),
	// what its Envoy holds in leases or lost with them.
	Granted uint64
	// HeldResponses are responses held until the service answered the
	// charge their lease could not cover (SettleHeld).
	HeldResponses uint64
}

const (
	// prefetchTick is the tick period of the plugin with global rules
	// (plugin/global.go): a prefetched call waits for it at most.
	prefetchTick = 20 * time.Millisecond
)

// callKey is a client of a global rule on this worker (its rule and
// fingerprint): at most one call in flight, one debt.
type callKey = global.Key

type inflight struct {
	// owner is the request whose stream was the proxy-wasm context when
	// the call was sent (nil: the plugin's root context, from the tick).
	// The Go SDK delivers the answer only while that stream lives.
	owner *Pending
	// deferred: to be sent from the next tick (see sendOrDefer).
	deferred bool
	desc     string // the client's descriptor key at the service
	debt     uint32 // hits owed by the client that the sent call carries
	done     bool
	sentAt   int64
	timeout  time.Duration
	key      callKey
	ref      globalRef
	k        uint32
	callAt   int64
	noLease  bool
	tries    uint8 // times a failed call was sent again (retryFailed)
	waiters  []*Pending
}

// SetGlobal gives the engine what global rules need: the caller of the
// service and the function told of decisions made after a call.
func (e *Engine) SetGlobal(c Caller, d Decided) {
	e.link.SetCaller(c)
	e.decided = d
}

// descriptorKey is the client's key at the service: the same on every
// Envoy of the fleet (no per-process seed), and of fixed size whatever the
// keyed header holds.
// It is the hex of the first 16 bytes of the key's SHA-256: fleets already
// running keep their keys (plugin/internal/sha256 is byte-identical to
// crypto/sha256, which the plugin no longer links).
func descriptorKey(keyBuf []byte) string {
	sum := sha256.Sum256(keyBuf)
	const digits = "0123456789abcdef"
	var b [32]byte
	for i, c := range sum[:16] {
		b[2*i], b[2*i+1] = digits[c>>4], digits[c&15]
	}
	return string(b[:])
}

// OverflowLease is the fingerprint that addresses a global rule's overflow
// lease (Table.Lease): the clients of a rule whose share of the table is
// full share it, and one descriptor at the service (overflowDescriptor).
const OverflowLease = overflowFP

// overflowDescriptor is the descriptor key, at the service, of a global
// rule's clients that found its share of the table full: the same on every
// Envoy of the fleet, so they are limited together fleet-wide.
const overflowDescriptor = "overflow"

// descriptor returns the descriptor key at the service of p's global rule g.
func (e *Engine) descriptor(p *Pending, g globalRef) string {
	if g.FP == OverflowLease {
		return overflowDescriptor
	}
	return descriptorKey(p.keys[g.Off : g.Off+g.N])
}

// decideGlobal evaluates the request's global rules from index from, on
// verdict v (the local rules admitted it). It returns true when the
// request now waits for a call (v.Outcome is Call and v.Pending set).
func (e *Engine) decideGlobal(p *Pending, now int64) bool {
	for p.next < len(p.globals) {
		g := p.globals[p.next]
		r := &e.cfg.Rules[g.Rule]
		end := lease.WindowEnd(now, r.Limit.Window())
		st, admitted, exhausted, err := e.takeLease(p, &g, now, end)
		switch {
		case err != nil:
			if e.onError(p, r, g.Rule, err) {
				return false
			}
		case admitted:
			e.Stats.Global.LeaseAdmits++
			e.admitGlobal(p, g, &st, now, end)
			e.prefetch(p, g, &st, now)
		case exhausted:
			e.rejectGlobal(p, g.Rule, now, end)
			return false
		default:
			// The lease is empty: this request needs the service.
			if waiting, done := e.callService(p, g, r, &st, now); done {
				if waiting {
					e.trace(StepCall, g.Rule)
				}
				return waiting
			}
		}
		p.next++
	}
	// Every global rule admitted the request.
	e.finishAdmit(p)
	return false
}

// takeLease takes one hit from the lease of p's global rule g (the rule's
// overflow lease when its share of the table is full, which g then names).
func (e *Engine) takeLease(p *Pending, g *globalRef, now, end int64) (st lease.State, admitted, exhausted bool, err error) {
	take := func(s *lease.State) bool {
		var ns lease.State
		ns, admitted, exhausted = lease.TakeN(*s, g.Dep)
		if !admitted {
			return false
		}
		*s = ns
		return true
	}
	st, err = e.table.Lease(g.FP, g.Rule, now, end, take)
	if errors.Is(err, ErrFull) {
		// The rule's share is full: this client is counted with the
		// rule's other new clients, on the rule's overflow lease and
		// one descriptor at the service (limited together, a call per
		// lease, not one per request). A client the service said is
		// over its own limit is refused (oweOwn).
		g.Own, g.FP = g.FP, OverflowLease
		p.globals[p.next].FP, p.globals[p.next].Own = g.FP, g.Own
		e.table.countOverflow(g.Rule, SlotOverflow)
		if e.debts.Barred(callKey{Rule: g.Rule, FP: g.Own}, now) {
			return lease.State{Known: true, Exhausted: true}, false, true, nil
		}
		st, err = e.table.Lease(g.FP, g.Rule, now, end, take)
	}
	return st, admitted, exhausted, err
}

// oweOwn records that p's client, admitted by global rule g on the rule's
// overflow lease, owes its own descriptor the hits it took (sent from the
// tick, one call per client for all it took meanwhile: sendCharges).
// Otherwise a client on the overflow at one Envoy and on its own lease at
// another would be counted against two budgets, up to twice its limit
// across the fleet; with it, its own descriptor counts every admission,
// and the service's answer over the limit bars it from this worker's
// overflow until the window ends (sendDebt). Bound: its limit plus what it
// is admitted on the overflow between a tick and the answer, per worker
// where it is on the overflow (docs/fleet.md).
// The client's descriptor is hashed only for a client that owes nothing
// yet, or when withDesc (a rule with a cost keeps it to settle the cost
// there too); it is returned then.
func (e *Engine) oweOwn(p *Pending, g globalRef, hits uint32, withDesc bool) string {
	k := callKey{Rule: g.Rule, FP: g.Own}
	desc := ""
	if withDesc || e.debts.Owed(k) == 0 {
		desc = descriptorKey(p.keys[g.Off : g.Off+g.N])
	}
	e.keepOwed(&PostCharge{rule: g.Rule, fp: g.Own, desc: desc}, hits)
	return desc
}

// callService makes p wait for a call for g's client: the one in flight on
// this worker, or a new one sized from the lease st. When no call can be
// made (the circuit is open, the send failed), on_error decides. done
// says the decision stops here: p waits, or on_error refused it.
func (e *Engine) callService(p *Pending, g globalRef, r *config.Rule, st *lease.State, now int64) (waiting, done bool) {
	key := callKey{Rule: g.Rule, FP: g.FP}
	// own: the current proxy-wasm context is p's stream (p is deciding, or
	// the answer being handled is of a call p's stream sent), so a call
	// sent now is answered to p.
	own := e.calls.Own(p)
	if in := e.call(key); in != nil {
		q := e.persist(p)
		q.verdict.Outcome = Call
		in.waiters = append(in.waiters, q)
		if in.deferred && own {
			// A call the tick has not sent yet (a prefetch): this request
			// needs it, so send it now from its stream rather than wait
			// for the tick.
			in.deferred, in.owner = false, q
			if e.send(in, now, waitDeadline(in.waiters, now)) != nil {
				in.deferred, in.owner = true, nil // the tick tries again
			}
		}
		e.Stats.Global.Waited++
		p.verdict.Outcome = Call
		return true, true
	}
	if e.CircuitOpen() {
		// While the circuit is open no request waits: the tick probes
		// the service (Sweep) and closes the circuit when it answers.
		e.Stats.Global.ShortCircuited++
		return false, e.onError(p, r, g.Rule, errCircuitOpen)
	}
	k := e.leaseSize(st, g.Rule, now, g.Dep, g.Dep)
	in := &inflight{key: key, ref: g, k: k, callAt: now, desc: e.descriptor(p, g)}
	if err := e.sendOrDefer(in, now, p.Deadline, own); err != nil {
		e.link.Failed(now)
		return false, e.onError(p, r, g.Rule, err)
	}
	q := e.persist(p)
	q.verdict.Outcome = Call
	in.waiters = []*Pending{q}
	if own {
		in.owner = q
	}
	e.Stats.Global.Waited++
	p.verdict.Outcome = Call
	return true, true
}

// prefetch prepares the next call for g's client when the request just
// admitted left its lease st at the low-water mark: at most one call per
// client and rule on this worker, none while the circuit is open, none
// near the limit. The call is sent from the tick (root context), so that
// its answer is delivered whatever happens to this request's stream.
func (e *Engine) prefetch(p *Pending, g globalRef, st *lease.State, now int64) {
	key := callKey{Rule: g.Rule, FP: g.FP}
	if e.call(key) != nil || e.link.Open() || !e.link.Ready() {
		return
	}
	r := &e.cfg.Rules[g.Rule]
	w := r.Limit.Window()
	if !lease.PrefetchN(*st, w, now, 2*e.link.RTT()+prefetchTick, g.Dep) {
		return
	}
	k := e.leaseSize(st, g.Rule, now, g.Dep, g.Dep)
	if k <= g.Dep {
		return
	}
	in := &inflight{key: key, ref: g, k: k, callAt: now, desc: e.descriptor(p, g), deferred: true}
	e.calls.Put(key, in)
	e.Stats.Global.Prefetches++
}

var errCircuitOpen = errors.New("rate-limit service failing: circuit open, not waiting")

// ErrTimeout: a waiting request's timeout ran out before the service gave
// it a hit.
var ErrTimeout = errors.New("rate-limit service did not answer within global.timeout")

// sendOrDefer sends in now if its answer will be delivered: when the
// current proxy-wasm context is the stream of the request the call is for
// (own), the plugin's root context (no owner), or a request that
// waits for this very call. Otherwise (a call started while answering
// another call, for requests that do not include the answered call's
// owner) it is sent from the next tick, in the root context (sendDeferred);
// meanwhile it is registered, so that requests of the same client wait for
// it.
func (e *Engine) sendOrDefer(in *inflight, now, deadline int64, own bool, waiters ...*Pending) error {
	if own || e.ctxOwner() == nil {
		if !own {
			in.owner = nil
		}
		return e.send(in, now, deadline)
	}
	for _, p := range waiters {
		if p == e.ctxOwner() {
			in.owner = p
			return e.send(in, now, deadline)
		}
	}
	in.deferred = true
	e.calls.Put(in.key, in)
	return nil
}

// waitDeadline is the moment by which a call must answer the requests of
// waiters: the earliest deadline among those not cancelled that is still
// at least a millisecond away (a request already past its deadline is
// decided by the tick, and must not cut the others' time short).
func waitDeadline(waiters []*Pending, now int64) int64 {
	d := int64(0)
	for _, p := range waiters {
		if p.cancelled || p.Deadline-now < int64(time.Millisecond) {
			continue
		}
		if d == 0 || p.Deadline < d {
			d = p.Deadline
		}
	}
	return d
}

// send dispatches the call of in, which must answer by deadline.
func (e *Engine) send(in *inflight, now, deadline int64) error {
	r := &e.cfg.Rules[in.ref.Rule]
	g := e.cfg.Global
	timeout := time.Duration(deadline - now)
	if timeout < time.Millisecond {
		return ErrTimeout
	}
	unit, _ := rls.UnitOf(r.Limit.Window())
	req := rls.Request{
		Domain:  g.Domain,
		Entries: []rls.Entry{{Key: "sluice_rule", Value: r.Name}, {Key: "sluice_key", Value: in.desc}},
		Limit:   uint32(r.Limit.Limit()),
		Unit:    unit,
		Hits:    in.k,
	}
	in.debt = e.debts.Owed(in.key)
	req.Hits += in.debt
	e.Stats.Global.Calls++
	in.sentAt, in.timeout = now, timeout
	err := e.link.Send(g.Cluster, &req, timeout, false, func(resp rls.Response, err error) {
		e.answer(in, resp, err, false)
	})
	if err != nil {
		// Not sent: the debt stays owed, for a later call or the tick.
		in.debt = 0
		e.Stats.Global.CallFailures++
		return err
	}
	e.debts.Paid(in.key, in.debt)
	e.calls.Put(in.key, in)
	return nil
}

// continueGlobal goes on with p's next global rules after an answer, and
// tells the plugin if p is decided.
func (e *Engine) continueGlobal(p *Pending, now int64) {
	if e.decideGlobal(p, now) {
		return // waiting for another call
	}
	e.decided(p, &p.verdict)
}

// admitGlobal records that global rule g admitted p (lease state st).
func (e *Engine) admitGlobal(p *Pending, g globalRef, st *lease.State, now, end int64) {
	e.trace(StepGlobal, g.Rule)
	if p.next < len(p.globals) && p.globals[p.next].Rule == g.Rule {
		// After an answer g is the call's: p's own reference has p's cost
		// and the offset of p's key bytes.
		g = p.globals[p.next]
	}
	r := &e.cfg.Rules[g.Rule]
	win := lease.WindowStart(now, r.Limit.Window())
	dep := max(g.Dep, 1)
	p.charged = append(p.charged, charge{Rule: g.Rule, FP: g.FP, N: int64(dep), Win: win})
	ownDesc := ""
	if g.FP == OverflowLease && g.Own != 0 {
		ownDesc = e.oweOwn(p, g, dep, r.Cost.Set())
	}
	if r.Cost.Set() {
		// The deposit is taken from the lease; the rest of the cost, or
		// what the deposit holds beyond it, is settled now (a
		// request_header cost over the deposit) or after the response.
		pc := PostCharge{rule: g.Rule, fp: g.FP, desc: e.descriptor(p, g), win: win, dep: dep}
		if ownDesc != "" {
			pc.own, pc.desc = g.Own, ownDesc
		}
		if r.Cost.AfterResponse() {
			p.verdict.post.add(pc)
		} else if g.Cost > int64(dep) { // a cost over the rule's limit
			e.Stats.Rules[g.Rule].Charged += uint64(g.Cost) - uint64(dep)
			e.debitGlobal(&pc, g.Cost, now, nil)
		}
	}
	reportLease(&p.verdict, r, st, now, end)
}

// reportRedirected puts global rule r's numbers for client fp into v for
// an internal redirect, which is not charged (the request it follows was):
// the lease is read, not taken from. A lease that cannot be read (the
// rule's share is full) reports nothing.
func (e *Engine) reportRedirected(v *Verdict, r *config.Rule, i int, fp uint64, now int64) {
	end := lease.WindowEnd(now, r.Limit.Window())
	st, err := e.table.Lease(fp, i, now, end, func(*lease.State) bool { return false })
	if err == nil {
		reportLease(v, r, &st, now, end)
	}
}

// reportLease makes global rule r's numbers from its lease st (window
// ending at end) v's, if they are the tightest.
func reportLease(v *Verdict, r *config.Rule, st *lease.State, now, end int64) {
	rem := int64(st.Tokens)
	if st.Known {
		rem += int64(st.Remaining)
	} else {
		rem = r.Limit.Limit() - 1
	}
	rem = min(rem, r.Limit.Limit()-1)
	reset := time.Duration(end - now)
	if v.Report == nil || rem < v.Remaining || (rem == v.Remaining && reset > v.Reset) {
		v.Report, v.Remaining, v.Reset, v.measured = r, rem, reset, now
	}
}

// rejectGlobal rejects p by global rule i (the service has nothing left
// for the client until end) and refunds what p was charged.
func (e *Engine) rejectGlobal(p *Pending, i int, now, end int64) {
	r := &e.cfg.Rules[i]
	e.trace(StepGlobalRefuse, i)
	e.trace(StepReject, i)
	e.Stats.Rules[i].Rejected++
	v := &p.verdict
	wait := time.Duration(end - now)
	v.Outcome, v.Delay = Reject, 0
	v.Report, v.Remaining, v.Reset, v.RetryAfter = r, 0, wait, wait
	v.violate(i)
	e.refundGlobal(p, now)
}

// onError applies on_error to p for rule r after err; true if p is now
// rejected (decided), false if the rule is passed over.
func (e *Engine) onError(p *Pending, r *config.Rule, i int, err error) bool {
	v := &p.verdict
	v.Err, v.ErrRule = err, r
	if e.cfg.OnErrorDeny {
		e.trace(StepReject, i)
		e.Stats.OnErrorDenied++
		v.Outcome, v.Delay = Reject, 0
		v.Report, v.Remaining, v.Reset, v.RetryAfter = r, 0, time.Second, time.Second
		v.violate(i)
		e.refundGlobal(p, e.now())
		return true
	}
	e.Stats.OnErrorAllowed++
	return false
}
