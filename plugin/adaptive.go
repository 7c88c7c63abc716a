package main

import (
	"bytes"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"

	"github.com/sluicehq/sluice/plugin/engine"
	"github.com/sluicehq/sluice/plugin/internal/sprintf"
	"github.com/sluicehq/sluice/shared/limit"
)

// Adaptive concurrency rules learn from the latency of the requests they
// admitted: from the request's forwarding to the upstream's response
// headers (not the stream's end: a slow client reading a long body says
// nothing about the upstream). What is not the upstream's latency is kept
// out here, the rest in engine.Sample:
//
//   - requests Sluice refused or answered never held a slot: no sample;
//   - a local reply of another filter (response.code_details other than
//     via_upstream, and not about the upstream): no sample;
//   - a 5xx of the upstream, or Envoy's reply about it (upstream timeout,
//     reset, connection failure; details upstream_*): a sample only if it
//     took longer than the learnt latency allows (a failing upstream's fast
//     503s would otherwise teach it that the upstream is fast; a timeout
//     shows it slow);
//   - a stream that ends before any response headers (client gone): the
//     same, as a lower bound.

var (
	viaUpstream    = []byte("via_upstream")
	upstreamPrefix = []byte("upstream_")
)

// responseKind classifies the response headers of the current stream; ok
// is false for a reply that did not involve the upstream.
func responseKind() (kind engine.SampleKind, ok bool) {
	details := getCodeDetails()
	switch {
	case bytes.Equal(details, viaUpstream):
		status, err := proxywasm.GetHttpResponseHeader(":status")
		if err == nil && len(status) == 3 && status[0] == '5' {
			return engine.SampleFailure, true
		}
		return engine.SampleResponse, true
	case bytes.HasPrefix(details, upstreamPrefix):
		return engine.SampleFailure, true
	}
	return 0, false
}

// sample gives the adaptive rules among h's slots its latency, once:
// headers says the upstream's response headers (or Envoy's reply) arrived,
// otherwise the stream ended without them.
func (h *httpContext) sample(now int64, headers bool) {
	v := h.verdict
	// Never forwarded (waiting in a queue, or for a global rule's call):
	// its stream's end says nothing about the upstream.
	if h.sampled || len(v.Slots) == 0 || v.Outcome == engine.Queue || v.Outcome == engine.Call || !h.plugin.engine.AnyAdaptive(v.Slots) {
		return
	}
	h.sampled = true
	kind := engine.SampleEnded
	if headers {
		var ok bool
		if kind, ok = responseKind(); !ok {
			return
		}
	}
	h.plugin.engine.Sample(v.Slots, h.sent, now, kind)
}

// logRound writes, at debug level (--component-log-level wasm:debug), each
// decision of an adaptive rule this worker made: what the rule learnt, and
// from what (a round's mean latency against the no-queue latency). About
// one line per round trip of the upstream per rule and key.
func (p *pluginContext) logRound(i int, prev, next limit.Gauge) {
	proxywasm.LogDebug(sprintf.Sprintf("sluice: rule %s learnt: limit %d -> %d (round of %d samples, mean %v; no-queue latency %v -> %v; slow start %t; in flight %d%% of the limit; loop lag %v taken out; %d windows dropped in stalls; fast classes' word %d: 0 none, 1 calm, 2-3 waited)",
		p.engine.Config().Rules[i].Name, prev.Current(), next.Current(), prev.N, prev.Mean, prev.Base, next.Base, next.SlowStart, int(prev.Use*100),
		p.engine.LoopLag(), p.engine.Stats.LateWindows, prev.Fast))
}
