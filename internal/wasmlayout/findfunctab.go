package wasmlayout

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Why the plugin is linked without runtime.findfunctab: on wasm a PC is a
// function's index shifted left by 16 bits plus a resume point, so the
// table (20 bytes per 4,096 PCs) holds 320 bytes per function, with a
// non-zero word every 20 bytes: every page of it is written into every
// VM's linear memory when V8 instantiates the module (730 KB for Sluice's
// 2,290 functions). The runtime reads it only in findfunc, and a function's
// index already says which record is its own: the overlay (overlay.go)
// finds it by a binary search of ftab, and the build leaves the table out
// of the data segments, so its pages are never written.

// FuncTab is where runtime.findfunctab lies in a module's static data.
type FuncTab struct {
	Addr, Size uint64
	// Present says the module's data segments hold the table; when false,
	// no segment writes any byte of it.
	Present bool
}

// Offsets in runtime.moduledata (Go 1.26, runtime/symtab.go): pcHeader and
// five slices come before ftab; findfunctab, minpc, maxpc and text follow
// ftab.
const (
	offFtab        = 8 + 5*24
	offFindfunctab = offFtab + 24
)

// LocateFuncTab finds runtime.findfunctab in module, and whether its data
// segments hold it: either they hold exactly the table the linker computes
// from the module's function table, or they hold no byte of it.
func LocateFuncTab(module []byte) (FuncTab, error) {
	img, pages, err := parse(module)
	if err != nil {
		return FuncTab{}, err
	}
	at, err := img.moduledataAt(pages)
	if err != nil {
		return FuncTab{}, err
	}
	base, flat := img.flat()
	word := func(addr uint64) uint64 {
		if addr < base || addr-base+8 > uint64(len(flat)) {
			return 0
		}
		return binary.LittleEndian.Uint64(flat[addr-base:])
	}
	md := at - offNoptrdata
	tab, minpc, maxpc, text := word(md+offFindfunctab), word(md+offFindfunctab+8), word(md+offFindfunctab+16), word(md+offFindfunctab+24)
	ftabAddr, ftabLen := word(md+offFtab), word(md+offFtab+8)
	if maxpc <= minpc || minpc < text || ftabLen < 2 || ftabAddr < base || ftabAddr-base+8*ftabLen > uint64(len(flat)) {
		return FuncTab{}, errors.New("wasmlayout: runtime.moduledata's function table is not where Go 1.26 puts it")
	}
	want := wasmFuncTab(flat[ftabAddr-base:][:8*ftabLen], minpc, maxpc, text)
	ft := FuncTab{Addr: tab, Size: uint64(len(want))}
	switch {
	case !img.overlaps(tab, tab+ft.Size):
		return ft, nil
	case tab >= base && tab-base+ft.Size <= uint64(len(flat)) && string(flat[tab-base:][:ft.Size]) == string(want):
		ft.Present = true
		return ft, nil
	}
	return FuncTab{}, fmt.Errorf("wasmlayout: the %d bytes at runtime.findfunctab (%#x) are not the table of the module's %d functions", ft.Size, tab, ftabLen-1)
}

// wasmFuncTab computes findfunctab as cmd/link/internal/ld (findfunctab)
// writes it on wasm, from ftab (entryoff, funcoff pairs, the last one the
// end): per 4,096 PCs a bucket of 20 bytes, the ftab index of the function
// holding its first PC, then per 256-PC subbucket the index of the
// function holding the subbucket's start, less the bucket's.
func wasmFuncTab(ftab []byte, minpc, maxpc, text uint64) []byte {
	const bucket, sub = 4096, 256
	n := (maxpc - minpc + sub - 1) / sub
	nb := (maxpc - minpc + bucket - 1) / bucket
	out := make([]byte, 4*nb+n)
	entry := func(i int) uint64 { return uint64(binary.LittleEndian.Uint32(ftab[8*i:])) }
	last := len(ftab)/8 - 2 // the last function's index; the entry after it is the end
	idx := 0
	for s := uint64(0); s < n; s++ {
		pcOff := (minpc + s*sub - text) >> 16 // the function index, as runtime.textOff gives it
		for idx < last && entry(idx+1) <= pcOff {
			idx++
		}
		b, j := s/16, s%16
		if j == 0 {
			binary.LittleEndian.PutUint32(out[b*20:], uint32(idx))
		}
		out[b*20+4+j] = byte(uint32(idx) - binary.LittleEndian.Uint32(out[b*20:]))
	}
	return out
}

// overlaps reports whether a segment writes a byte in [lo, hi).
func (m image) overlaps(lo, hi uint64) bool {
	for _, s := range m {
		if s.addr < hi && s.addr+uint64(len(s.data)) > lo {
			return true
		}
	}
	return false
}

// WithoutFuncTab returns module without runtime.findfunctab in its data
// segments (LocateFuncTab, Without), or module itself when they do not
// hold it. Only a module built with the runtime overlay (RuntimeOverlay)
// may go without it: the runtime's own findfunc reads the table, and would
// find every function by a walk of ftab from its first entry.
func WithoutFuncTab(module []byte) ([]byte, error) {
	ft, err := LocateFuncTab(module)
	if err != nil || !ft.Present {
		return module, err
	}
	return Without(module, ft.Addr, ft.Addr+ft.Size)
}

// Without returns module with the bytes [lo, hi) of its memory left out of
// its data segments: a segment that writes part of them is split around
// them, so that the VM's memory there stays as V8 maps it, never written.
func Without(module []byte, lo, hi uint64) ([]byte, error) {
	if len(module) < 8 {
		return nil, errors.New("wasmlayout: not a wasm module")
	}
	r := reader{b: module, pos: 8}
	for r.pos < len(r.b) && r.err == nil {
		start := r.pos
		id := r.byte()
		n := r.uleb()
		if r.err != nil || n > uint64(len(r.b)-r.pos) {
			return nil, errors.New("wasmlayout: truncated section")
		}
		sec := reader{b: r.b[r.pos : r.pos+int(n)]}
		r.pos += int(n)
		if id != secData {
			continue
		}
		segs := sec.segmentsInOrder()
		if sec.err != nil {
			return nil, fmt.Errorf("wasmlayout: data section: %w", sec.err)
		}
		kept := cut(segs, lo, hi)
		body := binary.AppendUvarint(nil, uint64(len(kept)))
		for _, s := range kept {
			body = appendSegment(body, s)
		}
		out := append(append([]byte{}, module[:start]...), secData)
		out = binary.AppendUvarint(out, uint64(len(body)))
		out = append(out, body...)
		return append(out, module[r.pos:]...), nil
	}
	return nil, errors.New("wasmlayout: no data section")
}

// cut returns segs with the bytes [lo, hi) left out.
func cut(segs []segment, lo, hi uint64) []segment {
	var out []segment
	for _, s := range segs {
		end := s.addr + uint64(len(s.data))
		if end <= lo || s.addr >= hi {
			out = append(out, s)
			continue
		}
		if s.addr < lo {
			out = append(out, segment{addr: s.addr, data: s.data[:lo-s.addr]})
		}
		if end > hi {
			out = append(out, segment{addr: hi, data: s.data[hi-s.addr:]})
		}
	}
	return out
}

// appendSegment appends s as an active segment of memory 0 at an
// i32.const address, as the Go linker writes them.
func appendSegment(b []byte, s segment) []byte {
	b = append(b, 0, 0x41)
	b = appendSLEB(b, int64(int32(uint32(s.addr))))
	b = append(b, 0x0b)
	b = binary.AppendUvarint(b, uint64(len(s.data)))
	return append(b, s.data...)
}

func appendSLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
