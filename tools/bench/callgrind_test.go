package main

import "testing"

// TestPickWorker: Envoy's worker is found among the threads' net counts
// (figures of real runs), with and without a wasm filter.
func TestPickWorker(t *testing.T) {
	const envoy, libc, jit = "/x/envoy/_bin/envoy", "/usr/lib/libc.so.6", "???"
	threads := func(ts ...map[string]float64) map[int]map[string]float64 {
		net := map[int]map[string]float64{}
		for i, m := range ts {
			net[i+1] = m
		}
		return net
	}
	// No filter: the main thread ran 856 instructions outside any file,
	// the worker none.
	main := map[string]float64{jit: 856, envoy: 221841, libc: 2272}
	worker := map[string]float64{envoy: 424392409, libc: 43156313}
	idle := map[string]float64{envoy: -2603, libc: -662}
	if got := pickWorker(threads(main, idle, worker)); got["/x/envoy/_bin/envoy"] != worker[envoy] {
		t.Errorf("no wasm filter: picked %v, want the worker", got)
	}
	// A wasm filter: V8's compiler thread runs more of Envoy's binary than
	// the worker, and no compiled wasm.
	compiler := map[string]float64{envoy: 900000000, libc: 1000}
	wasmWorker := map[string]float64{jit: 3000000, envoy: 459000000, libc: 43000000}
	if got := pickWorker(threads(main, compiler, wasmWorker)); got[envoy] != wasmWorker[envoy] {
		t.Errorf("wasm filter: picked %v, want the worker that ran wasm", got)
	}
	if got := pickWorker(threads()); got != nil {
		t.Errorf("no thread: %v, want nil", got)
	}
}
