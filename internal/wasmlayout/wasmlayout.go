// Package wasmlayout reads and edits how a Go wasip1 module lays out its
// static data and heap in linear memory, so that the plugin's build keeps
// every VM (one per Envoy worker) from writing memory nothing needs
// (docs/design/memory.md):
//
//   - Read, ArenaGap, DataAddr: where the static data ends and where the Go
//     runtime (Go 1.26, runtime/mem_sbrk.go and malloc.go) puts its first
//     heap arena. The runtime starts its break at the end of the static data
//     rounded up to a 64 KiB wasm page, takes 384 KiB of it for its own
//     metadata (PreArena), and aligns its first heap arena to 512 KiB,
//     clearing the gap it skips. Moving the static data (the linker's -D
//     flag) so that the arena starts where the break already is removes the
//     gap; the hole left below the data is never written.
//   - RuntimeOverlay: the runtime files the plugin is linked with (go build
//     -overlay): findfunc without findfunctab, and the gaps skipped to
//     align later arenas handed out without being cleared (they are zero).
//   - LocateFuncTab, WithoutFuncTab: runtime.findfunctab (320 bytes per
//     function on wasm) left out of the data segments of a module linked
//     with the overlay.
package wasmlayout

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// The Go runtime's layout of a wasip1 heap (Go 1.26).
const (
	WasmPage   = 64 << 10  // physPageSize on wasm
	ArenaBytes = 512 << 10 // heapArenaBytes on wasm
	// PreArena is what the runtime takes from its break before the first
	// heap arena, measured from the pages a started VM writes: the first
	// persistentalloc chunk (persistentChunkSize, 256 KiB), a page of
	// page-allocator summaries (pageAlloc.sysInit) and one more page it
	// never writes. plugin/wasmtest's TestArenaGap fails when a Go release
	// changes it.
	PreArena = 2*WasmPage + 256<<10
)

// Layout is the static data of a Go module as linked.
type Layout struct {
	// DataStart is runtime.noptrdata, the first Go data in the data
	// segment; the linker starts the segment on the 4 KiB page holding
	// it (after its build information).
	DataStart    uint64
	End          uint64 // runtime.end: the end of the static data and BSS
	InitialPages uint64 // the memory section's initial size
}

// ArenaGap is how many bytes the runtime clears before its first heap
// arena when the static data ends at end.
func ArenaGap(end uint64) uint64 { return FirstArena(end) - (alignUp(end, WasmPage) + PreArena) }

// FirstArena is the address of the runtime's first heap arena when the
// static data ends at end.
func FirstArena(end uint64) uint64 { return alignUp(alignUp(end, WasmPage)+PreArena, ArenaBytes) }

// Break is the runtime's first break: the end of the static data rounded
// up to a wasm page (runtime.initBloc).
func Break(end uint64) uint64 { return alignUp(end, WasmPage) }

// DataAddr is the data segment's address that leaves no arena gap: the
// linker's -D value (a multiple of its 4 KiB rounding quantum). Moving the
// segment by a multiple of 64 KiB moves runtime.end as much; the build
// reads the relinked module again to check that the gap is gone.
func (l Layout) DataAddr() uint64 { return l.DataStart/linkRound*linkRound + ArenaGap(l.End) }

// linkRound is the wasm linker's segment rounding (-R, 4096 by default).
const linkRound = 4096

func alignUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

// Read finds the layout of module, a Go wasm module (stripped or not).
func Read(module []byte) (Layout, error) {
	mem, pages, err := parse(module)
	if err != nil {
		return Layout{}, err
	}
	// The linker sizes the initial memory as runtime.end plus 1 MB
	// (cmd/link/internal/wasm, writeMemorySec).
	return mem.moduledata(pages)
}

// segment is one active data segment: bytes at an address.
type segment struct {
	addr uint64
	data []byte
}

type image []segment

// at returns the n bytes at addr when one segment holds them all (the
// segments sorted by address).
func (m image) at(addr, n uint64) []byte {
	i := sort.Search(len(m), func(i int) bool { return m[i].addr > addr }) - 1
	if i < 0 || addr-m[i].addr > uint64(len(m[i].data)) || uint64(len(m[i].data))-(addr-m[i].addr) < n {
		return nil
	}
	return m[i].data[addr-m[i].addr:][:n]
}

func (m image) u64(addr uint64) (uint64, bool) {
	if b := m.at(addr, 8); b != nil {
		return binary.LittleEndian.Uint64(b), true
	}
	return 0, false
}

func (m image) u32(addr uint64) (uint32, bool) {
	if b := m.at(addr, 4); b != nil {
		return binary.LittleEndian.Uint32(b), true
	}
	return 0, false
}

// offNoptrdata is the offset of noptrdata in runtime.moduledata (Go 1.26,
// runtime/symtab.go): pcHeader, six slices, findfunctab, minpc, maxpc,
// text and etext come first; from noptrdata on, eleven section bounds run
// up to end.
const offNoptrdata = 8 + 6*24 + 5*8

// moduledata finds runtime.firstmoduledata's section bounds: noptrdata,
// enoptrdata, data, edata, bss, ebss, noptrbss, enoptrbss, covctrs,
// ecovctrs, end in order, the data past the linker's reserved low
// memory, end at enoptrbss, and end matching the initial memory the
// linker sized from it (end plus 1 MB). Exactly one place must match.
func (m image) moduledata(pages uint64) (Layout, error) {
	l, _, err := m.moduledataLayout(pages)
	return l, err
}

// moduledataAt returns the address of runtime.moduledata's noptrdata field.
func (m image) moduledataAt(pages uint64) (uint64, error) {
	_, at, err := m.moduledataLayout(pages)
	return at, err
}

func (m image) moduledataLayout(pages uint64) (Layout, uint64, error) {
	var found []Layout
	var at uint64
	base, flat := m.flat()
	for off := (8 - base%8) % 8; off+11*8 <= uint64(len(flat)); off += 8 {
		var b [11]uint64
		ok := true
		for i := range b {
			b[i] = binary.LittleEndian.Uint64(flat[off+uint64(i)*8:])
			ok = ok && (i == 0 || b[i] >= b[i-1])
		}
		if ok && b[0] >= minDataAddr && b[10] == b[7] && (b[10]+1<<20)/WasmPage == pages {
			found = append(found, Layout{DataStart: b[0], End: b[10], InitialPages: pages})
			at = base + off
		}
	}
	if len(found) != 1 {
		return Layout{}, 0, fmt.Errorf("wasmlayout: found %d places holding runtime.moduledata's section bounds, want 1 (not a Go 1.26 wasm module?)", len(found))
	}
	return found[0], at, nil
}

// flat returns the memory the segments initialize, from the first
// segment's address on, the gaps between them zero: the linker leaves runs
// of zeros out of its segments, and such a run can fall inside moduledata
// (the high zero bytes of one bound and a low zero byte of the next),
// splitting it over two segments.
func (m image) flat() (uint64, []byte) {
	if len(m) == 0 {
		return 0, nil
	}
	base, end := m[0].addr, m[0].addr
	for _, s := range m {
		base = min(base, s.addr)
		end = max(end, s.addr+uint64(len(s.data)))
	}
	flat := make([]byte, end-base)
	for _, s := range m {
		copy(flat[s.addr-base:], s.data)
	}
	return base, flat
}

// minDataAddr is where the linker starts data at the earliest
// (cmd/link/internal/ld, wasmMinDataAddr).
const minDataAddr = 4096 + 8192

const (
	secMemory = 5
	secData   = 11
)

// parse returns the active data segments and the initial memory pages.
func parse(m []byte) (image, uint64, error) {
	if len(m) < 8 || !bytes.Equal(m[:8], []byte{0, 'a', 's', 'm', 1, 0, 0, 0}) {
		return nil, 0, errors.New("wasmlayout: not a wasm module")
	}
	r := reader{b: m, pos: 8}
	var img image
	var pages uint64
	for r.pos < len(r.b) && r.err == nil {
		id := r.byte()
		size := r.uleb()
		if r.err != nil || size > uint64(len(r.b)-r.pos) {
			return nil, 0, errors.New("wasmlayout: truncated section")
		}
		sec := reader{b: r.b[r.pos : r.pos+int(size)]}
		r.pos += int(size)
		switch id {
		case secMemory:
			if sec.uleb() != 1 || sec.byte() != 0 {
				return nil, 0, errors.New("wasmlayout: want one memory without a maximum")
			}
			pages = sec.uleb()
		case secData:
			img = sec.segments()
		}
		if sec.err != nil {
			return nil, 0, fmt.Errorf("wasmlayout: section %d: %w", id, sec.err)
		}
	}
	if r.err != nil || pages == 0 || len(img) == 0 {
		return nil, 0, errors.New("wasmlayout: no memory or data section")
	}
	return img, pages, nil
}

// segments reads a data section of active segments for memory 0 at
// constant offsets, as the Go linker writes them.
func (r *reader) segments() image {
	img := r.segmentsInOrder()
	sort.Slice(img, func(i, j int) bool { return img[i].addr < img[j].addr })
	return img
}

// segmentsInOrder reads the segments in the module's order.
func (r *reader) segmentsInOrder() image {
	var img image
	for n := r.uleb(); n > 0 && r.err == nil; n-- {
		if r.uleb() != 0 || r.byte() != 0x41 { // active, i32.const
			r.err = errors.New("unsupported data segment")
			return nil
		}
		addr := r.sleb()
		if r.byte() != 0x0b {
			r.err = errors.New("unsupported data segment offset")
			return nil
		}
		size := r.uleb()
		if size > uint64(len(r.b)-r.pos) {
			r.err = errors.New("truncated data segment")
			return nil
		}
		img = append(img, segment{addr: uint64(uint32(addr)), data: r.b[r.pos : r.pos+int(size)]})
		r.pos += int(size)
	}
	return img
}

type reader struct {
	b   []byte
	pos int
	err error
}

func (r *reader) byte() byte {
	if r.pos >= len(r.b) {
		r.err = errors.New("unexpected end")
		return 0
	}
	r.pos++
	return r.b[r.pos-1]
}

func (r *reader) uleb() uint64 {
	var v uint64
	for shift := 0; shift < 64; shift += 7 {
		c := r.byte()
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v
		}
	}
	r.err = errors.New("bad LEB128")
	return 0
}

func (r *reader) sleb() int64 {
	var v int64
	shift := 0
	for ; shift < 64; shift += 7 {
		c := r.byte()
		v |= int64(c&0x7f) << shift
		if c&0x80 == 0 {
			if shift+7 < 64 && c&0x40 != 0 {
				v |= -1 << (shift + 7)
			}
			return v
		}
	}
	r.err = errors.New("bad LEB128")
	return 0
}
