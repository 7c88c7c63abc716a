package wasmhost

import (
	"encoding/binary"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"github.com/tetratelabs/wazero/experimental"
)

const residentSupported = true

// mappedMemory is a linear memory in an anonymous private mapping of its
// maximum size: pages the kernel has not been asked to write stay shared
// with its zero page, as a V8 linear memory's do.
type mappedMemory struct {
	buf []byte // the whole reservation
	err error
}

func (m *mappedMemory) allocate(_, maxBytes uint64) experimental.LinearMemory {
	b, err := syscall.Mmap(-1, 0, int(maxBytes), syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS|syscall.MAP_NORESERVE)
	if err != nil {
		m.err = err
		return m
	}
	m.buf = b
	return m
}

// Reallocate grows the memory within the reservation: the pages past the
// old size are the mapping's, zero until written.
func (m *mappedMemory) Reallocate(size uint64) []byte {
	if m.buf == nil || size > uint64(len(m.buf)) {
		return nil
	}
	return m.buf[:size:size]
}

func (m *mappedMemory) Free() {
	if m.buf != nil {
		_ = syscall.Munmap(m.buf)
		m.buf = nil
	}
}

// resident reads the page table entries of [lo, hi) from
// /proc/self/pagemap: a page is written when it is present and mapped by
// this process only (bit 56); a page only read maps the kernel's shared
// zero page, which is not.
func (m *mappedMemory) resident(lo, hi uint64) (Resident, error) {
	if m.buf == nil {
		return Resident{}, fmt.Errorf("wasmhost: no mapped memory: %v", m.err)
	}
	page := uint64(os.Getpagesize())
	lo = lo / page * page
	hi = min((hi+page-1)/page*page, uint64(len(m.buf)))
	if lo >= hi {
		return Resident{}, nil
	}
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return Resident{}, err
	}
	defer f.Close()
	base := uint64(uintptr(unsafe.Pointer(&m.buf[0]))) + lo
	entries := make([]byte, (hi-lo)/page*8)
	if _, err := f.ReadAt(entries, int64(base/page*8)); err != nil {
		return Resident{}, fmt.Errorf("wasmhost: reading /proc/self/pagemap: %w", err)
	}
	r := Resident{Size: hi - lo}
	for i := range uint64(len(entries) / 8) {
		e := binary.LittleEndian.Uint64(entries[i*8:])
		if e>>63&1 == 0 || e>>56&1 == 0 {
			continue
		}
		r.Touched += page
		if at := lo + i*page; allZero(m.buf[at : at+page]) {
			r.Zero += page
		}
	}
	return r, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
