package wasmhost

import (
	"strings"
	"time"

	"github.com/tetratelabs/wazero/api"
)

// This file implements the env.proxy_* host functions with the semantics
// of proxy-wasm-cpp-host src/exports.cc and Envoy's Context
// (source/extensions/common/wasm/context.cc).

type proxyFn = func(vm *VM, mod api.Module, stack []uint64)

func u32(v uint64) uint32 { return uint32(v) }

func ret(stack []uint64, s Status) { stack[0] = uint64(s) }

func proxyImpls() map[string]proxyFn {
	return map[string]proxyFn{
		"pthread_equal": func(vm *VM, _ api.Module, st []uint64) {
			if u32(st[0]) == u32(st[1]) {
				st[0] = 1
			} else {
				st[0] = 0
			}
		},
		"emscripten_notify_memory_growth": func(*VM, api.Module, []uint64) {},

		"proxy_log":                          hostLog,
		"proxy_get_log_level":                hostGetLogLevel,
		"proxy_get_status":                   hostGetStatus,
		"proxy_get_property":                 hostGetProperty,
		"proxy_set_property":                 hostSetProperty,
		"proxy_send_local_response":          hostSendLocalResponse,
		"proxy_continue_stream":              hostContinueStream,
		"proxy_close_stream":                 hostCloseStream,
		"proxy_get_shared_data":              hostGetSharedData,
		"proxy_set_shared_data":              hostSetSharedData,
		"proxy_register_shared_queue":        hostRegisterQueue,
		"proxy_resolve_shared_queue":         hostResolveQueue,
		"proxy_enqueue_shared_queue":         hostEnqueue,
		"proxy_dequeue_shared_queue":         hostDequeue,
		"proxy_get_header_map_value":         hostGetHeaderMapValue,
		"proxy_add_header_map_value":         hostAddHeaderMapValue,
		"proxy_replace_header_map_value":     hostReplaceHeaderMapValue,
		"proxy_remove_header_map_value":      hostRemoveHeaderMapValue,
		"proxy_get_header_map_pairs":         hostGetHeaderMapPairs,
		"proxy_set_header_map_pairs":         hostSetHeaderMapPairs,
		"proxy_get_header_map_size":          hostGetHeaderMapSize,
		"proxy_get_buffer_status":            hostGetBufferStatus,
		"proxy_get_buffer_bytes":             hostGetBufferBytes,
		"proxy_set_buffer_bytes":             hostSetBufferBytes,
		"proxy_http_call":                    hostHTTPCall,
		"proxy_set_tick_period_milliseconds": hostSetTickPeriod,
		"proxy_get_current_time_nanoseconds": hostGetCurrentTime,
		"proxy_define_metric":                hostDefineMetric,
		"proxy_increment_metric":             hostIncrementMetric,
		"proxy_record_metric":                hostRecordMetric,
		"proxy_get_metric":                   hostGetMetric,
		"proxy_set_effective_context":        hostSetEffectiveContext,
		"proxy_done":                         hostDone,
		"proxy_call_foreign_function":        hostCallForeignFunction,
		// Not implemented (a module importing them is refused by New):
		// proxy_grpc_call, proxy_grpc_stream, proxy_grpc_send,
		// proxy_grpc_cancel, proxy_grpc_close, and the ABI 0.1.0 functions.
	}
}

// proxy_log(level, ptr, size)
func hostLog(vm *VM, _ api.Module, st []uint64) {
	level := u32(st[0])
	if level > uint32(LogCritical) {
		ret(st, StatusBadArgument)
		return
	}
	msg, ok := vm.readString(u32(st[1]), u32(st[2]))
	if !ok {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	vm.log(LogLevel(level), msg, "proxy_log")
	ret(st, StatusOK)
}

// proxy_get_log_level(level_ptr)
func hostGetLogLevel(vm *VM, _ api.Module, st []uint64) {
	if !vm.mem.WriteUint32Le(u32(st[0]), uint32(vm.h.cfg.logLevel)) {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	ret(st, StatusOK)
}

// proxy_get_status(code_ptr, msg_ptr_ptr, msg_size_ptr): the status of the
// last HTTP call failure (root context).
func hostGetStatus(vm *VM, _ api.Module, st []uint64) {
	if !vm.mem.WriteUint32Le(u32(st[0]), vm.statusCode) {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	if !vm.copyOutString(vm.statusMsg, u32(st[1]), u32(st[2])) {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	ret(st, StatusOK)
}

// proxy_get_property(path_ptr, path_size, value_ptr_ptr, value_size_ptr)
func hostGetProperty(vm *VM, _ api.Module, st []uint64) {
	b, ok := vm.read(u32(st[0]), u32(st[1]))
	if !ok {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	v, found := vm.property(string(b))
	if !found {
		ret(st, StatusNotFound)
		return
	}
	if !vm.copyOutString(v, u32(st[2]), u32(st[3])) {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	ret(st, StatusOK)
}

// property resolves a property path (NUL-separated) for the active context.
// Order: values the plugin set on this stream (single-segment paths, as
// Envoy's filter-state lookup works), the stream's properties, the Host's
// properties, plugin_name/plugin_root_id/plugin_vm_id, then request.* and
// response.* derived from the stream's headers.
func (vm *VM) property(path string) (string, bool) {
	path = strings.TrimSuffix(path, "\x00")
	s := vm.activeStream()
	if s != nil {
		if v, ok := s.property(path); ok {
			return v, true
		}
	}
	if v, ok := vm.h.cfg.props[path]; ok {
		return v, true
	}
	switch path {
	case "plugin_name":
		return vm.h.cfg.pluginName, true
	case "plugin_root_id":
		return vm.h.cfg.rootID, true
	case "plugin_vm_id":
		return vm.h.cfg.vmID, true
	}
	if s != nil {
		return s.derivedProperty(path)
	}
	return "", false
}

// proxy_set_property(path_ptr, path_size, value_ptr, value_size): Envoy
// stores the value in the stream's filter state ("wasm." + path); there is
// no stream info outside a stream, hence NotFound there.
func hostSetProperty(vm *VM, _ api.Module, st []uint64) {
	path, ok1 := vm.readString(u32(st[0]), u32(st[1]))
	val, ok2 := vm.readString(u32(st[2]), u32(st[3]))
	if !ok1 || !ok2 {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	s := vm.activeStream()
	if s == nil {
		ret(st, StatusNotFound)
		return
	}
	if s.setProps == nil {
		s.setProps = map[string]string{}
	}
	s.setProps[path] = val
	ret(st, StatusOK)
}

// replaceAllEmptySpace mirrors Envoy's StringUtil::replaceAllEmptySpace.
func replaceAllEmptySpace(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case ' ', '\t', '\f', '\v', '\n', '\r':
			return '_'
		}
		return r
	}, s)
}

// proxy_send_local_response(status, details_ptr, details_size, body_ptr,
// body_size, headers_ptr, headers_size, grpc_status)
func hostSendLocalResponse(vm *VM, _ api.Module, st []uint64) {
	details, ok1 := vm.readString(u32(st[1]), u32(st[2]))
	body, ok2 := vm.read(u32(st[3]), u32(st[4]))
	hdrs, ok3 := vm.read(u32(st[5]), u32(st[6]))
	if !ok1 || !ok2 || !ok3 {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	lr := &LocalResponse{
		Status:     int(u32(st[0])),
		Headers:    unmarshalPairs(hdrs),
		Body:       append([]byte(nil), body...),
		Details:    replaceAllEmptySpace(details),
		GrpcStatus: int32(u32(st[7])),
	}
	for i := range lr.Headers {
		lr.Headers[i][0] = lower(lr.Headers[i][0])
	}
	if s := vm.activeStream(); s != nil {
		switch {
		case s.localSent:
			s.warn("second proxy_send_local_response (status %d) ignored: Envoy sends only the first local reply of a stream, but still stops iteration", lr.Status)
		case s.ended || s.responded:
			s.warn("proxy_send_local_response (status %d) after the response was sent: ignored", lr.Status)
		default:
			s.localSent = true
			s.local = lr
			vm.deferAction(func() { s.localReply(lr) })
		}
	} else {
		vm.warn("proxy_send_local_response (status %d) from context %d, which is not an HTTP stream: Envoy ignores it", lr.Status, vm.active())
	}
	vm.stopNext = true
	ret(st, StatusOK)
}

// proxy_continue_stream(type)
func hostContinueStream(vm *VM, _ api.Module, st []uint64) {
	t := u32(st[0])
	if t > streamUpstream {
		ret(st, StatusBadArgument)
		return
	}
	s := vm.activeStream()
	if t == streamDownstream || t == streamUpstream {
		ret(st, StatusBadArgument) // Envoy's HTTP Context::continueStream
		return
	}
	if s != nil {
		if t == streamRequest {
			vm.deferAction(s.resumeRequest)
		} else {
			vm.deferAction(s.resumeResponse)
		}
		// Envoy clears the request maps whichever direction continues.
		s.reqLive = false
		s.reqBodyLive = false
	}
	ret(st, StatusOK)
}

// proxy_close_stream(type)
func hostCloseStream(vm *VM, _ api.Module, st []uint64) {
	t := u32(st[0])
	if t > streamUpstream {
		ret(st, StatusBadArgument)
		return
	}
	if s := vm.activeStream(); s != nil && (t == streamRequest || t == streamResponse) {
		vm.deferAction(s.resetStream)
	}
	ret(st, StatusOK)
}

// proxy_get_shared_data(key_ptr, key_size, value_ptr_ptr, value_size_ptr, cas_ptr)
func hostGetSharedData(vm *VM, _ api.Module, st []uint64) {
	key, ok := vm.readString(u32(st[0]), u32(st[1]))
	if !ok {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	var cas uint32
	var found bool
	vm.scratch, cas, found = vm.h.cfg.shared.getInto(vm.h.cfg.vmID, key, vm.scratch)
	if !found {
		ret(st, StatusNotFound)
		return
	}
	if !vm.copyOut(vm.scratch, u32(st[2]), u32(st[3])) || !vm.mem.WriteUint32Le(u32(st[4]), cas) {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	ret(st, StatusOK)
}

// proxy_set_shared_data(key_ptr, key_size, value_ptr, value_size, cas)
func hostSetSharedData(vm *VM, _ api.Module, st []uint64) {
	key, ok1 := vm.readString(u32(st[0]), u32(st[1]))
	val, ok2 := vm.read(u32(st[2]), u32(st[3]))
	if !ok1 || !ok2 {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	ret(st, vm.h.cfg.shared.Set(vm.h.cfg.vmID, key, val, u32(st[4])))
}

// proxy_register_shared_queue(name_ptr, name_size, token_ptr)
func hostRegisterQueue(vm *VM, _ api.Module, st []uint64) {
	name, ok := vm.readString(u32(st[0]), u32(st[1]))
	if !ok {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	tok := vm.h.cfg.shared.registerQueue(vm.h.cfg.vmID, name, vm, vm.rootID)
	if !vm.mem.WriteUint32Le(u32(st[2]), tok) {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	ret(st, StatusOK)
}

// proxy_resolve_shared_queue(vm_id_ptr, vm_id_size, name_ptr, name_size, token_ptr)
func hostResolveQueue(vm *VM, _ api.Module, st []uint64) {
	vmID, ok1 := vm.readString(u32(st[0]), u32(st[1]))
	name, ok2 := vm.readString(u32(st[2]), u32(st[3]))
	if !ok1 || !ok2 {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	if vmID == "" {
		vmID = vm.h.cfg.vmID
	}
	tok, found := vm.h.cfg.shared.resolveQueue(vmID, name)
	if !found {
		ret(st, StatusNotFound)
		return
	}
	if !vm.mem.WriteUint32Le(u32(st[4]), tok) {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	ret(st, StatusOK)
}

// proxy_enqueue_shared_queue(token, data_ptr, data_size)
func hostEnqueue(vm *VM, _ api.Module, st []uint64) {
	data, ok := vm.read(u32(st[1]), u32(st[2]))
	if !ok {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	ret(st, vm.h.cfg.shared.enqueue(u32(st[0]), data))
}

// proxy_dequeue_shared_queue(token, data_ptr_ptr, data_size_ptr)
func hostDequeue(vm *VM, _ api.Module, st []uint64) {
	v, status := vm.h.cfg.shared.dequeue(u32(st[0]))
	if status != StatusOK {
		ret(st, status)
		return
	}
	if !vm.copyOut(v, u32(st[1]), u32(st[2])) {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	ret(st, StatusOK)
}

// HTTPCall is a proxy_http_call the plugin made.
type HTTPCall struct {
	Token    uint32
	Cluster  string
	Headers  Headers
	Body     []byte
	Trailers Headers
	Timeout  time.Duration
	// root is the root context that made the call (the calling stream's):
	// Envoy delivers the answer to it, also after a configuration update
	// made another root the VM's current one.
	root uint32
}

type httpCallResponse struct {
	headers, trailers *headerMap
	body              []byte
}

// proxy_http_call(uri_ptr, uri_size, headers_ptr, headers_size, body_ptr,
// body_size, trailers_ptr, trailers_size, timeout_ms, token_ptr)
func hostHTTPCall(vm *VM, _ api.Module, st []uint64) {
	cluster, ok1 := vm.readString(u32(st[0]), u32(st[1]))
	hdrs, ok2 := vm.read(u32(st[2]), u32(st[3]))
	body, ok3 := vm.read(u32(st[4]), u32(st[5]))
	trls, ok4 := vm.read(u32(st[6]), u32(st[7]))
	if !ok1 || !ok2 || !ok3 || !ok4 || !vm.mem.WriteUint32Le(u32(st[9]), 0) {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	if !vm.h.cfg.clusters[cluster] {
		ret(st, StatusBadArgument)
		return
	}
	call := &HTTPCall{
		Cluster:  cluster,
		Headers:  unmarshalPairs(hdrs),
		Body:     append([]byte(nil), body...),
		Trailers: unmarshalPairs(trls),
		Timeout:  time.Duration(u32(st[8])) * time.Millisecond,
		root:     vm.rootID,
	}
	if a := vm.active(); a != 0 {
		call.root = a
		if s := vm.streams[a]; s != nil && s.root != 0 {
			call.root = s.root
		}
	}
	hm := newHeaderMap(call.Headers)
	for _, need := range []string{":path", ":method", ":authority"} {
		if _, ok := hm.get(need); !ok {
			ret(st, StatusBadArgument)
			return
		}
	}
	for {
		call.Token = vm.nextHTTPToken
		vm.nextHTTPToken++
		if _, used := vm.httpCalls[call.Token]; call.Token != 0 && !used {
			break
		}
	}
	vm.httpCalls[call.Token] = call
	vm.mem.WriteUint32Le(u32(st[9]), call.Token)
	ret(st, StatusOK)
}

// proxy_set_tick_period_milliseconds(period): one timer per root context.
func hostSetTickPeriod(vm *VM, _ api.Module, st []uint64) {
	vm.setTickPeriod(time.Duration(u32(st[0])) * time.Millisecond)
	ret(st, StatusOK)
}

// proxy_get_current_time_nanoseconds(ptr)
func hostGetCurrentTime(vm *VM, _ api.Module, st []uint64) {
	if !vm.mem.WriteUint64Le(u32(st[0]), uint64(vm.h.cfg.clock.Now().UnixNano())) {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	ret(st, StatusOK)
}

// proxy_set_effective_context(id): any live context of this VM; the
// effective context lasts until the current callback returns.
func hostSetEffectiveContext(vm *VM, _ api.Module, st []uint64) {
	id := u32(st[0])
	if !vm.contextExists(id) {
		ret(st, StatusBadArgument)
		return
	}
	vm.effective = id
	ret(st, StatusOK)
}

// proxy_done(): finishes a root context whose proxy_on_done returned false.
func hostDone(vm *VM, _ api.Module, st []uint64) {
	if !vm.rootDone {
		ret(st, StatusNotFound)
		return
	}
	vm.deferAction(vm.deleteRoot)
	ret(st, StatusOK)
}

// proxy_call_foreign_function(name_ptr, name_size, args_ptr, args_size,
// results_ptr_ptr, results_size_ptr)
func hostCallForeignFunction(vm *VM, _ api.Module, st []uint64) {
	name, ok1 := vm.readString(u32(st[0]), u32(st[1]))
	args, ok2 := vm.read(u32(st[2]), u32(st[3]))
	if !ok1 || !ok2 {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	fn, ok := vm.h.cfg.foreign[name]
	if !ok {
		ret(st, StatusNotFound)
		return
	}
	out, status := fn(append([]byte(nil), args...))
	var ptr uint32
	if rp := u32(st[4]); rp != 0 {
		if len(out) > 0 {
			var ok bool
			if ptr, ok = vm.alloc(uint32(len(out))); !ok {
				ret(st, StatusInvalidMemoryAccess)
				return
			}
			vm.mem.Write(ptr, out)
		}
		if !vm.mem.WriteUint32Le(rp, ptr) {
			ret(st, StatusInvalidMemoryAccess)
			return
		}
	}
	if sp := u32(st[5]); sp != 0 && !vm.mem.WriteUint32Le(sp, uint32(len(out))) {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	ret(st, status)
}
