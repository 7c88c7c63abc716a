package wasmhost

import "errors"

// Reconfigure starts the plugin again in this VM with a new plugin
// configuration, as Envoy does on a configuration update that keeps the
// vm_config: the thread-local VM is reused and the new plugin gets a root
// context of its own (proxy_on_context_create, then proxy_on_configure; the
// VM is not started again). New streams belong to the new root; the old
// root stays, as Envoy keeps the old plugin while its streams finish. It
// returns an error when the plugin refuses the configuration.
func (vm *VM) Reconfigure(pluginConfig []byte) error {
	return vm.op(func() error {
		root := vm.allocContextID()
		vm.pluginConfig = append([]byte(nil), pluginConfig...)
		vm.configuring = true
		defer func() { vm.configuring = false }()
		if err := vm.invoke(root, "proxy_on_context_create", vm.fn.onContextCreate, nil, uint64(root), 0); err != nil {
			return err
		}
		ok := true
		err := vm.invoke(root, "proxy_on_configure", vm.fn.onConfigure, func(ret uint64, _ bool) { ok = uint32(ret) != 0 },
			uint64(root), uint64(len(vm.pluginConfig)))
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("wasmhost: the plugin refused the configuration (proxy_on_configure returned false)")
		}
		vm.rootID = root
		return nil
	})
}

// TouchedBytes returns how much of the guest's linear memory holds data: the
// 4 KiB pages (the host's page size, what Envoy's resident memory counts)
// with a byte that is not zero. A page the guest wrote and freed still
// counts, as it stays resident in Envoy; one it reserved and never wrote
// does not. Together with MemorySize (the reservation) it is what a VM
// costs an Envoy worker.
func (vm *VM) TouchedBytes() uint64 {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.closed {
		return 0
	}
	const page = 4096
	mem, _ := vm.mem.Read(0, vm.mem.Size())
	var n uint64
	for off := 0; off < len(mem); off += page {
		for _, b := range mem[off:min(off+page, len(mem))] {
			if b != 0 {
				n += page
				break
			}
		}
	}
	return n
}
