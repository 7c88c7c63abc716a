package main

import (
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

// rejectionBody returns the body of v's rejection and its content type,
// built in a buffer the next rejection reuses (the host copies it).
func (p *pluginContext) rejectionBody(v *engine.Verdict) ([]byte, string) {
	cfg := p.engine.Config()
	if cfg.TextBody {
		return textBody, header.TextContentType
	}
	return p.problem.build(cfg, v), header.ProblemContentType
}

var textBody = []byte(header.TextBody)
