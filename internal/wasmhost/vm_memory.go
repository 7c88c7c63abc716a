package wasmhost

import "fmt"

// alloc reserves size bytes in guest memory by calling the module's malloc
// (or proxy_on_memory_allocate), as cpp-host WasmBase::allocMemory does:
// with the VM context current and only a few host calls allowed. A trap
// inside it propagates to the callback that made the host call.
func (vm *VM) alloc(size uint32) (uint32, bool) {
	saveRestrict, saveCur, saveEff := vm.restrict, vm.current, vm.effective
	vm.restrict, vm.current, vm.effective = restrictMalloc, 0, 0
	st := vm.stack(1)
	st[0] = uint64(size)
	vm.depth++
	err := vm.fn.malloc.CallWithStack(vm.ctx, st)
	vm.depth--
	vm.restrict, vm.current, vm.effective = saveRestrict, saveCur, saveEff
	if err != nil {
		panic(trapPanic{fmt.Errorf("%s: %w", vm.h.mallocName, err)})
	}
	ptr := uint32(st[0])
	if ptr == 0 {
		return 0, false
	}
	if _, ok := vm.mem.Read(ptr, size); !ok {
		return 0, false
	}
	return ptr, true
}

// copyOut copies data into freshly allocated guest memory and stores its
// address and size at ptrPtr and sizePtr (cpp-host copyToPointerSize). Empty
// data is not allocated: the address written is 0.
func (vm *VM) copyOut(data []byte, ptrPtr, sizePtr uint32) bool {
	var ptr uint32
	if len(data) > 0 {
		var ok bool
		if ptr, ok = vm.alloc(uint32(len(data))); !ok {
			return false
		}
		vm.mem.Write(ptr, data)
	}
	return vm.mem.WriteUint32Le(ptrPtr, ptr) && vm.mem.WriteUint32Le(sizePtr, uint32(len(data)))
}

func (vm *VM) copyOutString(s string, ptrPtr, sizePtr uint32) bool {
	var ptr uint32
	if len(s) > 0 {
		var ok bool
		if ptr, ok = vm.alloc(uint32(len(s))); !ok {
			return false
		}
		buf, _ := vm.mem.Read(ptr, uint32(len(s)))
		copy(buf, s)
	}
	return vm.mem.WriteUint32Le(ptrPtr, ptr) && vm.mem.WriteUint32Le(sizePtr, uint32(len(s)))
}

func (vm *VM) read(ptr, size uint32) ([]byte, bool) { return vm.mem.Read(ptr, size) }

func (vm *VM) readString(ptr, size uint32) (string, bool) {
	b, ok := vm.mem.Read(ptr, size)
	if !ok {
		return "", false
	}
	return string(b), true
}

// MemorySize returns the size of the guest's linear memory in bytes. Wasm
// memory never shrinks, so this is the VM's high-water mark.
func (vm *VM) MemorySize() uint32 {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.closed {
		return 0
	}
	return vm.mem.Size()
}
