package main

import (
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"

	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/plugin/engine"
)

// metrics publishes the engine's counters as Envoy stats. Counting happens
// in Go on the request path (no host call); flush adds the increments since
// the last flush, about once a second from the tick.
type metrics struct {
	rules     []ruleMetrics
	last      engine.Stats
	lastTable engine.TableStats
	heldLast  int64
	global    struct {
		exempt, onErrorAllowed, onErrorDenied                 proxywasm.MetricCounter
		casRetries, casExhausted, overflow, full, storeErrors proxywasm.MetricCounter
		held                                                  proxywasm.MetricGauge
	}
}

type ruleMetrics struct {
	allowed, rejected, delayed, shadowRejected proxywasm.MetricCounter
}

// Metric names: Envoy shows them as wasmcustom.<name> in /stats and
// envoy_wasmcustom_<name> in /stats/prometheus.
func newMetrics(cfg *config.Config) *metrics {
	m := &metrics{last: engine.Stats{Rules: make([]engine.RuleStats, len(cfg.Rules))}}
	for _, r := range cfg.Rules {
		p := "sluice_rule_" + r.Name + "_"
		m.rules = append(m.rules, ruleMetrics{
			allowed:        proxywasm.DefineCounterMetric(p + "allowed"),
			rejected:       proxywasm.DefineCounterMetric(p + "rejected"),
			delayed:        proxywasm.DefineCounterMetric(p + "delayed"),
			shadowRejected: proxywasm.DefineCounterMetric(p + "shadow_rejected"),
		})
	}
	g := &m.global
	g.exempt = proxywasm.DefineCounterMetric("sluice_exempt")
	g.onErrorAllowed = proxywasm.DefineCounterMetric("sluice_on_error_allowed")
	g.onErrorDenied = proxywasm.DefineCounterMetric("sluice_on_error_denied")
	g.casRetries = proxywasm.DefineCounterMetric("sluice_cas_retries")
	g.casExhausted = proxywasm.DefineCounterMetric("sluice_cas_exhausted")
	g.overflow = proxywasm.DefineCounterMetric("sluice_table_overflow")
	g.full = proxywasm.DefineCounterMetric("sluice_table_full")
	g.storeErrors = proxywasm.DefineCounterMetric("sluice_shared_data_errors")
	g.held = proxywasm.DefineGaugeMetric("sluice_held_requests")
	return m
}

func addDelta(c proxywasm.MetricCounter, now uint64, last *uint64) {
	if now > *last {
		c.Increment(now - *last)
		*last = now
	}
}

func (m *metrics) flush(e *engine.Engine, held int) {
	for i := range m.rules {
		cur, last := &e.Stats.Rules[i], &m.last.Rules[i]
		addDelta(m.rules[i].allowed, cur.Allowed, &last.Allowed)
		addDelta(m.rules[i].rejected, cur.Rejected, &last.Rejected)
		addDelta(m.rules[i].delayed, cur.Delayed, &last.Delayed)
		addDelta(m.rules[i].shadowRejected, cur.ShadowRejected, &last.ShadowRejected)
	}
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
	g.held.Add(int64(held) - m.heldLast)
	m.heldLast = int64(held)
}
