package wasmtest

import (
	"runtime"
	"testing"

	"github.com/sluicehq/sluice/internal/wasmhost"
	"github.com/sluicehq/sluice/internal/wasmlayout"
)

// maxGapZeros bounds the memory a started VM has written with nothing but
// zeros between the end of its static data and the Go runtime's first
// heap arena. The runtime clears the gap between its break and that arena
// (up to 448 KiB, internal/wasmlayout); make build links the static data
// where the gap is empty, and what stays is the odd page of the runtime's
// own metadata that holds zeros.
const maxGapZeros = 64 << 10

// TestArenaGap starts the plugin in one VM whose linear memory is a
// mapping of its own and counts the pages written with zeros only before
// the first heap arena, as the kernel counts them in an Envoy worker's
// resident memory.
func TestArenaGap(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/pagemap")
	}
	l, err := wasmlayout.Read(pluginWasm)
	if err != nil {
		t.Fatal(err)
	}
	h := newHost(t, wasmhost.WithResidentMemory())
	vm := workers(t, h, 1, guardConfig)[0]
	brk, arena := wasmlayout.Break(l.End), wasmlayout.FirstArena(l.End)
	gap, err := vm.ResidentRange(brk, arena)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := vm.Resident()
	heap, _ := vm.ResidentRange(arena, arena+1)
	t.Logf("static data %#x-%#x, first heap arena at %#x: %d KiB written before it, %d KiB of them zeros; whole memory %d KiB, %d KiB written, %d KiB zeros",
		l.DataStart, l.End, arena, gap.Touched>>10, gap.Zero>>10, all.Size>>10, all.Touched>>10, all.Zero>>10)
	// The heap's first spans are written: the arena is where the layout
	// says, so the measured stretch is the one before it.
	if heap.Touched == 0 || gap.Touched == 0 {
		t.Fatalf("nothing written at %#x (the first heap arena by wasmlayout) or before it: does the Go runtime still lay out its heap as internal/wasmlayout says?", arena)
	}
	if gap.Zero > maxGapZeros {
		t.Errorf("a started VM keeps %d KiB written with zeros only before its first heap arena, over %d KiB: the static data ends just past the runtime's arena boundary (make build relinks it, internal/wasmlayout)", gap.Zero>>10, maxGapZeros>>10)
	}
	healthy(t, vm)
}

// TestNoFindFuncTab: build/sluice.wasm leaves runtime.findfunctab out of
// its data segments (make build's wasm-edit; internal/wasmlayout), so no
// VM writes its 320 bytes per function.
func TestNoFindFuncTab(t *testing.T) {
	ft, err := wasmlayout.LocateFuncTab(pluginWasm)
	if err != nil {
		t.Fatal(err)
	}
	if ft.Present {
		t.Errorf("build/sluice.wasm writes runtime.findfunctab (%d bytes at %#x) into every VM (make build runs wasmlayout -drop-findfunctab)", ft.Size, ft.Addr)
	}
	t.Logf("runtime.findfunctab: %d bytes at %#x, not in the data segments", ft.Size, ft.Addr)
}
