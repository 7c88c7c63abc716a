// Command plugin is the Sluice proxy-wasm HTTP filter. Build it with `make
// build`: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared, then the
// exports Sluice does not use are dropped (see streamend_wasip1.go).
//
// This file only wires proxy-wasm contexts to the engine package, where the
// logic lives and is tested natively.
package main

import (
	"encoding/binary"
	"errors"
	"time"
	"unsafe"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/plugin/engine"
	"github.com/sluicehq/sluice/plugin/internal/sprintf"
	"github.com/sluicehq/sluice/sdk/header"
)

func main() {}

func init() {
	proxywasm.SetVMContext(&vmContext{})
}

type vmContext struct{ types.DefaultVMContext }

func (*vmContext) NewPluginContext(contextID uint32) types.PluginContext {
	p := &pluginContext{id: contextID}
	roots = append(roots, p) // streams.go
	return p
}

// OnPluginDone retires p (see retire) where the SDK's proxy_on_done runs
// (a plain `go build`; `make build` ends contexts in sluiceOnStreamEnd).
func (p *pluginContext) OnPluginDone() bool {
	p.retire()
	return true
}

// retire publishes p's last counters and takes its share out of the
// process-wide gauges, once, when its context ends.
func (p *pluginContext) retire() {
	if p.retired {
		return
	}
	p.retired = true
	for i, r := range roots {
		if r == p {
			roots[i] = roots[len(roots)-1]
			roots[len(roots)-1] = nil
			roots = roots[:len(roots)-1]
			break
		}
	}
	if p.metrics != nil && p.engine != nil {
		p.metrics.flush(p.engine, p.held.len())
		p.metrics.retire()
	}
}

// pluginContext is one configured instance of the filter on one worker.
type pluginContext struct {
	types.DefaultPluginContext
	id      uint32 // the plugin context's ID
	retired bool   // its context ended (retire)
	engine  *engine.Engine
	rls     *rlsCaller   // global rules' calls (nil without global rules)
	headers limitHeaders // an admitted response's (worker.go)
	held    heldQueue
	pools   pools // stream contexts for reuse (verdicts.go)
	metrics *metrics
	// The parts below own their state (worker.go): the tick, the log
	// lines' pace, the census, the streams waiting in a concurrency queue,
	// a rejection's body, the request's header map, Envoy's internal
	// redirects.
	tick     ticker
	logs     logLimits
	census   censusWorker
	queue    waitingStreams
	problem  problemBody
	pairs    headerPairs
	redirect redirects
}

func (p *pluginContext) OnPluginStart(int) types.OnPluginStartStatus {
	doc, err := proxywasm.GetPluginConfiguration()
	if err != nil && !errors.Is(err, types.ErrorStatusNotFound) {
		proxywasm.LogCritical(sprintf.Sprintf("sluice: cannot read the plugin configuration: %v", err))
		return types.OnPluginStartStatusFailed
	}
	cfg, err := config.Parse(doc)
	if err != nil {
		proxywasm.LogCritical(sprintf.Sprintf("sluice: invalid configuration: %v", err))
		return types.OnPluginStartStatusFailed
	}
	store := &sharedData{}
	seed, err := engine.LoadSeed(store)
	if err != nil {
		proxywasm.LogCritical(sprintf.Sprintf("sluice: shared data unavailable at start: %v", err))
		return types.OnPluginStartStatusFailed
	}
	// The engine's clock (answers to calls, the tick) is the request
	// path's: one host call.
	p.engine = engine.New(cfg, store, seed, nowNanos)
	p.engine.OnRoundEnded(p.logRound)
	p.census = newCensusWorker(seed ^ uint64(time.Now().UnixNano()) ^ uint64(contextIDSalt()))
	p.metrics = newMetrics(cfg)
	p.metrics.owner = p.census.id()
	tickMS := uint32(1000)
	if cfg.HasGlobal() {
		p.rls = newRLSCaller(cfg.Global.Cluster, p.id)
		p.engine.SetGlobal(p.rls, p.onDecided)
		tickMS = globalTickMS
	}
	if engine.Throttles(cfg) {
		tickMS = throttleTickMS
	}
	if engine.HasConcurrency(cfg) {
		// Held slots are leases renewed on the tick once per epoch
		// (limit.Epoch, 1s): tick well within it.
		tickMS = min(tickMS, concTickMS)
		p.queue.enable()
	}
	p.tick = newTicker(tickMS)
	if err := proxywasm.SetTickPeriodMilliSeconds(p.tick.periodMS()); err != nil {
		proxywasm.LogCritical(sprintf.Sprintf("sluice: cannot set the tick period: %v", err))
		return types.OnPluginStartStatusFailed
	}
	proxywasm.LogInfo(sprintf.Sprintf("sluice: started: %s", engine.Summary(cfg, p.engine.Table())))
	return types.OnPluginStartStatusOK
}

func (p *pluginContext) NewHttpContext(contextID uint32) types.HttpContext {
	return p.newStream(contextID)
}

// newStream is the context of p's new stream contextID.
func (p *pluginContext) newStream(contextID uint32) *httpContext {
	h := p.pools.streams.get()
	h.id, h.plugin = contextID, p
	return h
}

// OnTick releases held requests whose time has come and, about once a
// second, publishes the counters as Envoy stats.
func (p *pluginContext) OnTick() {
	now := nowNanos()
	if p.queue.enabled() {
		// How late this tick came: the worker's loop lag, which adaptive
		// rules take out of their latency samples (engine.loopLag).
		p.engine.Ticked(now, p.tick.period())
		defer func() { p.engine.TickDone(nowNanos()) }()
	}
	if p.engine.CallsInFlight() > 0 || p.engine.CircuitOpen() || p.engine.PendingCharges() > 0 {
		p.engine.Sweep(now)
	}
	p.held.release(now, func(id uint32) {
		if err := proxywasm.SetEffectiveContext(id); err != nil {
			return // the stream is gone
		}
		if err := proxywasm.ResumeHttpRequest(); err != nil {
			proxywasm.LogDebug(sprintf.Sprintf("sluice: resume of held request %d failed: %v", id, err))
		}
	})
	if p.queue.enabled() {
		p.pollQueues(now)
		p.engine.Learn(now)
	}
	if p.tick.flushDue(now) {
		p.metrics.flush(p.engine, p.held.len())
		p.metrics.flushOverflow(p.engine.Table())
		p.logOverflow(now)
		p.countStates(now)
		// Another configuration of this vm_id live beside this one (a
		// second listener, a drained predecessor) keeps sharing its
		// rules' states (engine.Table.RenewLayouts).
		p.engine.Table().RenewLayouts(now)
	}
}

// concTickMS is the longest tick period with concurrency rules: their
// slots are renewed on the tick once per second.
const concTickMS = 100

// pollQueues lets the engine advance the concurrency queues and carries
// out its decisions on the waiting streams.
func (p *pluginContext) pollQueues(now int64) {
	events := p.queue.poll(p.engine, now)
	for i := range events {
		ev := &events[i]
		h := p.queue.take(ev.ID)
		if h == nil {
			// Not ours any more (it ended): give back what it was granted.
			p.giveBack(&ev.Verdict, now)
			continue
		}
		*h.verdict = ev.Verdict
		if err := proxywasm.SetEffectiveContext(ev.ID); err != nil {
			p.giveBack(h.verdict, now)
			continue
		}
		v := h.verdict
		switch v.Outcome {
		case engine.Call:
			// Its global rules wait for the rate-limit service (onDecided).
			h.pending = v.Pending
			h.pending.Ctx, h.shared = h, true
		case engine.Reject:
			_ = p.reject(h, v, now)
		case engine.Delay:
			// A rate rule also delays it: hold it for what is left.
			if rest := v.Delay - ev.Waited; rest > 0 {
				if p.hold(h, v, rest, now) {
					p.tell(v)
				}
				continue
			}
			p.tell(v)
			v.Outcome = engine.Allow
			h.sent = now
			_ = proxywasm.ResumeHttpRequest()
		default:
			h.sent = now
			p.tell(v)
			_ = proxywasm.ResumeHttpRequest()
		}
	}
}

// giveBack gives back what a waiter whose stream is gone was granted when
// it left the queue: its slots, and its global rule's call if it went on
// to one (its charges go back: engine.CancelPending).
func (p *pluginContext) giveBack(v *engine.Verdict, now int64) {
	if v.Pending != nil {
		p.engine.CancelPending(v.Pending, now)
	}
	p.engine.Release(v.Slots, now)
	v.Slots = nil
}

// reject answers the current stream h with the rejection v: its filter
// state for the access log, its headers and body (and gRPC's retry
// pushback for a gRPC call), a rate-limited log line, the configured
// status.
func (p *pluginContext) reject(h *httpContext, v *engine.Verdict, now int64) error {
	p.tell(v)
	cfg := p.engine.Config()
	// A refused gRPC call: one more host call, on the reject path only,
	// and only for a request with a body. A unary gRPC call always has
	// one (its message, in DATA frames after the headers), so a request
	// whose headers ended the stream (a GET, most of what a flood sends)
	// costs no read. The one gRPC call without a body, a streaming call
	// closed before its first message, is refused without the pushback
	// (Retry-After still says when).
	pushback := false
	if !h.bodyless {
		ct, err := proxywasm.GetHttpRequestHeader("content-type")
		pushback = err == nil && header.IsGRPC(ct)
	}
	if n, due := p.logs.rejection(now, v.Report != nil); due {
		p.logRejection(v, n)
	}
	// The last rejection's headers and body (and the headers' encoding)
	// are sent again while what they say is the same (rejectKey).
	b := &p.problem
	keySame := b.built && b.key.says(v)
	same := keySame && !pushback
	if !same {
		b.prepare(cfg, v, pushback, keySame)
	}
	body := b.body
	if cfg.TextBody {
		body = textBody
	}
	return sendLocalResponse(cfg.Status, b.hdrs.List(), body, &b.encoded, same)
}

// logRejection logs a rejection at debug level, with the n rejections
// since the last line: reject logs one at most once a second per worker
// (logLimits): a log call per rejected request would cost a host call and
// an allocation each, under exactly the floods a rate limiter exists for.
func (p *pluginContext) logRejection(v *engine.Verdict, n int) {
	proxywasm.LogDebug(sprintf.Sprintf("sluice: rule %s rejected client %s (retry after %v); %d rejection(s) on this worker since the last such line",
		v.Report.Name, v.Client, v.RetryAfter, n))
}

// countStates advances the census of tracked client states by a fifth of
// the table per second, on the one worker that holds the census lease.
func (p *pluginContext) countStates(now int64) {
	if n, counts, done := p.census.step(p.engine.Table(), now); done {
		p.metrics.recordActiveStates(n, counts)
	}
}

// logOverflow logs, once per episode process-wide (Table.StartOverflow),
// that a rule has started deciding new clients on its overflow state: its
// share of the state table is full. One line, not one per request: the
// operator sees the flood (or a share too small for real clients) and the
// setting that sizes it; the per-rule overflow counter tells how long it
// lasts.
func (p *pluginContext) logOverflow(now int64) {
	t := p.engine.Table()
	cfg := p.engine.Config()
	for i := range p.metrics.rules {
		rm := &p.metrics.rules[i]
		if !rm.overflowSeen {
			continue
		}
		rm.overflowSeen = false
		if !t.StartOverflow(i, now) {
			continue
		}
		r := &cfg.Rules[i]
		proxywasm.LogWarn(sprintf.Sprintf("sluice: rule %s: its share of the state table is full (%d client states): new clients of the rule are limited together on its overflow state (a flood of new keys, or real clients: then raise rules[%d].max_keys or max_keys); other rules are not affected",
			r.Name, t.RegionCapacity(i), i))
	}
}

// censusLease is how long a census worker keeps the role without renewing
// it (it renews every second).
const censusLease = 5 * time.Second

// httpContext is one HTTP stream.
type httpContext struct {
	_ [0]func() // not comparable: no equality function in the module
	types.DefaultHttpContext
	id     uint32
	plugin *pluginContext
	// verdict is the request's decision once it is decided (own), nil
	// before and after. own is part of the context, which comes from the
	// plugin's pool (verdicts.go) and is cleared, verdict and all, when it
	// goes back: one clear per request, and no pool of verdicts.
	verdict *engine.Verdict
	own     engine.Verdict
	decided bool
	// pending: the request waits for the rate-limit service.
	pending *engine.Pending
	gone    bool
	// adaptive concurrency (adaptive.go): when the request was forwarded,
	// and whether its latency was sampled.
	sent    int64
	sampled bool
	// responded: the response's headers came through this filter.
	responded bool
	// shared: a call to the rate-limit service refers to the context
	// (Pending.Ctx, a held response's resume) and may look for it after
	// the stream ends, so it is never reused for another stream.
	shared bool
	// bodyless: the request's headers ended its stream (no body), so it
	// is no gRPC call (reject).
	bodyless bool
	// heldResponse: the response waits for the service to count its
	// charge (cost.go).
	heldResponse bool
}

func (h *httpContext) OnHttpRequestHeaders(_ int, endOfStream bool) (action types.Action) {
	// A bug must never take traffic down with it: a panic lets the request
	// through and is logged, instead of trapping the VM. returned: the
	// function returned (no panic), so recover, a call, is not needed.
	returned := false
	defer func() {
		if returned {
			return
		}
		if r := recover(); r != nil {
			proxywasm.LogError(sprintf.Sprintf("sluice: internal error, request let through: %v", r))
			action = types.ActionContinue
		}
	}()
	p := h.plugin
	now := nowNanos()
	h.bodyless = endOfStream
	p.engine.SetHoldsFull(p.held.len() >= maxHeld)
	p.pairs.reset() // read again by the first header key (HeaderFields)
	if p.redirect.pending() {
		p.decide(h, now)
	} else {
		// decide with no redirect to look for, without its call.
		h.verdict = &h.own
		p.engine.DecideInto(h.verdict, h, now)
	}
	h.decided = true
	v := h.verdict
	h.sent = now + int64(v.Delay)
	if v.Err != nil && v.ErrRule != nil {
		if v.ErrRule.Global {
			p.logCallError(v, now)
		} else {
			proxywasm.LogWarn(sprintf.Sprintf("sluice: rule %s, client %s: %v (on_error: %s)", v.ErrRule.Name, v.Client, v.Err, onErrorWord(p.engine.Config())))
		}
	}
	switch v.Outcome {
	case engine.Call:
		h.pending = v.Pending
		h.pending.Ctx, h.shared = h, true
		action = actionHold
	case engine.Queue:
		p.queue.add(h)
		action = actionHold
	case engine.Reject:
		action = actionHold
		if err := p.reject(h, v, now); err != nil {
			proxywasm.LogError(sprintf.Sprintf("sluice: cannot send the rejection: %v", err))
			action = types.ActionContinue
		}
	case engine.Delay:
		action = actionHold
		if p.hold(h, v, v.Delay, now) { // else rejected (and told) instead
			p.tell(v)
		}
	default:
		p.tell(v)
		action = types.ActionContinue
	}
	returned = true
	return action
}

// decide decides h's request at now into h.verdict. Envoy's internal
// redirect of the request whose stream just ended (see OnHttpStreamDone)
// is decided as one (engine.DecideRedirect) and carries what that request
// left to settle.
func (p *pluginContext) decide(h *httpContext, now int64) {
	redirected := false
	if p.redirect.pending() {
		// The redirect carries x-envoy-original-url, which Envoy sets on a
		// redirect and strips from clients' requests.
		_, redirected = h.Header("x-envoy-original-url")
	}
	h.verdict = &h.own
	if !redirected {
		p.redirect.reset()
		p.engine.DecideInto(h.verdict, h, now)
		return
	}
	carried := p.redirect.take()
	*h.verdict = p.engine.DecideRedirect(h, now)
	if h.verdict.Outcome == engine.Allow || h.verdict.Outcome == engine.Delay {
		h.verdict.Carry(carried)
	}
}

// hold holds the current stream h (verdict v) for d, when a rate rule
// delays it. When this worker already holds as many requests as it can, it
// rejects it instead, in the name of the rule that would have held it, and
// gives back its slots; hold reports whether h is held.
func (p *pluginContext) hold(h *httpContext, v *engine.Verdict, d time.Duration, now int64) bool {
	if p.held.push(h.id, now+int64(d)) {
		h.sent = now + int64(d)
		return true
	}
	p.engine.Release(v.Slots, now)
	p.engine.Unhold(v, now)
	v.Slots = nil
	v.Outcome = engine.Reject
	v.RetryAfter = d
	if v.Delayer != nil {
		v.Report = v.Delayer
	}
	_ = p.reject(h, v, now)
	return false
}

func (h *httpContext) OnHttpResponseHeaders(_ int, endOfStream bool) types.Action {
	if h.passesResponse() {
		return types.ActionContinue
	}
	p := h.plugin
	h.responded = true
	if len(h.verdict.Slots) > 0 {
		h.sample(nowNanos(), true)
	}
	held := h.verdict.ChargesAfterResponse() && h.settle() // settle's first check, without its call
	// The headers say what holds once the request was let through: a
	// held or queued request's Reset without the time it waited.
	h.verdict.Forwarded(h.sent)
	// The last response's headers are sent again while what they say is
	// the same (limitHeaders).
	hs := &p.headers
	if k := admitKeyOf(h.verdict); !hs.built || !k.sameHeaders(&hs.key) {
		hs.set.Build(h.verdict, p.engine.Config().Headers, false)
		hs.key, hs.built = k, true
	}
	// The first three (legacy has three, the draft two) without a loop.
	ps, n := &hs.set.Pairs, hs.set.N
	if n > 0 {
		replaceResponseHeader(ps[0][0], ps[0][1])
	}
	if n > 1 {
		replaceResponseHeader(ps[1][0], ps[1][1])
	}
	if n > 2 {
		replaceResponseHeader(ps[2][0], ps[2][1])
	}
	for i := 3; i < n; i++ {
		replaceResponseHeader(ps[i][0], ps[i][1])
	}
	if endOfStream {
		h.responseDone()
	}
	if held {
		// The client learns of this response only once the service has
		// counted its charge (engine.SettleHeld).
		return actionHold
	}
	return types.ActionContinue
}

// responseDone gives back the concurrency slots of a request whose upstream
// response ended with its headers (no body): the backend's work is done.
// A response with a body gives them back at the stream's end
// (OnHttpStreamDone, as for a stream that ends without a response): the
// module exports no response body callback, which Envoy would make for
// every chunk of every response (dispatch_wasip1.go). The slots are
// released once.
func (h *httpContext) responseDone() {
	if !h.decided || len(h.verdict.Slots) == 0 || h.verdict.Outcome == engine.Queue {
		return
	}
	// No hand-off to this worker's waiters here (see releaseSlots): they
	// get the slot at the next tick or stream end.
	h.releaseSlots(nowNanos(), false)
}

// releaseSlots gives back the slots h holds, exactly once (they are
// forgotten): from responseDone without hand-off, and from
// OnHttpStreamDone with handoff, which hands freed slots to this worker's
// waiters at once. The hand-off is only at the stream's end: in the
// `make demo` runs that also resumed other streams from a stream's request
// or response callbacks, 7-10 requests (buys with max_delay, even
// background requests) hung until the client's timeout, and none with the
// hand-off from the stream's end.
//
// Not with global rules: a waiter let go may call the rate-limit service,
// and a call made in the ending stream's callback is that stream's, for
// Envoy (which cancels it when the stream goes) and for the Go SDK (which
// drops its answer once the stream is gone): the waiter would wait out
// global.timeout and pass unasked (on_error). Their waiters get the slot
// at the next tick, on the root's behalf: at most 5 ms later, as a queue
// needs max_delay, which sets the tick to throttleTickMS.
func (h *httpContext) releaseSlots(now int64, handoff bool) {
	p := h.plugin
	p.engine.Release(h.verdict.Slots, now)
	h.verdict.Slots = nil
	if handoff && p.rls == nil && p.queue.any() {
		// The freed slot may be for a waiter of this worker: hand it over
		// now rather than at the next tick, which comes late when the
		// worker is busy (the resume takes effect after this callback, as
		// from a tick).
		p.pollQueues(now)
	}
}

// OnHttpStreamDone runs for every stream the plugin saw, whatever ended it
// (response done, reset, client gone, a local reply of another filter), in
// the stream's one end callback (streamend_wasip1.go):
// concurrency slots not given back at the response's end are given back
// here.
func (h *httpContext) OnHttpStreamDone() {
	h.gone = true
	if h.pending != nil {
		h.plugin.engine.CancelPending(h.pending, nowNanos())
		h.pending = nil
	}
	if h.decided {
		if v := h.verdict; len(v.Slots) == 0 && (v.Outcome == engine.Reject || v.Outcome == engine.Allow && h.responded) {
			// All end does for a rejection, or for a forwarded request
			// whose response came through (no internal redirect).
			h.plugin.redirect.reset()
		} else {
			h.end()
		}
		// Nothing refers to the verdict any more: the held queue and the
		// waiters know the stream by its id, a pending call has its own.
		// It is cleared with the context (streamPool.put).
		h.decided = false
		h.verdict = nil
	}
	if !h.shared {
		// The SDK calls nothing of a stream after this callback, and the
		// plugin knows it by its id (the held queue, the waiters).
		h.plugin.pools.streams.put(h)
	}
}

// end gives back what the decided stream h still holds.
func (h *httpContext) end() {
	p := h.plugin
	forwarded := h.verdict.Outcome == engine.Allow
	switch h.verdict.Outcome {
	case engine.Delay:
		if p.held.remove(h.id) {
			// Left before its release: its reservation is given back.
			p.engine.Unhold(h.verdict, nowNanos())
		} else {
			forwarded = true
		}
	case engine.Queue:
		p.queue.drop(h.id)
		p.engine.Abandon(h.id, nowNanos())
		return
	}
	// Envoy follows an upstream's redirect itself (internal_redirect_policy):
	// the stream ends without a response, and the filter chain runs at once,
	// on this worker, for the new request, the same request of the client,
	// charged here already (it is decided without a charge).
	if forwarded && !h.responded && string(getCodeDetails()) == "internal_redirect" {
		p.redirect.set(p.engine.Redirecting(h.verdict))
	} else {
		p.redirect.reset()
	}
	if len(h.verdict.Slots) > 0 {
		now := nowNanos()
		h.sample(now, false)
		h.releaseSlots(now, true)
	}
}

// StreamID implements engine.StreamRequest.
func (h *httpContext) StreamID() uint32 { return h.id }

// Header implements engine.Request.
func (h *httpContext) Header(name string) (string, bool) {
	v, err := proxywasm.GetHttpRequestHeader(name)
	return v, err == nil
}

// HeaderFields implements engine.FieldsRequest, for rules keyed by a
// header: proxy_get_header_map_value returns only the first of several
// fields of one name, so the whole request header map is read instead, once
// per request (every header-keyed rule of the decision scans the same copy),
// and only when a rule keys on a header. That one call replaces the
// per-rule reads of the keyed headers.
func (h *httpContext) HeaderFields(name string) (string, int) {
	return h.plugin.pairs.fields(name)
}

// SourceAddress (engine.Request) is in hostcall_wasip1.go: the host call
// in the method itself, a call less per request.

// RouteName implements engine.RouteRequest: read only when some rule
// matches on Envoy routes, once per request.
func (h *httpContext) RouteName() string {
	b := getRouteName()
	if len(b) == 0 {
		return ""
	}
	// A view, as SourceAddress's: matching only compares it.
	return unsafe.String(&b[0], len(b))
}

// contextIDSalt distinguishes workers started in the same nanosecond.
func contextIDSalt() int64 {
	var b [8]byte
	_ = engine.ReadRandom(b[:])
	return int64(binary.LittleEndian.Uint64(b[:]))
}

func onErrorWord(c *config.Config) string {
	if c.OnErrorDeny {
		return "deny"
	}
	return "allow"
}

// sharedData is engine.Store over proxy-wasm shared data. Its methods take
// a pointer: through an interface holding the (empty) value, a value
// method is called by a generated wrapper, one more call in the module per
// shared-data operation.
type sharedData struct{}

func (*sharedData) Get(key string) ([]byte, uint32, bool, error) {
	v, cas, err := proxywasm.GetSharedData(key)
	if errors.Is(err, types.ErrorStatusNotFound) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, err
	}
	return v, cas, true, nil
}
