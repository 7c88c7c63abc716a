package wasmhost

import (
	"errors"

	"github.com/tetratelabs/wazero/experimental"
)

// WithResidentMemory backs each VM's linear memory with a memory mapping of
// its own (Linux only), so that VM.Resident can tell which of its pages the
// guest has written: what a VM costs an Envoy worker in resident memory,
// as V8 and wazero grow a linear memory by mapping pages the kernel
// allocates on first write. Without it VM.Resident fails.
func WithResidentMemory() Option { return func(o *config) { o.resident = true } }

// Resident is what a VM's linear memory holds in resident memory: pages the
// guest (or the host, for data segments and host calls' results) has
// written, at the kernel's page size.
type Resident struct {
	Size    uint64 // the linear memory's size in bytes
	Touched uint64 // bytes of the pages written at least once
	// Zero is the bytes of written pages that hold only zeros: memory a
	// VM pays for without using it, such as the gap the Go runtime clears
	// before its first heap arena.
	Zero uint64
}

var errNoResident = errors.New("wasmhost: VM.Resident needs WithResidentMemory (and Linux)")

// Resident reports which pages of the VM's linear memory are resident.
func (vm *VM) Resident() (Resident, error) { return vm.ResidentRange(0, 1<<32) }

// ResidentRange is Resident over the linear memory's addresses [lo, hi)
// (lo rounded down and hi up to the kernel's page size); Size is the
// range's size within the memory.
func (vm *VM) ResidentRange(lo, hi uint64) (Resident, error) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.mapped == nil || vm.closed {
		return Resident{}, errNoResident
	}
	return vm.mapped.resident(lo, min(hi, uint64(vm.mem.Size())))
}

// allocator returns the memory allocator of a new VM's linear memory, nil
// for wazero's own.
func (h *Host) allocator() (experimental.MemoryAllocator, *mappedMemory) {
	if !h.cfg.resident || !residentSupported {
		return nil, nil
	}
	m := &mappedMemory{}
	return experimental.MemoryAllocatorFunc(m.allocate), m
}
