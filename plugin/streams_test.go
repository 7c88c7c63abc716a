package main

import (
	"math/rand/v2"
	"testing"
)

// TestStreamTableAgainstAMap: random adds and removes, with context IDs as
// Envoy hands them out (consecutive) and long-lived streams among them
// (probe chains that wrap the table's end and cross removals), give the
// same answers as a map; a duplicate is refused.
func TestStreamTableAgainstAMap(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var tab streamTable
		ref := map[uint32]*httpContext{}
		next := uint32(1)
		for step := range 3000 {
			if len(ref) < 200 && rng.IntN(3) > 0 {
				id := next
				if rng.IntN(4) == 0 {
					// Same home slot as a live stream, when the table's
					// size is a power of two up to 1024.
					id += 1024 * uint32(1+rng.IntN(4))
				}
				next++
				if _, dup := ref[id]; dup {
					continue
				}
				h := &httpContext{id: id}
				if !tab.addHome(id, h) && !tab.add(id, h) { // as sluiceOnContextCreate adds
					t.Fatalf("seed %d step %d: add %d refused", seed, step, id)
				}
				if tab.add(id, h) {
					t.Fatalf("seed %d step %d: duplicate %d added", seed, step, id)
				}
				ref[id] = h
			} else if len(ref) > 0 {
				var id uint32
				k := rng.IntN(len(ref))
				for i := range ref {
					if k == 0 {
						id = i
						break
					}
					k--
				}
				got := tab.removeHome(id) // as sluiceOnStreamEnd removes
				if got == nil {
					got = tab.remove(id)
				}
				if got != ref[id] {
					t.Fatalf("seed %d step %d: remove %d returned %v", seed, step, id, got)
				}
				delete(ref, id)
				if tab.remove(id) != nil {
					t.Fatalf("seed %d step %d: %d removed twice", seed, step, id)
				}
			}
			if tab.n != len(ref) {
				t.Fatalf("seed %d step %d: %d streams, want %d", seed, step, tab.n, len(ref))
			}
			for id, h := range ref {
				if tab.get(id) != h {
					t.Fatalf("seed %d step %d: get %d lost", seed, step, id)
				}
			}
			if tab.get(next+5000) != nil || tab.get(0) != nil {
				t.Fatalf("seed %d step %d: a stream that was never added", seed, step)
			}
		}
	}
}

// TestStreamTableAllocatesNothingOnceGrown: a stream's add and remove
// allocate nothing once the table holds the streams in flight.
func TestStreamTableAllocatesNothingOnceGrown(t *testing.T) {
	var tab streamTable
	h := &httpContext{}
	id := uint32(1)
	allocs := testing.AllocsPerRun(1000, func() {
		tab.add(id, h)
		tab.add(id+1, h)
		tab.get(id)
		tab.remove(id)
		tab.remove(id + 1)
		id += 2
	})
	if allocs > 0.01 { // the first run grows the table once
		t.Fatalf("%.2f allocations per stream pair", allocs)
	}
}

// TestRootsRetire: a retired plugin context is no root any more, and does
// not own streams.
func TestRootsRetire(t *testing.T) {
	roots = nil
	defer func() { roots = nil }()
	vm := &vmContext{}
	a := vm.NewPluginContext(3).(*pluginContext)
	b := vm.NewPluginContext(9).(*pluginContext)
	if rootOf(3) != a || rootOf(9) != b || rootOf(4) != nil {
		t.Fatal("rootOf does not find the roots")
	}
	if a.ownsStreams() {
		t.Fatal("a context that did not start owns streams")
	}
	a.retire()
	if rootOf(3) != nil || rootOf(9) != b {
		t.Fatal("a retired root is still found, or the other one is lost")
	}
}
