// Package wasmhost is a proxy-wasm host on wazero that stands in for Envoy
// 1.40 in in-process tests and benchmarks of a compiled plugin (a Go
// wasip1 reactor built with -buildmode=c-shared, or any ABI 0.2.x module).
//
// It follows what Envoy and its proxy-wasm-cpp-host really do, not what the
// Go SDK's proxytest emulator does. Typical use:
//
//	h, err := wasmhost.New(ctx, wasmBytes, wasmhost.WithVMID("sluice"), wasmhost.WithClock(clk))
//	vm, err := h.NewVM(nil, []byte(`{"rate": 10}`))  // one Envoy worker
//	res := vm.Request(wasmhost.Request{
//		Headers:    wasmhost.Headers{{":method", "GET"}, {":path", "/"}, {":authority", "a"}, {":scheme", "http"}},
//		Properties: wasmhost.Properties{"source.address": "10.0.0.1:5555", "xds.route_name": "r1"},
//	})
//	// res.Status, res.Headers, res.Body: what the client got;
//	// res.Action, res.LocalResponse, res.UpstreamRequest: what the plugin did.
//	if res.Paused { clk.Advance(...); h.AdvanceClock(...) / vm.Tick(); res = res.Stream.Finish() }
//
// # What is modelled after Envoy / cpp-host
//
//   - One compiled module, many instances: each VM is one worker thread with
//     its own Go globals; a VM's calls are serialized, VMs run in parallel.
//   - Start: _initialize (then main/__main_void if exported) with host
//     calls restricted as in cpp-host startVm (logging, clocks, random,
//     environment, and a set of WASI stubs; anything else traps), then
//     proxy_on_context_create(root, 0), proxy_on_vm_start,
//     proxy_on_configure. The plugin configuration is readable only during
//     configuration. A false return fails NewVM with the plugin's log.
//   - Guest memory is allocated through malloc or proxy_on_memory_allocate
//     with the host calls restricted as in cpp-host allocMemory.
//   - Shared data: see SharedData (global CAS counter, cas=0 unconditional,
//     set on a missing key always succeeds, no delete, copies).
//   - Header maps: lowercased names, pseudo-headers first, get returns the
//     first value, replace changes the first entry, remove drops all.
//     Request headers are readable/writable only in proxy_on_request_headers
//     and while the request is paused, response headers likewise, both
//     readable in proxy_on_log; elsewhere BadArgument.
//   - proxy_send_local_response stops iteration whatever the callback
//     returns; the reply is sent after the callback and passes through the
//     plugin's own proxy_on_response_headers (when sent in the response
//     phase it replaces the upstream response directly). Only the first
//     local reply of a stream counts.
//   - A header callback's result becomes Envoy's filter status as cpp-host
//     converts it: StopIteration (1) stops the body with the headers
//     unless WithAllowOnHeadersStopIteration, where the body goes on to
//     proxy_on_request_body / proxy_on_response_body (Continue when the
//     module does not export it), whose Continue continues the headers.
//   - Trailers (Request.Trailers, Response.Trailers, SendRequestTrailers):
//     held with the body by a header callback's stop-all, handed to
//     proxy_on_request_trailers / proxy_on_response_trailers when the
//     stream goes on; a request or response whose headers stopped alone
//     (the flag above) or whose body stopped has them delivered at once,
//     and their Continue (also cpp-host's, for a module that does not
//     export the callback) sends on what was stopped. The trailers maps
//     are readable and writable in their callback and while held there.
//   - proxy_set_effective_context lasts until the callback returns;
//     proxy_continue_stream and local replies on that context take effect
//     after the callback (cpp-host after-VM-call actions).
//   - Stream end: proxy_on_log (maps readable), proxy_on_done,
//     proxy_on_delete, in Envoy's order.
//   - Crashes fail the VM: nothing is called on it any more, its streams get
//     a 503 "wasm_fail_stream" (fail closed, the default) or bypass the
//     plugin (WithFailOpen).
//   - WASI: exactly cpp-host's functions, under wasi_snapshot_preview1 and
//     wasi_unstable: stdout/stderr become log lines (info/error),
//     poll_oneoff returns at once, no file system, clocks from the Host's
//     Clock.
//   - Imports: New refuses a module that imports anything Envoy 1.40 does
//     not link for its ABI version (see EnvoyImports, CheckEnvoyImports).
//
// # Not modelled
//
// gRPC calls (a module importing them is refused), TCP streams,
// Envoy's coalescing of repeated "inline" headers, headers the connection
// manager adds (x-request-id, x-forwarded-*, date, server), streaming
// bodies in several chunks, Envoy's CEL attributes beyond the properties
// given to the host and request.*/response.code derived from headers, and
// the canary VM Envoy starts for each configuration.
package wasmhost
