package wasmhost

import (
	"fmt"
	"sort"
	"strings"
)

// HostCalls returns how many times the guest called each host function
// since creation or the last ResetHostCalls, keyed "module.name" (e.g.
// "env.proxy_get_shared_data", "wasi_snapshot_preview1.clock_time_get").
// Functions never called are omitted.
func (vm *VM) HostCalls() map[string]uint64 {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	out := map[string]uint64{}
	for i, n := range vm.calls {
		if n > 0 {
			out[vm.h.funcs[i].qname] = n
		}
	}
	return out
}

// TotalHostCalls returns the sum of HostCalls.
func (vm *VM) TotalHostCalls() uint64 {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	var n uint64
	for _, c := range vm.calls {
		n += c
	}
	return n
}

// ResetHostCalls zeroes the host call counters.
func (vm *VM) ResetHostCalls() {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	clear(vm.calls)
}

// FormatHostCalls renders HostCalls sorted by count, one "name count" per line.
func FormatHostCalls(calls map[string]uint64) string {
	type kv struct {
		k string
		v uint64
	}
	var all []kv
	for k, v := range calls {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].v != all[j].v {
			return all[i].v > all[j].v
		}
		return all[i].k < all[j].k
	})
	var b strings.Builder
	for _, e := range all {
		fmt.Fprintf(&b, "%-45s %d\n", e.k, e.v)
	}
	return b.String()
}
