//go:build !linux

package wasmhost

import (
	"errors"

	"github.com/tetratelabs/wazero/experimental"
)

const residentSupported = false

// mappedMemory needs Linux's /proc/self/pagemap; elsewhere VM.Resident
// fails and the VM uses wazero's memory.
type mappedMemory struct{}

func (m *mappedMemory) allocate(_, _ uint64) experimental.LinearMemory { return nil }

func (m *mappedMemory) resident(_, _ uint64) (Resident, error) {
	return Resident{}, errors.New("wasmhost: VM.Resident needs Linux")
}
