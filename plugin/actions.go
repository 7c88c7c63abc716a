package main

import "github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

// actionHold is what the header callbacks (OnHttpRequestHeaders,
// OnHttpResponseHeaders) return to hold a stream: Envoy's
// StopAllIterationAndWatermark (4), which stops the body and trailers with
// the headers, Envoy buffering them up to its watermark. The SDK's
// ActionPause is StopIteration (1), which stops the headers alone:
// proxy-wasm-cpp-host turns it into StopAllIterationAndWatermark
// (ContextBase::convertVmCallResultToFilterHeadersStatus) unless the
// plugin's configuration sets allow_on_headers_stop_iteration (Envoy >=
// 1.35); with that flag the body goes on to the module, which exports no
// request body callback (cpp-host answers Continue for it), and Envoy
// would send a held request upstream as soon as its body arrived. Both
// the plugin's exports (dispatch_wasip1.go) and the SDK's (a plain `go
// build`, streams the SDK dispatches) return the value as it is, so every
// hold holds whatever the flag says. Body and trailer callbacks keep
// ActionPause: 4 means something else there.
const actionHold = types.Action(4)
