//go:build wasip1

package main

import (
	_ "unsafe" // go:linkname

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

// The per-stream callbacks without the SDK's bookkeeping (streams.go).
//
// The SDK exports proxy_on_context_create, proxy_on_request_headers,
// proxy_on_response_headers and proxy_on_response_body, and finds the
// stream of each call in its Go maps. `make build` (internal/wasmexports)
// removes those four exports and exports the functions below under the
// first three's names (no response body callback: Envoy would make it for
// every chunk of every response, about 2 k instructions each, and nothing
// in Sluice needs a response's body; a stop from the response headers holds
// it in Envoy): a stream of a root context that owns its streams
// (pluginContext.ownsStreams) is created into, found in and (at its end,
// sluiceOnStreamEnd) removed from the plugin's table; every other context
// (the root contexts themselves, the streams of a configuration with
// global rules) goes on to the SDK's function, as before. A plain
// `go build` keeps the SDK's exports and never calls these. The SDK is
// pinned (go.mod); its function names are checked by the link.

// streams are the streams of this VM's root contexts that own theirs
// (context IDs are unique in a VM).
var streams streamTable

//go:linkname sdkOnContextCreate github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/internal.proxyOnContextCreate
func sdkOnContextCreate(contextID, pluginContextID uint32)

//go:linkname sdkOnRequestHeaders github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/internal.proxyOnRequestHeaders
func sdkOnRequestHeaders(contextID uint32, numHeaders int32, endOfStream bool) types.Action

//go:linkname sdkOnResponseHeaders github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/internal.proxyOnResponseHeaders
func sdkOnResponseHeaders(contextID uint32, numHeaders int32, endOfStream bool) types.Action

//go:wasmexport sluice_on_context_create
func sluiceOnContextCreate(contextID, pluginContextID uint32) {
	if pluginContextID != 0 {
		if p := rootOf(pluginContextID); p != nil && p.ownsStreams() {
			h := p.newStream(contextID)
			if !streams.addHome(contextID, h) && !streams.add(contextID, h) { // addHome inlined: most streams
				panic("context id duplicated") // as the SDK
			}
			return
		}
	}
	sdkOnContextCreate(contextID, pluginContextID)
}

//go:wasmexport sluice_on_request_headers
func sluiceOnRequestHeaders(contextID uint32, numHeaders int32, endOfStream bool) types.Action {
	if h := streams.get(contextID); h != nil {
		return h.OnHttpRequestHeaders(int(numHeaders), endOfStream)
	}
	return sdkOnRequestHeaders(contextID, numHeaders, endOfStream)
}

//go:wasmexport sluice_on_response_headers
func sluiceOnResponseHeaders(contextID uint32, numHeaders int32, endOfStream bool) types.Action {
	if h := streams.get(contextID); h != nil {
		if h.passesResponse() {
			return types.ActionContinue // a rejection's own local reply, most often
		}
		return h.OnHttpResponseHeaders(int(numHeaders), endOfStream)
	}
	return sdkOnResponseHeaders(contextID, numHeaders, endOfStream)
}
