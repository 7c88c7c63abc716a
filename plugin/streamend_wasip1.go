//go:build wasip1

package main

import (
	_ "unsafe" // go:linkname

	// The SDK's callbacks linked to below live in its internal package,
	// linked in through proxywasm.
	_ "github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
)

// The end of a stream in one guest entry instead of three.
//
// For an HTTP stream Envoy calls proxy_on_log (its access-log hook), then
// the filter's onDestroy: proxy_on_done and proxy_on_delete. Each is a
// C++ -> V8 -> Go entry that costs several thousand instructions whatever
// it does. The pinned SDK runs OnHttpStreamDone in proxy_on_log, returns
// true from proxy_on_done for a stream and forgets the stream in
// proxy_on_delete. `make build` (internal/wasmexports) removes the SDK's
// proxy_on_log, proxy_on_done and proxy_on_delete exports and exports
// sluiceOnStreamEnd as proxy_on_delete: Envoy skips a callback the module
// does not export (proxy_on_done counts as true), so the stream's end runs
// here, once, with the same effects in the same order. A plain `go build`
// keeps the SDK's exports and never calls this one: the same behaviour at
// the old cost. The SDK is pinned (go.mod); its function names are checked
// by the link.

//go:linkname sdkOnLog github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/internal.proxyOnLog
func sdkOnLog(contextID uint32)

//go:linkname sdkOnDelete github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/internal.proxyOnDelete
func sdkOnDelete(contextID uint32)

//go:wasmexport sluice_on_stream_end
func sluiceOnStreamEnd(contextID uint32) {
	h := streams.removeHome(contextID) // inlined: most streams
	if h == nil {
		h = streams.remove(contextID)
	}
	if h != nil {
		h.OnHttpStreamDone() // a stream of the plugin's own (dispatch_wasip1.go)
		return
	}
	if p := rootOf(contextID); p != nil {
		p.retire() // the plugin context ends: no proxy_on_done either
	}
	sdkOnLog(contextID)
	sdkOnDelete(contextID)
}
