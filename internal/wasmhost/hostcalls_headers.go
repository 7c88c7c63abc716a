package wasmhost

import "github.com/tetratelabs/wazero/api"

// The env.proxy_* host functions on header maps (get, add, replace,
// remove, pairs, size), with the semantics of proxy-wasm-cpp-host and
// Envoy (see hostcalls_proxy.go).

// headerMapFor resolves a map for the active context. mutable selects
// Envoy's getMap (writes, size) rather than getConstMap (reads).
func (vm *VM) headerMapFor(t MapType, mutable bool) (*headerMap, *Stream) {
	switch t {
	case MapHTTPCallResponseHeaders:
		if !mutable && vm.httpResp != nil {
			return vm.httpResp.headers, nil
		}
		return nil, nil
	case MapHTTPCallResponseTrailers:
		if !mutable && vm.httpResp != nil {
			return vm.httpResp.trailers, nil
		}
		return nil, nil
	}
	s := vm.activeStream()
	if s == nil {
		return nil, nil
	}
	return s.mapFor(t, mutable), s
}

// proxy_get_header_map_value(type, key_ptr, key_size, value_ptr_ptr, value_size_ptr)
func hostGetHeaderMapValue(vm *VM, _ api.Module, st []uint64) {
	t := MapType(u32(st[0]))
	if t > mapTypeMax {
		ret(st, StatusBadArgument)
		return
	}
	key, ok := vm.read(u32(st[1]), u32(st[2]))
	if !ok {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	m, _ := vm.headerMapFor(t, false)
	if m == nil {
		ret(st, StatusBadArgument)
		return
	}
	v, found := m.get(string(key))
	if !found {
		ret(st, StatusNotFound)
		return
	}
	if !vm.copyOutString(v, u32(st[3]), u32(st[4])) {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	ret(st, StatusOK)
}

func hostMutateHeader(vm *VM, st []uint64, op string) {
	t := MapType(u32(st[0]))
	if t > mapTypeMax {
		ret(st, StatusBadArgument)
		return
	}
	key, ok := vm.readString(u32(st[1]), u32(st[2]))
	if !ok {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	var val string
	if op != "remove" {
		if val, ok = vm.readString(u32(st[3]), u32(st[4])); !ok {
			ret(st, StatusInvalidMemoryAccess)
			return
		}
	}
	m, s := vm.headerMapFor(t, true)
	if m == nil {
		ret(st, StatusBadArgument)
		return
	}
	switch op {
	case "add":
		m.add(key, val)
	case "replace":
		m.replace(key, val)
	case "remove":
		m.remove(key)
	}
	s.recordOp(HeaderOp{Map: t, Op: op, Name: lower(key), Value: val})
	ret(st, StatusOK)
}

func hostAddHeaderMapValue(vm *VM, _ api.Module, st []uint64) { hostMutateHeader(vm, st, "add") }

func hostReplaceHeaderMapValue(vm *VM, _ api.Module, st []uint64) {
	hostMutateHeader(vm, st, "replace")
}

func hostRemoveHeaderMapValue(vm *VM, _ api.Module, st []uint64) {
	hostMutateHeader(vm, st, "remove")
}

// proxy_get_header_map_pairs(type, ptr_ptr, size_ptr)
func hostGetHeaderMapPairs(vm *VM, _ api.Module, st []uint64) {
	t := MapType(u32(st[0]))
	if t > mapTypeMax {
		ret(st, StatusBadArgument)
		return
	}
	m, _ := vm.headerMapFor(t, false)
	if m == nil || len(m.kv) == 0 {
		// An unavailable map reads as empty (Envoy headerMapToPairs(nullptr)).
		if !vm.copyOut(nil, u32(st[1]), u32(st[2])) {
			ret(st, StatusInvalidMemoryAccess)
			return
		}
		ret(st, StatusOK)
		return
	}
	size := uint32(pairsSize(m.kv))
	ptr, ok := vm.alloc(size)
	if !ok {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	buf, _ := vm.mem.Read(ptr, size)
	marshalPairs(buf, m.kv)
	if !vm.mem.WriteUint32Le(u32(st[1]), ptr) || !vm.mem.WriteUint32Le(u32(st[2]), size) {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	ret(st, StatusOK)
}

// proxy_set_header_map_pairs(type, ptr, size)
func hostSetHeaderMapPairs(vm *VM, _ api.Module, st []uint64) {
	t := MapType(u32(st[0]))
	if t > mapTypeMax {
		ret(st, StatusBadArgument)
		return
	}
	data, ok := vm.read(u32(st[1]), u32(st[2]))
	if !ok {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	m, s := vm.headerMapFor(t, true)
	if m == nil {
		ret(st, StatusBadArgument)
		return
	}
	pairs := unmarshalPairs(data)
	m.setPairs(pairs)
	s.recordOp(HeaderOp{Map: t, Op: "set_pairs", Pairs: m.kv.Clone()})
	ret(st, StatusOK)
}

// proxy_get_header_map_size(type, size_ptr): Envoy's HeaderMap::byteSize.
func hostGetHeaderMapSize(vm *VM, _ api.Module, st []uint64) {
	t := MapType(u32(st[0]))
	if t > mapTypeMax {
		ret(st, StatusBadArgument)
		return
	}
	m, _ := vm.headerMapFor(t, true)
	if m == nil {
		ret(st, StatusBadArgument)
		return
	}
	if !vm.mem.WriteUint32Le(u32(st[1]), uint32(m.byteSize())) {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	ret(st, StatusOK)
}
