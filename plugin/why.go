package main

import (
	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/plugin/engine"
	"github.com/sluicehq/sluice/sdk/header"
)

// Telling operators and clients why a request was refused, delayed or let
// through.
//
// The access log: Envoy's proxy_set_property stores a value under the
// stream's filter state as "wasm.<name>" (a CelState of bytes, which the
// PLAIN form prints as it is), so %FILTER_STATE(wasm.sluice_decision:PLAIN)%
// and %FILTER_STATE(wasm.sluice_rule:PLAIN)% show what Sluice decided and
// which rule made it: two host calls per decided request, with constants
// and rule names, so nothing is allocated. The rule is set, to "", even
// when no rule is to name: a value never set prints as "-" (and null in a
// JSON log), which would also be what a request Sluice never decided
// shows (a stream reset before its headers were complete).

// Property names: the access log's wasm.sluice_decision and wasm.sluice_rule.
const (
	decisionProperty = "sluice_decision"
	ruleProperty     = "sluice_rule"
	// classProperty is wasm.sluice_class: the request's priority class in
	// a rule with classes ("default" for the implicit one); not set for
	// requests of no such rule.
	classProperty = "sluice_class"
)

// allowedWord is engine.Allowed's word in the access log.
var allowedWord = engine.Allowed.String()

// tell records v's decision in the stream's filter state; the stream must
// be the current context. Nothing for a request still undecided.
func (p *pluginContext) tell(v *engine.Verdict) {
	word, name := allowedWord, "" // most requests: let through, no rule to name
	if v.Err != nil || v.Outcome != engine.Allow || v.Delayer != nil || v.Shadow != nil {
		var d engine.Decision
		var r *config.Rule
		if v.Err == nil && v.Outcome == engine.Reject {
			// Decision's other common case, without its call.
			d, r = engine.Rejected, v.Refuser(p.engine.Config())
		} else {
			var ok bool
			if d, r, ok = v.Decision(p.engine.Config()); !ok {
				return
			}
		}
		word = d.String()
		if r != nil {
			name = r.Name
		}
	}
	// One call site each: setProperty is inlined.
	setProperty(decisionProperty, word)
	setProperty(ruleProperty, name)
	if v.Class != "" {
		setProperty(classProperty, v.Class)
	}
}

var textBody = []byte(header.TextBody)

// prepare makes b's headers and body those of v's rejection under cfg
// (with gRPC's retry pushback when pushback), when they are not the last
// rejection's already (reject): keySame says that b.key says v, so the body
// stands. The headers are built anew; b.built says they are kept for the
// next rejection (none with a pushback, whose milliseconds change with
// every request).
func (b *problemBody) prepare(cfg *config.Config, v *engine.Verdict, pushback, keySame bool) {
	if !keySame {
		if !cfg.TextBody {
			b.build(cfg, v)
		}
		b.key = rejectKeyOf(v)
	}
	b.hdrs.Build(v, cfg.Headers, true)
	if cfg.TextBody {
		b.hdrs.Add(header.ContentType, header.TextContentType)
	} else {
		b.hdrs.Add(header.ContentType, header.ProblemContentType)
	}
	b.built = !pushback
	if pushback {
		b.hdrs.AddPushback(v.RetryAfter)
	}
}

// rejectKey is what a rejection's headers and body say
// (engine.HeaderSet.Build with rejected set, Verdict.ViolatedNames,
// header.AppendProblem): the rules they name, and their numbers as the
// headers write them (whole seconds). Two rejections with equal keys have
// the same headers and body under one configuration. An admitted
// response's headers (rejected unset) depend on a part of it
// (limitHeaders).
type rejectKey struct {
	report, shadow            *config.Rule
	reportLimit, remaining    int64
	retry, reset, shadowRetry int64
	violated                  engine.Violations
	rejected                  bool
}

// says reports whether k is rejectKeyOf(v), the cheap fields first, without
// building v's key.
func (k *rejectKey) says(v *engine.Verdict) bool {
	if k.report != v.Report || k.shadow != v.Shadow || k.reportLimit != v.ReportLimit ||
		k.remaining != max(v.Remaining, 0) || k.rejected != (v.Outcome == engine.Reject) || !v.ViolatedAs(&k.violated) {
		return false
	}
	if k.retry != header.RetryAfterSeconds(v.RetryAfter) || k.reset != header.CeilSeconds(v.Reset) {
		return false
	}
	return v.Shadow == nil || k.shadowRetry == header.RetryAfterSeconds(v.ShadowRetryAfter)
}

// sameHeaders compares what the headers of an admitted response say (all
// but the rules that refused).
func (k *rejectKey) sameHeaders(o *rejectKey) bool {
	return k.report == o.report && k.shadow == o.shadow && k.reportLimit == o.reportLimit &&
		k.remaining == o.remaining && k.retry == o.retry && k.reset == o.reset && k.shadowRetry == o.shadowRetry
}

func rejectKeyOf(v *engine.Verdict) rejectKey {
	k := rejectKey{report: v.Report, shadow: v.Shadow, reportLimit: v.ReportLimit, remaining: max(v.Remaining, 0),
		retry: header.RetryAfterSeconds(v.RetryAfter), reset: header.CeilSeconds(v.Reset),
		violated: v.Violations(), rejected: v.Outcome == engine.Reject}
	if v.Shadow != nil {
		k.shadowRetry = header.RetryAfterSeconds(v.ShadowRetryAfter)
	}
	return k
}

// admitKeyOf is the part of rejectKeyOf(v) an admitted response's headers
// say (sameHeaders; no Retry-After, no rules that refused).
func admitKeyOf(v *engine.Verdict) rejectKey {
	k := rejectKey{report: v.Report, shadow: v.Shadow, reportLimit: v.ReportLimit, remaining: max(v.Remaining, 0),
		reset: header.CeilSeconds(v.Reset)}
	if v.Shadow != nil {
		k.shadowRetry = header.RetryAfterSeconds(v.ShadowRetryAfter)
	}
	return k
}
