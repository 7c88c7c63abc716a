package wasmhost

import "github.com/tetratelabs/wazero/api"

// The env.proxy_* host functions on buffers (request and response bodies,
// configurations, call responses), with the semantics of
// proxy-wasm-cpp-host and Envoy (see hostcalls_proxy.go).

// buffer resolves a buffer for the active context (Envoy Context::getBuffer).
// ok=false means "no such buffer now" (NotFound). body points at the
// mutable body for the request/response body buffers while they are live.
func (vm *VM) buffer(t BufferType) (data []byte, body *[]byte, ok bool) {
	s := vm.activeStream()
	switch t {
	case BufferHTTPRequestBody:
		if s != nil && s.reqBodyLive {
			return s.reqBody, &s.reqBody, true
		}
		return nil, nil, true // Envoy: an empty buffer outside the body callback
	case BufferHTTPResponseBody:
		if s != nil && s.respBodyLive {
			return s.respBody, &s.respBody, true
		}
		return nil, nil, true
	case BufferDownstreamData, BufferUpstreamData, BufferGrpcReceive, BufferForeignFunctionArguments:
		return nil, nil, true
	case BufferHTTPCallResponseBody:
		if vm.httpResp != nil {
			return vm.httpResp.body, nil, true
		}
		return nil, nil, false
	case BufferVMConfiguration:
		return vm.vmConfig, nil, true
	case BufferPluginConfiguration:
		if vm.configuring {
			return vm.pluginConfig, nil, true
		}
		return nil, nil, false
	}
	return nil, nil, false
}

// proxy_get_buffer_status(type, length_ptr, flags_ptr)
func hostGetBufferStatus(vm *VM, _ api.Module, st []uint64) {
	t := BufferType(u32(st[0]))
	if t > bufferTypeMax {
		ret(st, StatusBadArgument)
		return
	}
	data, _, ok := vm.buffer(t)
	if !ok {
		ret(st, StatusNotFound)
		return
	}
	if !vm.mem.WriteUint32Le(u32(st[1]), uint32(len(data))) || !vm.mem.WriteUint32Le(u32(st[2]), 0) {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	ret(st, StatusOK)
}

// proxy_get_buffer_bytes(type, start, length, ptr_ptr, size_ptr)
func hostGetBufferBytes(vm *VM, _ api.Module, st []uint64) {
	t := BufferType(u32(st[0]))
	if t > bufferTypeMax {
		ret(st, StatusBadArgument)
		return
	}
	data, _, ok := vm.buffer(t)
	if !ok {
		ret(st, StatusNotFound)
		return
	}
	start, length := uint64(u32(st[1])), uint64(u32(st[2]))
	size := uint64(len(data))
	if start > size {
		length = 0
	} else if start+length > size {
		length = size - start
	}
	if length == 0 {
		if !vm.mem.WriteUint32Le(u32(st[3]), 0) || !vm.mem.WriteUint32Le(u32(st[4]), 0) {
			ret(st, StatusInvalidMemoryAccess)
			return
		}
		ret(st, StatusOK)
		return
	}
	if !vm.copyOut(data[start:start+length], u32(st[3]), u32(st[4])) {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	ret(st, StatusOK)
}

// proxy_set_buffer_bytes(type, start, length, data_ptr, data_size), with
// the semantics of Envoy's Buffer::copyFrom for the body buffers: start=0
// and length=0 prepends, start=0 and length>=size replaces, start>=size
// appends; anything else, and any other buffer, is BadArgument.
func hostSetBufferBytes(vm *VM, _ api.Module, st []uint64) {
	t := BufferType(u32(st[0]))
	if t > bufferTypeMax {
		ret(st, StatusBadArgument)
		return
	}
	_, body, ok := vm.buffer(t)
	if !ok {
		ret(st, StatusNotFound)
		return
	}
	data, okm := vm.read(u32(st[3]), u32(st[4]))
	if !okm {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	if body == nil {
		ret(st, StatusBadArgument)
		return
	}
	start, length := uint64(u32(st[1])), uint64(u32(st[2]))
	size := uint64(len(*body))
	switch {
	case start == 0 && length == 0:
		*body = append(append([]byte(nil), data...), *body...)
	case start == 0 && length >= size:
		*body = append([]byte(nil), data...)
	case start >= size:
		*body = append(*body, data...)
	default:
		ret(st, StatusBadArgument)
		return
	}
	ret(st, StatusOK)
}
