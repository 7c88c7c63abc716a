package engine

import (
	"time"

	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/plugin/engine/flight"
	"github.com/sluicehq/sluice/plugin/engine/global"
	"github.com/sluicehq/sluice/plugin/engine/local"
	"github.com/sluicehq/sluice/plugin/engine/match"
	"github.com/sluicehq/sluice/plugin/internal/ipaddr"
	"github.com/sluicehq/sluice/shared/limit"
)

// Request gives the engine what it needs of one HTTP request: its headers
// and Envoy's source.address (match.Request, where the methods are
// described). The plugin implements it with proxy-wasm host calls, which
// cost microseconds each, so the engine asks only for what the matching
// rules use, once.
type Request = match.Request

// FieldsRequest is a Request that can tell how many fields of one name the
// request has. A rule keyed by a header needs it: Envoy's
// proxy_get_header_map_value returns only the first field of a header sent
// more than once (and forwards them all), so a client that sends
// `x-api-key: <random>` before its real key would be keyed by the random
// value, a fresh budget per request, while an upstream that reads the last
// field, or all of them, takes the real key. The plugin implements it
// (one read of the whole header map per request, only for configurations
// with a header key); a Request without it has one field per name.
type FieldsRequest interface {
	Request
	// HeaderFields returns the first value of header name (lower case) and
	// how many fields of that name the request has: 0, 1, or 2 for two or
	// more. first is valid for the rest of the decision.
	HeaderFields(name string) (first string, n int)
}

// Outcome is what happens to a request.
type Outcome uint8

const (
	Allow  Outcome = iota // forward now
	Delay                 // hold for Verdict.Delay, then forward
	Reject                // answer with the configured status
	// Call: the request waits for a call to the rate-limit service of a
	// global rule (pause it); the engine decides it later through the
	// Decided function given to SetGlobal. Verdict.Pending identifies it.
	Call
	Queue // wait in a concurrency rule's queue: Poll decides later
)

// StreamRequest is a Request that knows its stream: a request that waits in
// a concurrency queue is identified by it in Poll's events.
type StreamRequest interface {
	Request
	StreamID() uint32
}

// Verdict is the engine's decision about one request, with the numbers the
// response headers report.
type Verdict struct {
	Outcome Outcome
	// Delay is how long to hold the request (Outcome Delay).
	Delay time.Duration
	// Report is the rule whose limit the headers describe: the rejecting
	// rule, or for an admitted request the most constrained matching rule.
	// Nil: no rule matched (or state was unavailable), no headers.
	Report     *config.Rule
	Remaining  int64
	Reset      time.Duration
	RetryAfter time.Duration
	// measured is when Reset was measured (ns), for a Report whose quota
	// comes back with time (a rate rule, local or global); 0 for a
	// concurrency rule, whose Reset estimates a hold and does not count
	// down. Forwarded uses it.
	measured int64
	// Violated lists the rules (config order, the first maxViolated) that
	// refused the request (Outcome Reject): the one that rejected it and
	// those that would have too. The first is the rule that refused it.
	Violated violatedSet
	// Delayer is the rule that held the request (a max_delay, or a
	// concurrency queue it waited in).
	Delayer *config.Rule
	// Shadow is a shadow rule that would have rejected the request.
	Shadow           *config.Rule
	ShadowRetryAfter time.Duration
	// Exempt: the client is in exempt_cidrs.
	Exempt bool
	// Err is set when shared data failed and on_error decided; ErrRule says
	// for which rule.
	Err     error
	ErrRule *config.Rule
	// Client is the client address the rules keyed on (zero if none did).
	Client ipaddr.Addr
	// Pending is the waiting request (Outcome Call).
	Pending *Pending
	// Slots are the concurrency slots the request holds: Release them when
	// its stream ends.
	Slots []SlotRef
	// ReportLimit is the limit of an adaptive concurrency Report, as
	// learnt when the request was decided.
	ReportLimit int64
	// Class is the request's priority class in the first matching rule
	// with classes ("" when none has).
	Class string
	// post are the rules that charge the request once the upstream's
	// response arrives (cost.go: Settle).
	post postList
	// held are the charges of a request held by a rate rule (Outcome
	// Delay), given back if it leaves before its release (Unhold).
	held []charge
}

// RuleStats counts the decisions of one rule.
type RuleStats struct {
	Allowed, Rejected, Delayed, ShadowRejected uint64
	// WaitNS is the total time requests waited in a concurrency rule's
	// queue (they count as Delayed once admitted).
	WaitNS uint64
	// Charged is the units charged to admitted requests (one each without
	// a cost; with a cost, what the request header or the response said).
	Charged uint64
}

// Stats counts what the engine decided since it started.
type Stats struct {
	Rules          []RuleStats // indexed like Config.Rules
	Exempt         uint64
	OnErrorAllowed uint64
	OnErrorDenied  uint64
	// ReleaseErrors counts concurrency slots that could not be given back
	// (shared data failed); their lease drops them within 2 epochs.
	ReleaseErrors uint64
	// GaugeErrors and LateWindows: the adaptive rules' learning.
	flight.AdaptiveStats
	// ChargeErrors counts charges after the response that were lost
	// (shared data failed, or a global rule's call carrying a charge
	// failed).
	ChargeErrors uint64
	// Global counts what the global rules did.
	Global GlobalStats
}

// charge is a rule that admitted the request being decided, with the
// client's fingerprint under it (local.Charge: for a refund if a later
// rule rejects).
type charge = local.Charge

// Engine decides requests for one worker. Not safe for concurrent use.
type Engine struct {
	cfg *config.Config
	// matcher finds the rules that apply to a request (package match
	// owns its buffers and the matched rules).
	matcher match.Matcher
	table   *Table
	Stats   Stats
	// Each kind of rule keeps its own working state: the local and the
	// in-flight rules in packages of their own, the global rules in a group
	// whose methods are in global*.go and cost.go.
	// local: what the request's rules charged, the key being built and
	// its fingerprint, whether the worker may hold a request, the
	// reservations kept (package local).
	local       local.Rules
	globalRules // calls to the rate-limit service, leases (global.go, cost.go)
	// flight: the in-flight rules (concurrency, adaptive, classes): the
	// slots this worker holds, learnt limits, class values (package
	// flight).
	flight flight.Rules
	// Now is the engine's clock (nanoseconds since the epoch), given to
	// New: the clock of answers to calls and of the tick's work. Decide
	// and the other entry points take their time as an argument.
	Now Clock
	// tracer, when set, is told each step of a request's route (trace.go).
	tracer Tracer
}

// Clock returns the time in nanoseconds since the epoch. The engine never
// reads the time itself (lint refuses time.Now here): the plugin passes
// the host's clock, and tests a clock they control, so that every decision
// is a function of the times it was given.
type Clock func() int64

func (e *Engine) now() int64 { return e.Now() }

// New returns an engine for cfg over store, with clock now. seed keys the
// fingerprint hash; every worker must use the same seed (the plugin keeps
// it in shared data), and a random one keeps clients from choosing which
// bucket they land in.
func New(cfg *config.Config, store Store, seed uint64, now Clock) *Engine {
	if now == nil {
		panic("engine.New: nil clock")
	}
	e := &Engine{
		Now:     now,
		matcher: match.New(cfg),
		cfg:     cfg,
		table:   NewTable(store, Regions(cfg)),
		Stats:   Stats{Rules: make([]RuleStats, len(cfg.Rules))},
		globalRules: globalRules{
			calls: global.NewCalls(),
			debts: global.NewDebts(len(cfg.Rules), costRules(cfg)),
			costs: global.NewCosts(len(cfg.Rules), store),
		},
	}
	e.local = local.New(cfg, e.table, seed)
	e.flight = flight.NewRules(cfg, e.table, SlotsPerBucket, &e.Stats.AdaptiveStats)
	if cfg.Pool > 0 {
		e.table.EnablePool(cfg.Pool)
	}
	e.table.AdoptLayouts(now())
	return e
}

// costRules counts the global rules with a cost: each has its part of
// global.MaxDebts.
func costRules(cfg *config.Config) int {
	n := 0
	for i := range cfg.Rules {
		if r := &cfg.Rules[i]; r.Global && r.Cost.Set() {
			n++
		}
	}
	return n
}

// Regions returns the state table's regions for the rules of cfg: one per
// rule, of the rule's share of max_keys, in rule order; then one per
// adaptive concurrency rule for its Gauges (a key of such a rule keeps two
// states, slots and Gauge: the rule's share is split between them).
func Regions(cfg *config.Config) []Region {
	rs := make([]Region, len(cfg.Rules))
	for i := range cfg.Rules {
		r := &cfg.Rules[i]
		rs[i] = Region{ID: r.ID, Share: r.Share, Life: stateLife(r.Limit.Window(), r.Limit.Limit(), r.Limit.Burst(), r.MaxDelay), Spill: cfg.Pool > 0 && r.MaxKeys == 0}
		if IsAdaptive(r) {
			rs[i].Share -= r.Share / 2
			rs = append(rs, Region{ID: r.ID ^ flight.GaugeSalt, Share: r.Share / 2, Life: rs[i].Life})
		}
	}
	return rs
}

// Config returns the engine's configuration.
func (e *Engine) Config() *config.Config { return e.cfg }

// Table returns the engine's state table.
func (e *Engine) Table() *Table { return e.table }

// requestInfo caches what one decision read from the request.
type requestInfo struct {
	req Request
	// t is what the rules match on: the clean path, its folded form (when
	// some rule ignores case), the method and the Envoy route (when some
	// rule needs them).
	t config.Target
	// redirected: the request is an internal redirect (DecideRedirect).
	redirected bool
	// own is the client's address (after X-Forwarded-For), which
	// exempt_cidrs are matched against; client is own grouped by
	// ipv6_prefix, the identity rules key on.
	own      ipaddr.Addr
	client   ipaddr.Addr
	haveAddr bool
}

// keyHeader returns the value a rule keyed by header name keys the request
// on, and false when there is none: the header is absent, empty, or sent
// more than once. A repeated header is no key at all, not its first, last or
// joined value: the upstream may read any of these, and whichever one the
// key took, a client could rotate another (with the joined value, the one
// the upstream ignores) and buy a fresh budget per request. Falling back to
// the client IP, as for a request without the header, closes that.
func (ri *requestInfo) keyHeader(name string) (string, bool) {
	if fr, ok := ri.req.(FieldsRequest); ok {
		v, n := fr.HeaderFields(name)
		return v, n == 1 && v != ""
	}
	v, ok := ri.req.Header(name)
	return v, ok && v != ""
}

// clientAddr returns the identity rules key the client by: its address
// grouped by ipv6_prefix.
func (ri *requestInfo) clientAddr(cfg *config.Config) ipaddr.Addr {
	ri.readAddr(cfg)
	return ri.client
}

// ownAddr returns the client's own address, read once per request.
func (ri *requestInfo) ownAddr(cfg *config.Config) ipaddr.Addr {
	ri.readAddr(cfg)
	return ri.own
}

// readAddr reads the client's own address into ri.own and its identity
// into ri.client, once per request. (No result: an address returned is
// 40 bytes copied.)
func (ri *requestInfo) readAddr(cfg *config.Config) {
	if ri.haveAddr {
		return
	}
	ri.haveAddr = true
	// xff_trusted_hops counts X-Forwarded-For exactly as it reaches the
	// filter, the entry Envoy appends with use_remote_address: true
	// included. The filter cannot tell whether Envoy appended an entry
	// (without use_remote_address, source.address is itself read from the
	// header and so equals its last entry), and skipping an entry it did
	// not append would hand the key to whatever the client wrote: counting
	// every entry errs, when misconfigured, towards a proxy's address.
	a, ok := ipaddr.Addr{}, false
	if n := cfg.ClientIP.XFFTrustedHops; n > 0 {
		if xff, found := ri.req.Header("x-forwarded-for"); found {
			a, ok = XFFFromRight(xff, n)
		}
	}
	if !ok {
		s := ri.req.SourceAddress()
		// ParseHostPort's first case (IPv4, with a port or not), without
		// its call: most clients.
		if a4, n, ok4 := ipaddr.ParseAddr4Prefix(s); ok4 && len(s) <= 64 && (n == len(s) || s[n] == ':' && noColon(s[n+1:])) {
			ri.own, ri.client = a4, a4 // an IPv4 address is its own identity
			return
		}
		a, ok = ParseHostPort(s)
	}
	// An unparsable address leaves the zero Addr: such clients share one
	// identity rather than escaping the limit.
	if ok {
		ri.own, ri.client = a, a
		if !a.Is4() {
			ri.client = GroupAddr(a, cfg.ClientIP.IPv6Prefix)
		}
	}
}

// Decide evaluates every rule that matches req at now (nanoseconds).
// Enforced rules are charged in order; if one rejects, the charges already
// made are refunded, so a rejected request costs no rule anything, and the
// remaining rules are only read to report the longest Retry-After.
//
// The phases: match the rules, exempt clients, charge the local rate
// rules, then take concurrency slots and ask the global rules (each only
// for a request every rule before it admitted), then admit or refuse.
func (e *Engine) Decide(req Request, now int64) Verdict {
	var v Verdict
	e.decide(&v, req, now, false)
	return v
}

// DecideInto is Decide writing the verdict into *v (the plugin's pooled
// verdict), which must be the zero Verdict (new, or cleared): a Verdict is
// about 480 bytes, which a return by value copies once more per request,
// and clearing it again another time.
func (e *Engine) DecideInto(v *Verdict, req Request, now int64) { e.decide(v, req, now, false) }

// DecideRedirect decides req, Envoy's internal redirect of a request this
// worker admitted (the plugin knows it from the stream that just ended),
// at now: its local rules charged at admission and its global rules were
// charged for the first request, so they decide it without charging it
// again (they give its headers their numbers).
func (e *Engine) DecideRedirect(req Request, now int64) Verdict {
	var v Verdict
	e.decide(&v, req, now, true)
	return v
}

// decide decides req into v, the zero Verdict.
func (e *Engine) decide(v *Verdict, req Request, now int64, redirected bool) {
	v.measured = now // the rate rules' numbers are now's
	ri := requestInfo{req: req}
	e.matchRules(&ri)
	ri.redirected = redirected
	if len(e.matcher.Matched()) == 0 {
		return
	}
	e.traceMatched()
	if len(e.cfg.Exempt) > 0 && e.exempt(&ri) {
		e.trace(StepExempt, -1)
		v.Exempt = true
		return
	}
	e.local.Begin()
	e.asked.Begin()
	e.flight.ClearPending()
	rejected := e.chargeLocal(v, &ri, now)
	if rejected < 0 && len(e.flight.Pending()) > 0 {
		var id uint32
		if sr, ok := req.(StreamRequest); ok {
			id = sr.StreamID()
		}
		v.Client = ri.client
		rejected = e.acquire(id, v, e.flight.Pending(), carried{charges: e.local.Charged(), globals: e.asked.Refs(), keys: e.asked.Keys(), since: now}, now)
		if v.Outcome == Queue {
			return
		}
	}
	if rejected < 0 && len(e.asked.Refs()) > 0 {
		v.Client = ri.client
		*v = e.askGlobal(*v, carried{charges: e.local.Charged(), globals: e.asked.Refs(), keys: e.asked.Keys(), since: now}, now, true)
		return
	}
	if rejected < 0 {
		// Admitted (or delayed): counted in its rules' stats.
		if c := e.local.Charged(); len(c) == 1 && v.Delay == 0 && len(v.Slots) == 0 && v.post.n == 0 {
			e.countOne(&c[0])
		} else {
			e.countAdmitted(v, c)
		}
		if v.Delay > 0 {
			v.Outcome = Delay
		}
		v.Client = ri.client
		if len(v.Slots) > 0 { // samples are the slots' (a call on wasm)
			e.admitSamples(v, now)
		}
		return
	}
	e.refused(v, &ri, rejected)
	if len(e.local.Charged()) > 0 || len(e.matcher.Matched()) > 1 {
		// Refunds, or rules after the one that refused: most refusals
		// have neither (a call less on wasm).
		e.refuse(v, &ri, rejected, now)
	}
}

// exempt reports (and counts) a client in exempt_cidrs. The client's own
// address decides, not its ipv6_prefix group: an exempt range narrower
// than the group exempts only the addresses inside it. A zone (fe80::1%eth0)
// does not matter: exempt_cidrs have none.
func (e *Engine) exempt(ri *requestInfo) bool {
	if len(e.cfg.Exempt) == 0 {
		return false
	}
	a := ri.ownAddr(e.cfg).WithZone("")
	for _, p := range e.cfg.Exempt {
		if p.Contains(a) {
			e.Stats.Exempt++
			return true
		}
	}
	return false
}

// chargeLocal charges the matched local rate rules in order and sets
// aside the concurrency (flight.Rules.AddPending) and global (e.asked) rules for
// later phases. It returns the index of the rule that rejected, or -1.
func (e *Engine) chargeLocal(v *Verdict, ri *requestInfo, now int64) int {
	for _, i := range e.matcher.Matched() {
		r := &e.cfg.Rules[i]
		fp := e.fingerprint(r, ri)
		if r.Global || IsConcurrency(r) {
			e.setAside(v, r, i, fp, ri, now)
			continue
		}
		var d limit.Decision
		var n int64
		var err error
		if c := &r.Cost; c.RequestHeader == "" && !c.AfterResponse() && !ri.redirected {
			// decideLocal's most common case, without its call: one unit
			// charged at admission (Table.update, not Update: a call less).
			n = 1
			d, _, err = e.table.update(Charge, fp, i, &r.Limit, now, 1, e.local.MaxDelay(r), 0)
			if err == nil && d.Allowed && d.Delay == 0 && !r.Shadow && v.Report == nil {
				// recordLocal's most common case (the first rule to
				// admit, at once), without its call.
				e.trace(StepLocal, i)
				e.local.Add(charge{Rule: i, FP: fp, N: 1, Release: now})
				v.Report, v.Remaining, v.Reset = r, d.Remaining, d.Reset
				continue
			}
		} else {
			d, n, err = e.decideLocal(v, r, i, fp, ri, now)
		}
		if err != nil {
			v.Err, v.ErrRule = err, r
			if e.cfg.OnErrorDeny && !r.Shadow {
				e.trace(StepLocalRefuse, i)
				e.Stats.OnErrorDenied++
				v.violate(i)
				v.Report, v.Remaining, v.Reset, v.RetryAfter = r, 0, time.Second, time.Second
				return i
			}
			e.Stats.OnErrorAllowed++
			continue
		}
		if e.recordLocal(v, r, i, fp, &d, n, now) {
			return i
		}
	}
	return -1
}

// setAside sets matched rule r (index i, client fp), a global or a
// concurrency rule, aside for the phases after the local rate rules.
func (e *Engine) setAside(v *Verdict, r *config.Rule, i int, fp uint64, ri *requestInfo, now int64) {
	if r.Global {
		if ri.redirected {
			// The request this redirect follows took its hit (the
			// service counted it): not asked again, only reported.
			e.reportRedirected(v, r, i, fp, now)
			return
		}
		// Global rules are decided after every local rule admitted the
		// request: a call is made only for requests that can pass.
		// The client's key bytes are kept (in a reused buffer) for the
		// descriptor of a call; most requests are served from the lease
		// and never need it.
		off := e.asked.Key(e.local.Key())
		e.asked.Add(e.newGlobalRef(i, fp, off, len(e.local.Key()), e.requestCost(r, ri)))
		return
	}
	// Slots are taken after every rate rule has admitted the request: a
	// request rejected by a rate never holds one.
	p := pendingConc{Rule: i, FP: fp, Class: classOf(r, ri)}
	if len(r.Classes) > 0 && v.Class == "" {
		v.Class = r.ClassName(int(p.Class))
	}
	e.flight.AddPending(p)
}

// recordLocal takes local rule r's decision d (n units charged) into v and
// the stats; it reports whether the rule rejects the request. (d by
// pointer: a Decision is 40 bytes, which an argument copies.)
func (e *Engine) recordLocal(v *Verdict, r *config.Rule, i int, fp uint64, d *limit.Decision, n int64, now int64) bool {
	st := &e.Stats.Rules[i]
	if r.Shadow {
		if !d.Allowed {
			st.ShadowRejected++
			if v.Shadow == nil {
				v.Shadow, v.ShadowRetryAfter = r, d.RetryAfter
			}
		} else if n > 0 {
			e.local.Add(charge{Rule: i, FP: fp, N: n, Release: now + int64(d.Delay)})
		}
		return false
	}
	if !d.Allowed {
		e.trace(StepLocalRefuse, i)
		st.Rejected++
		if s := &v.Violated; s.n == 0 && uint(i) <= 0xffff {
			s.idx[0], s.n = uint16(i), 1 // violate's first case, without its call
		} else {
			v.violate(i)
		}
		v.Report, v.Remaining, v.Reset, v.RetryAfter = r, 0, d.Reset, d.RetryAfter
		return true
	}
	e.trace(StepLocal, i)
	if n > 0 {
		e.local.Add(charge{Rule: i, FP: fp, N: n, Release: now + int64(d.Delay)})
	}
	if d.Delay > v.Delay {
		v.Delay, v.Delayer = d.Delay, r
	}
	if v.Report == nil || d.Remaining < v.Remaining || (d.Remaining == v.Remaining && d.Reset > v.Reset) {
		v.Report, v.Remaining, v.Reset = r, d.Remaining, d.Reset
	}
	return false
}

// askGlobal decides the global rules of a request that every local rule
// (and concurrency slot) admitted, with what it carries (c): from the
// leases, or with a call it may wait for (v.Pending). inStream says the
// request's own stream is the current context (Decide), not the tick (a
// request let in from a concurrency queue).
func (e *Engine) askGlobal(v Verdict, c carried, now int64, inStream bool) Verdict {
	p := &e.scratch
	*p = Pending{verdict: v, charged: c.charges, globals: c.globals, keys: c.keys, Arrival: c.since, Deadline: now + int64(e.cfg.Global.Timeout)}
	e.calls.Deciding(inStream)
	waiting := e.decideGlobal(p, now)
	e.calls.Deciding(false)
	v = p.verdict
	if inStream {
		e.local.Reuse(p.charged) // the scratch, as it may have grown
	}
	if waiting {
		v.Pending = p.persisted
	}
	return v
}

// countAdmitted counts the request of v, admitted (or delayed by a rate
// rule: v.Delay) with the charges made, in the stats of its rules: at
// once, or after it waited in a concurrency rule's queue (resume).
// A rule charged after the response (a global rule's deposit is in
// charged) counts what it charges when it settles. A shadow rule counts
// the requests it would have admitted as allowed (it never holds one), so
// that its shadow_rejected has something to be compared with.
func (e *Engine) countAdmitted(v *Verdict, charged []charge) {
	e.trace(StepAdmit, -1)
	if len(v.Slots) > 0 {
		e.countSlots(v)
	}
	if v.Delay > 0 {
		v.held = append(v.held[:0:0], charged...)
	}
	for i := range charged {
		c := &charged[i] // not a 32-byte copy a turn
		r := &e.cfg.Rules[c.Rule]
		if !r.Cost.AfterResponse() {
			e.Stats.Rules[c.Rule].Charged += uint64(c.N)
		}
		if v.Delay > 0 && !r.Shadow {
			e.Stats.Rules[c.Rule].Delayed++
		} else {
			e.Stats.Rules[c.Rule].Allowed++
		}
	}
	if v.post.n > 0 { // countPost's own check, without its call
		e.countPost(v)
	}
}

// countOne is countAdmitted for a request admitted at once with one
// charge and nothing else to count (most requests), small enough to be
// inlined: countAdmitted's call and loop cost a few hundred instructions a
// request on wasm.
func (e *Engine) countOne(c *charge) {
	e.trace(StepAdmit, -1)
	st := &e.Stats.Rules[c.Rule]
	if !e.cfg.Rules[c.Rule].Cost.AfterResponse() {
		st.Charged += uint64(c.N)
	}
	st.Allowed++
}

// Unhold gives back what a request held by a rate rule (v, Outcome Delay)
// was charged, when it will not be forwarded: its client left before its
// release, or the worker could not hold it. A held request's charge is a
// reservation of the quota at its release time; one nobody will use is
// given back, as a concurrency queue's waiter's charges are when it
// leaves (Abandon), so that the client's next request is not held behind
// it. A reservation that requests were held behind since is given back
// only once they are (RefundHeld): given back at once, it let the next
// request take the last one's turn, and the two were released together.
// Its stats stay: the request was delayed. Unhold is a no-op for any
// other verdict, and the second time.
func (e *Engine) Unhold(v *Verdict, now int64) {
	if v.Outcome != Delay {
		return
	}
	e.refundCharges(v.held, now)
	v.held = nil
}

// Forwarded makes v's numbers those at at (ns), when the request was let
// through to the upstream (after a hold or a queue wait), for its
// response's headers: a rate rule's Reset counts down from when it was
// measured, as the quota comes back with time; Remaining stays what the
// request left (a held request was held until its reservation came due,
// so the delaying rule has as much left at release as it had at arrival).
// A Reset measured later than at (a charge after the response) is kept.
func (v *Verdict) Forwarded(at int64) {
	if v.Report == nil || v.measured == 0 || at <= v.measured {
		return
	}
	v.Reset = max(0, v.Reset-time.Duration(at-v.measured))
	v.measured = at
}

// decideLocal charges local rule r (index i) for client fp: the request's
// cost at admission, or, for a rule charged after the response, nothing
// yet (n = 0) if the client's balance is positive.
func (e *Engine) decideLocal(v *Verdict, r *config.Rule, i int, fp uint64, ri *requestInfo, now int64) (limit.Decision, int64, error) {
	if r.Cost.AfterResponse() {
		d, err := e.admitPost(v, i, fp, now)
		return d, 0, err
	}
	if ri.redirected {
		// Admitted, and charged, as the request it is the redirect of: let
		// through at no cost, never held or refused again; the peek only
		// gives its headers their numbers.
		d, _, err := e.table.Update(Peek, fp, i, &r.Limit, now, 0, 0)
		d.Allowed, d.Delay, d.RetryAfter = true, 0, 0
		return d, 0, err
	}
	n := int64(1)
	if r.Cost.RequestHeader != "" { // requestCost's own check, without its call
		n = e.requestCost(r, ri)
	}
	// Table.update, not Update: one call less per request.
	d, _, err := e.table.update(Charge, fp, i, &r.Limit, now, n, e.local.MaxDelay(r), 0)
	return d, n, err
}

// SetHoldsFull says whether the worker holds as many requests as it can
// (the plugin sets it before each decision): a rate rule that would hold a
// request (max_delay) refuses it instead.
func (e *Engine) SetHoldsFull(full bool) { e.local.SetHoldsFull(full) }
