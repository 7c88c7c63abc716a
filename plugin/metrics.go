package main

import (
	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/plugin/engine"
)

// metrics publishes the engine's counters as Envoy stats. Counting happens
// in Go on the request path (no host call); flush adds the increments since
// the last flush, about once a second from the tick.
//
// Names: Envoy shows them as wasmcustom.<name> in /stats. The per-rule
// counters are sluice.rule.<rule>.<outcome>; with the stats_tags rule of the
// shipped envoy.yaml, /stats/prometheus has sluice_rule_<outcome> (Envoy
// exports the wasmcustom namespace without its envoy_wasmcustom_ prefix)
// with a sluice_rule label.
type metrics struct {
	rules     []ruleMetrics
	last      engine.Stats
	lastTable engine.TableStats
	// owner identifies this worker in the record of workers (gauges.go).
	owner   uint64
	workers workerTable
	global  struct {
		exempt, onErrorAllowed, onErrorDenied                 counter
		casRetries, casExhausted, overflow, full, storeErrors counter
		releaseErrors, chargeErrors                           counter
		held, activeStates, slots, waiting, circuitOpen       gauge
	}
	// Global rules (only defined when a rule is global).
	fleet     *fleetMetrics
	lastFleet engine.GlobalStats
}

// fleetMetrics are the counters of global rules: sluice.global.<name>.
type fleetMetrics struct {
	calls, callFailures, overLimit, leaseAdmits, waited, shortCircuited, expired, probes, prefetches counter
	chargeCalls, lostAnswers, granted, heldResponses                                                 counter
}

type ruleMetrics struct {
	allowed, rejected, delayed, shadowRejected counter
	charged                                    counter // rules with a cost only
	waitMS                                     counter // concurrency rules only
	holdMS                                     gauge   // concurrency rules only
	inFlight, queued                           gauge   // concurrency rules only
	limit, latencyUS                           gauge   // adaptive concurrency rules only
	waitNS                                     uint64  // published so far, in ns
	// The rule's part of the state table: decisions on its overflow state
	// (this worker's, published so far in overflowLast; overflowSeen: some
	// since the last tick's look), and its active states (the census).
	overflow     counter
	activeStates gauge
	overflowLast uint64
	overflowSeen bool
	// off: the rule has no metrics of its own (rule_metrics); its
	// counters are the shared sluice.rules_other.* ones.
	off bool
	// classes are the metrics of a rule's priority classes, the default
	// one last (rules with classes only).
	classes []classMetrics
}

// classMetrics are one priority class's: sluice.class.<rule>.<class>.<metric>.
type classMetrics struct {
	_                [0]func() // not comparable: no equality function in the module
	inFlight, queued gauge
	refused          counter
	refusedLast      uint64
}

// counter and gauge are Envoy metrics by id (defined in hostcall_*.go).
type (
	counter uint32
	gauge   uint32
)

func newMetrics(cfg *config.Config) *metrics {
	m := &metrics{last: engine.Stats{Rules: make([]engine.RuleStats, len(cfg.Rules))}, rules: make([]ruleMetrics, 0, len(cfg.Rules))}
	var other ruleMetrics
	if cfg.OtherMetrics {
		other = newOtherMetrics()
	}
	for i := range cfg.Rules {
		if cfg.Rules[i].NoMetrics {
			m.rules = append(m.rules, other)
			continue
		}
		m.rules = append(m.rules, newRuleMetrics(&cfg.Rules[i]))
	}
	m.defineProcess()
	if cfg.HasGlobal() {
		m.fleet = newFleetMetrics()
	}
	return m
}

// newRuleMetrics defines the metrics of rule r: sluice.rule.<name>.<metric>,
// the outcomes of every rule and those only some kinds of rule have.
func newRuleMetrics(r *config.Rule) ruleMetrics {
	p := "sluice.rule." + r.Name + "."
	rm := ruleMetrics{
		allowed:        defineCounter(p + "allowed"),
		rejected:       defineCounter(p + "rejected"),
		delayed:        defineCounter(p + "delayed"),
		shadowRejected: defineCounter(p + "shadow_rejected"),
		overflow:       defineCounter(p + "overflow"),
		activeStates:   defineGauge(p + "active_states"),
	}
	if r.Cost.Set() {
		// Units charged: one per admitted request without a cost;
		// with one, what the request or its response said.
		rm.charged = defineCounter(p + "charged")
	}
	if engine.IsConcurrency(r) {
		// Total queue wait: wait_ms / delayed is the mean wait.
		rm.waitMS = defineCounter(p + "wait_ms")
		// The observed mean time a request holds a slot (what
		// Retry-After, Reset and the queue bound are estimated from),
		// as the last worker to publish saw it.
		rm.holdMS = defineGauge(p + "hold_ms")
		// Requests in flight and waiting in the queue, process-wide,
		// as the last decision of the publishing worker saw them.
		rm.inFlight = defineGauge(p + "in_flight")
		rm.queued = defineGauge(p + "queued")
	}
	for k := 0; k <= len(r.Classes) && len(r.Classes) > 0; k++ {
		// Requests of the class in flight and waiting, process-wide
		// (like in_flight), and the ones refused (full, or timed out in
		// the queue).
		cp := "sluice.class." + r.Name + "." + r.ClassName(k) + "."
		rm.classes = append(rm.classes, classMetrics{inFlight: defineGauge(cp + "in_flight"),
			queued: defineGauge(cp + "queued"), refused: defineCounter(cp + "refused")})
	}
	if engine.IsAdaptive(r) {
		// The learnt limit and the no-queue latency it is learnt from.
		rm.limit = defineGauge(p + "limit")
		rm.latencyUS = defineGauge(p + "latency_us")
	}
	return rm
}

// newOtherMetrics defines sluice.rules_other.<outcome>: the counters that
// the rules rule_metrics does not list share (each adds its own deltas to
// them). They have no gauges (off).
func newOtherMetrics() ruleMetrics {
	p := "sluice.rules_other."
	return ruleMetrics{
		allowed:        defineCounter(p + "allowed"),
		rejected:       defineCounter(p + "rejected"),
		delayed:        defineCounter(p + "delayed"),
		shadowRejected: defineCounter(p + "shadow_rejected"),
		overflow:       defineCounter(p + "overflow"),
		off:            true,
	}
}

// defineProcess defines the metrics that are not a rule's: sluice.<name>
// (global rules have theirs apart, in fleetMetrics, but for the gauge of
// open circuits).
func (m *metrics) defineProcess() {
	g := &m.global
	g.exempt = defineCounter("sluice.exempt")
	g.onErrorAllowed = defineCounter("sluice.on_error.allowed")
	g.onErrorDenied = defineCounter("sluice.on_error.denied")
	g.casRetries = defineCounter("sluice.cas.retries")
	g.casExhausted = defineCounter("sluice.cas.exhausted")
	g.overflow = defineCounter("sluice.table.overflow")
	g.full = defineCounter("sluice.table.full")
	g.storeErrors = defineCounter("sluice.shared_data.errors")
	g.held = defineGauge("sluice.held_requests")
	g.releaseErrors = defineCounter("sluice.concurrency.release_errors")
	g.chargeErrors = defineCounter("sluice.cost.charge_errors")
	g.slots = defineGauge("sluice.concurrency.slots_held")
	g.waiting = defineGauge("sluice.concurrency.waiting")
	g.activeStates = defineGauge("sluice.table.active_states")
	// Every configuration defines the gauge of open circuits, with global
	// rules or not: whichever worker of the vm_id publishes next takes a
	// vanished worker's open circuit out of it (gauges.go), also one whose
	// configuration has no global rule (a second filter's, or the one an
	// update brought).
	g.circuitOpen = defineGauge("sluice.global.circuit_open")
}

// defineLayoutWritesCounter defines the count of layout record writes
// (layoutsignal.go), which every VM defines on its first use.
func defineLayoutWritesCounter() (counter, bool) {
	return defineCounterChecked("sluice.table.layout_writes")
}

// newFleetMetrics defines the metrics of global rules (a configuration
// without one has none).
func newFleetMetrics() *fleetMetrics {
	f := &fleetMetrics{}
	f.calls = defineCounter("sluice.global.calls")
	f.callFailures = defineCounter("sluice.global.call_failures")
	f.overLimit = defineCounter("sluice.global.over_limit")
	f.leaseAdmits = defineCounter("sluice.global.lease_admits")
	f.waited = defineCounter("sluice.global.waited")
	f.shortCircuited = defineCounter("sluice.global.short_circuited")
	f.expired = defineCounter("sluice.global.expired")
	f.probes = defineCounter("sluice.global.probes")
	f.prefetches = defineCounter("sluice.global.prefetches")
	f.chargeCalls = defineCounter("sluice.global.charge_calls")
	f.lostAnswers = defineCounter("sluice.global.lost_answers")
	f.granted = defineCounter("sluice.global.granted")
	f.heldResponses = defineCounter("sluice.global.held_responses")
	return f
}

func addDelta(c counter, now uint64, last *uint64) {
	if now > *last {
		c.Increment(now - *last)
		*last = now
	}
}

// retire takes this worker's share out of the process-wide gauges (slots
// held, waiting, held requests, open circuits) when its plugin context
// ends (a configuration update drains it), at once rather than after
// workerStale. The caller flushes first.
func (m *metrics) retire() {
	m.publishWorker(workerCounts{}, true)
}

// publishWorker writes this worker's counts into the record of workers
// (remove: takes them out) and adds what changed to the process-wide
// gauges (gauges.go).
func (m *metrics) publishWorker(mine workerCounts, remove bool) {
	d, ok := m.workers.publish(&sharedData{}, m.owner, nowNanos(), mine, remove)
	if !ok {
		return
	}
	addGauge(m.global.slots, d[0])
	addGauge(m.global.waiting, d[1])
	addGauge(m.global.held, d[2])
	addGauge(m.global.circuitOpen, d[3])
}

// addGauge adds d to g (no host call for 0).
func addGauge(g gauge, d int64) {
	if d != 0 {
		g.Add(d)
	}
}

func (m *metrics) flush(e *engine.Engine, held int) {
	for i := range m.rules {
		m.flushRule(e, i)
	}
	addDelta(m.global.releaseErrors, e.Stats.ReleaseErrors, &m.last.ReleaseErrors)
	addDelta(m.global.chargeErrors, e.Stats.ChargeErrors, &m.last.ChargeErrors)
	g := &m.global
	addDelta(g.exempt, e.Stats.Exempt, &m.last.Exempt)
	addDelta(g.onErrorAllowed, e.Stats.OnErrorAllowed, &m.last.OnErrorAllowed)
	addDelta(g.onErrorDenied, e.Stats.OnErrorDenied, &m.last.OnErrorDenied)
	ts, lt := &e.Table().Stats, &m.lastTable
	addDelta(g.casRetries, ts.CASRetries, &lt.CASRetries)
	addDelta(g.casExhausted, ts.CASExhausted, &lt.CASExhausted)
	addDelta(g.overflow, ts.Overflow, &lt.Overflow)
	addDelta(g.full, ts.Full, &lt.Full)
	addDelta(g.storeErrors, ts.StoreErrors, &lt.StoreErrors)
	mine := workerCounts{e.HeldSlots(), int64(e.Waiting()), int64(held), 0}
	if m.fleet != nil {
		m.flushFleet(e)
		if e.CircuitOpen() {
			mine[3] = 1
		}
	}
	// Process-wide gauges: the sums over the live workers.
	m.publishWorker(mine, false)
}

// flushRule publishes rule i's counters (the increments since the last
// flush) and gauges.
func (m *metrics) flushRule(e *engine.Engine, i int) {
	cur, last := &e.Stats.Rules[i], &m.last.Rules[i]
	addDelta(m.rules[i].allowed, cur.Allowed, &last.Allowed)
	addDelta(m.rules[i].rejected, cur.Rejected, &last.Rejected)
	addDelta(m.rules[i].delayed, cur.Delayed, &last.Delayed)
	addDelta(m.rules[i].shadowRejected, cur.ShadowRejected, &last.ShadowRejected)
	if m.rules[i].charged != 0 {
		addDelta(m.rules[i].charged, cur.Charged, &last.Charged)
	}
	if rm := &m.rules[i]; rm.holdMS != 0 {
		if h := e.HoldEstimate(i).Milliseconds(); h > 0 && h != rm.holdMS.Value() {
			rm.holdMS.Add(h - rm.holdMS.Value())
		}
	}
	m.flushSlots(e, i)
	if rm := &m.rules[i]; rm.waitMS != 0 {
		if ms := (cur.WaitNS - rm.waitNS) / 1e6; ms > 0 {
			rm.waitMS.Increment(ms)
			rm.waitNS += ms * 1e6
		}
	}
}

// flushFleet publishes the counters of global rules (the increments since
// the last flush) and whether this worker's circuit is open.
func (m *metrics) flushFleet(e *engine.Engine) {
	f, cur, last := m.fleet, &e.Stats.Global, &m.lastFleet
	addDelta(f.calls, cur.Calls, &last.Calls)
	addDelta(f.callFailures, cur.CallFailures, &last.CallFailures)
	addDelta(f.overLimit, cur.OverLimit, &last.OverLimit)
	addDelta(f.leaseAdmits, cur.LeaseAdmits, &last.LeaseAdmits)
	addDelta(f.waited, cur.Waited, &last.Waited)
	addDelta(f.shortCircuited, cur.ShortCircuited, &last.ShortCircuited)
	addDelta(f.expired, cur.Expired, &last.Expired)
	addDelta(f.probes, cur.Probes, &last.Probes)
	addDelta(f.prefetches, cur.Prefetches, &last.Prefetches)
	addDelta(f.chargeCalls, cur.ChargeCalls, &last.ChargeCalls)
	addDelta(f.lostAnswers, cur.LostAnswers, &last.LostAnswers)
	addDelta(f.granted, cur.Granted, &last.Granted)
	addDelta(f.heldResponses, cur.HeldResponses, &last.HeldResponses)
}

// flushSlots publishes the in-flight gauges of concurrency rule i (nothing
// for other rules).
func (m *metrics) flushSlots(e *engine.Engine, i int) {
	rm := &m.rules[i]
	if rm.inFlight == 0 {
		return
	}
	// Read from shared data now, not as this worker last saw them: the
	// gauges are process-wide, and an idle worker would otherwise put back
	// the figures of the burst it last saw after every release elsewhere.
	if e.SlotsKnown(i) {
		// An idle worker (it never saw the rule's slots) has no figures:
		// zeros from it would flap the gauges of the busy ones.
		n, q := e.LastSlots(i, e.Now())
		setGauge(rm.inFlight, n)
		setGauge(rm.queued, q)
	}
	for k := range rm.classes {
		c := &rm.classes[k]
		if n, q, ok := e.ClassSlots(i, k); ok {
			setGauge(c.inFlight, n)
			setGauge(c.queued, q)
		}
		addDelta(c.refused, e.ClassRefused(i, k), &c.refusedLast)
	}
	if rm.limit != 0 {
		if g := e.LearntGauge(i); g.Limit > 0 {
			setGauge(rm.limit, g.Current())
			setGauge(rm.latencyUS, g.Base.Microseconds())
		}
	}
}

// setGauge sets a process-wide gauge to v (the last worker to publish wins).
func setGauge(g gauge, v int64) {
	if d := v - g.Value(); d != 0 {
		g.Add(d)
	}
}

// recordActiveStates sets the tracked-client-states gauges, in all and per
// rule (one worker, the census lease holder, computes them for the whole
// process).
func (m *metrics) recordActiveStates(n int, c *engine.Census) {
	g := m.global.activeStates
	g.Add(int64(n) - g.Value())
	for i := range m.rules {
		if m.rules[i].off {
			continue
		}
		g := m.rules[i].activeStates
		g.Add(int64(c.Rule(i)) - g.Value())
	}
}

// flushOverflow publishes each rule's decisions on its overflow state and
// notes the rules that made some since the last call.
func (m *metrics) flushOverflow(t *engine.Table) {
	for i := range m.rules {
		rm := &m.rules[i]
		if n := t.Overflow[i]; n > rm.overflowLast {
			rm.overflow.Increment(n - rm.overflowLast)
			rm.overflowLast = n
			rm.overflowSeen = true
		}
	}
}
