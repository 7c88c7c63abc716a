package wasmhost

import (
	"runtime"
	"testing"
)

// A VM on a mapping of its own reports the pages its start wrote: the data
// segments and the Go runtime's first heap, not the whole memory; without
// the option Resident fails rather than guessing.
func TestResident(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/pagemap")
	}
	if _, err := newVM(t, newHost(t), "", "").Resident(); err == nil {
		t.Error("Resident without WithResidentMemory: no error")
	}
	vm := newVM(t, newHost(t, WithResidentMemory()), "", "")
	r, err := vm.Resident()
	if err != nil {
		t.Fatal(err)
	}
	if r.Size != uint64(vm.MemorySize()) || r.Touched == 0 || r.Touched >= r.Size || r.Zero > r.Touched {
		t.Fatalf("Resident = %+v for a %d-byte memory", r, vm.MemorySize())
	}
	// Every page with a byte that is not zero was written.
	if nonzero := vm.TouchedBytes(); nonzero == 0 || nonzero > r.Touched-r.Zero {
		t.Errorf("pages holding data: %d bytes, written and not zero: %d", nonzero, r.Touched-r.Zero)
	}
	// Address 0 holds the linker's zero page, never written.
	if low, err := vm.ResidentRange(0, 4096); err != nil || low.Touched != 0 || low.Size != 4096 {
		t.Errorf("ResidentRange(0, 4096) = %+v, %v", low, err)
	}
}
