package main

import (
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
)

// settle charges the rules that charge h's request after its response,
// now that the response headers are here, if the response comes from the
// upstream: a response Envoy made itself (no healthy upstream, a timeout,
// another filter's local reply) reports response.code_details other than
// "via_upstream" and is not charged.
func (h *httpContext) settle() {
	if !h.verdict.ChargesAfterResponse() {
		return
	}
	if string(getCodeDetails()) != "via_upstream" {
		h.verdict.DropCharges()
		return
	}
	if c := h.plugin.rls; c != nil {
		// Charges a global rule's lease cannot cover are sent from here
		// (rlsCaller.CallDetached).
		c.stream = h.id
		defer func() { c.stream = 0 }()
	}
	h.plugin.engine.Settle(h.verdict, responseHeaders{}, nowNanos())
}

// responseHeaders reads the current stream's response headers for
// engine.Settle (":status" included).
type responseHeaders struct{}

func (responseHeaders) Header(name string) (string, bool) {
	v, err := proxywasm.GetHttpResponseHeader(name)
	return v, err == nil
}

func (responseHeaders) SourceAddress() string { return "" }
