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
var (
	decisionProperty = []byte("sluice_decision")
	ruleProperty     = []byte("sluice_rule")
	// classProperty is wasm.sluice_class: the request's priority class in
	// a rule with classes ("default" for the implicit one); not set for
	// requests of no such rule.
	classProperty = []byte("sluice_class")
)

// tell records v's decision in the stream's filter state; the stream must
// be the current context. Nothing for a request still undecided.
func (p *pluginContext) tell(v *engine.Verdict) {
	d, r, ok := v.Decision(p.engine.Config())
	if !ok {
		return
	}
	setProperty(decisionProperty, d.String())
	name := ""
	if r != nil {
		name = r.Name
	}
	setProperty(ruleProperty, name)
	if v.Class != "" {
		setProperty(classProperty, v.Class)
	}
}

// rejectionBody returns the body of v's rejection, built in a buffer the
// next rejection reuses (the host copies it).
func (p *pluginContext) rejectionBody(v *engine.Verdict) []byte {
	cfg := p.engine.Config()
	if cfg.TextBody {
		return textBody
	}
	return p.problem.build(cfg, v)
}

var textBody = []byte(header.TextBody)

// headers returns the headers of v's rejection under cfg (with gRPC's
// retry pushback when pushback), the buffer for their encoding, and
// whether that buffer holds it already: they are the last rejection's
// when what they say is the same (rejectKey).
func (b *problemBody) headers(cfg *config.Config, v *engine.Verdict, pushback bool) ([][2]string, *[]byte, bool) {
	k := rejectKeyOf(v)
	if !pushback && b.key == k {
		return b.hdrs.List(), &b.encoded, true
	}
	b.hdrs.Build(v, cfg.Headers, true)
	if cfg.TextBody {
		b.hdrs.Add(header.ContentType, header.TextContentType)
	} else {
		b.hdrs.Add(header.ContentType, header.ProblemContentType)
	}
	if pushback {
		b.hdrs.AddPushback(v.RetryAfter)
		k = rejectKey{} // its milliseconds change with every request
	}
	b.key = k
	return b.hdrs.List(), &b.encoded, false
}

// rejectKey is what a rejection's headers say (engine.HeaderSet.Build with
// rejected set): the rules they name, and their numbers as the headers
// write them (whole seconds). Two rejections with equal keys have the same
// headers; the zero key is no rejection (Retry-After is at least 1).
type rejectKey struct {
	report, shadow            *config.Rule
	reportLimit, remaining    int64
	retry, reset, shadowRetry int64
}

func rejectKeyOf(v *engine.Verdict) rejectKey {
	k := rejectKey{report: v.Report, shadow: v.Shadow, reportLimit: v.ReportLimit, remaining: max(v.Remaining, 0),
		retry: header.RetryAfterSeconds(v.RetryAfter), reset: header.CeilSeconds(v.Reset)}
	if v.Shadow != nil {
		k.shadowRetry = header.RetryAfterSeconds(v.ShadowRetryAfter)
	}
	return k
}
