package wasmhost

import "github.com/tetratelabs/wazero/api"

// The env.proxy_* host functions on metrics (define, increment, record,
// get), with the semantics of proxy-wasm-cpp-host and Envoy (see
// hostcalls_proxy.go).

// proxy_define_metric(type, name_ptr, name_size, id_ptr). Ids are per VM,
// with the type in the low two bits (Envoy Wasm::nextCounterMetricId etc).
func hostDefineMetric(vm *VM, _ api.Module, st []uint64) {
	t := u32(st[0])
	if t > uint32(MetricHistogram) {
		ret(st, StatusBadArgument)
		return
	}
	name, ok := vm.readString(u32(st[1]), u32(st[2]))
	if !ok {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	s := vm.h.cfg.metrics.define(MetricType(t), name)
	vm.nextMetricID[t] += 4
	id := vm.nextMetricID[t]
	vm.metricIDs[id] = s
	if !vm.mem.WriteUint32Le(u32(st[3]), id) {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	ret(st, StatusOK)
}

// proxy_increment_metric(id, i64 offset)
func hostIncrementMetric(vm *VM, _ api.Module, st []uint64) {
	id := u32(st[0])
	switch MetricType(id & 3) {
	case MetricCounter, MetricGauge:
		s, ok := vm.metricIDs[id]
		if !ok {
			ret(st, StatusNotFound)
			return
		}
		ret(st, vm.h.cfg.metrics.increment(s, int64(st[1])))
	default:
		ret(st, StatusBadArgument)
	}
}

// proxy_record_metric(id, u64 value)
func hostRecordMetric(vm *VM, _ api.Module, st []uint64) {
	s, ok := vm.metricIDs[u32(st[0])]
	if !ok {
		ret(st, StatusNotFound)
		return
	}
	vm.h.cfg.metrics.record(s, st[1])
	ret(st, StatusOK)
}

// proxy_get_metric(id, value_ptr)
func hostGetMetric(vm *VM, _ api.Module, st []uint64) {
	id := u32(st[0])
	switch MetricType(id & 3) {
	case MetricCounter, MetricGauge:
	default:
		ret(st, StatusBadArgument)
		return
	}
	s, ok := vm.metricIDs[id]
	if !ok {
		ret(st, StatusNotFound)
		return
	}
	v, status := vm.h.cfg.metrics.value(s)
	if status != StatusOK {
		ret(st, status)
		return
	}
	if !vm.mem.WriteUint64Le(u32(st[1]), v) {
		ret(st, StatusInvalidMemoryAccess)
		return
	}
	ret(st, StatusOK)
}
