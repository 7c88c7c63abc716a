package main

import (
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

// settle charges the rules that charge h's request after its response,
// now that the response headers are here, if the response comes from the
// upstream: a response Envoy made itself (no healthy upstream, a timeout,
// another filter's local reply) reports response.code_details other than
// "via_upstream" and is not charged. It reports whether the response must
// be held until the service has counted a charge it was sent
// (engine.SettleHeld; resumeResponse resumes it).
func (h *httpContext) settle() bool {
	if !h.verdict.ChargesAfterResponse() {
		return false
	}
	if string(getCodeDetails()) != "via_upstream" {
		h.verdict.DropCharges()
		return false
	}
	if c := h.plugin.rls; c != nil {
		// Charges a global rule's lease cannot cover are sent from here
		// (rlsCaller.CallDetached).
		c.stream = h.id
		defer func() { c.stream = 0 }()
	}
	// The engine keeps h.resumeResponse for the charge's answer, which
	// may come after the stream ended: h is not reused (streamPool).
	h.shared = true
	h.heldResponse = h.plugin.engine.SettleHeld(h.verdict, responseHeaders{}, nowNanos(), h.resumeResponse)
	return h.heldResponse
}

// resumeResponse lets a held response go on to its client; it runs in the
// answer of the charge's call, whose context is the response's stream (a
// stream that ended meanwhile gets no answer).
func (h *httpContext) resumeResponse() {
	if !h.heldResponse || h.gone {
		return
	}
	h.heldResponse = false
	if err := proxywasm.ResumeHttpResponse(); err != nil {
		proxywasm.LogDebug("sluice: resume of a response held for its charge failed: " + err.Error())
	}
}

// OnHttpResponseTrailers keeps a held response held: going on from here
// would let Envoy send it before the service counted its charge.
func (h *httpContext) OnHttpResponseTrailers(int) types.Action {
	if h.heldResponse {
		return types.ActionPause
	}
	return types.ActionContinue
}

// responseHeaders reads the current stream's response headers for
// engine.Settle (":status" included).
type responseHeaders struct{}

func (responseHeaders) Header(name string) (string, bool) {
	v, err := proxywasm.GetHttpResponseHeader(name)
	return v, err == nil
}

func (responseHeaders) SourceAddress() string { return "" }
