package wasmlayout

import (
	"encoding/binary"
	"strings"
	"testing"
)

// The runtime's first break is the data's end rounded up to a wasm page;
// it takes PreArena, then aligns the arena to 512 KiB.
func TestArenaGap(t *testing.T) {
	for _, c := range []struct{ end, gap uint64 }{
		{0x1be100, 0x60000}, // the plugin before make build moved its data
		{0x21e100, 0},       // and after: 0x220000 + 384 KiB is 0x280000
		{0x220000, 0},
		{0x220001, 0x70000},
		{0x1e0000, 0x40000},
	} {
		if g := ArenaGap(c.end); g != c.gap {
			t.Errorf("ArenaGap(%#x) = %#x, want %#x", c.end, g, c.gap)
		}
		if a := FirstArena(c.end); a%ArenaBytes != 0 || a-Break(c.end)-PreArena != c.gap {
			t.Errorf("FirstArena(%#x) = %#x", c.end, a)
		}
	}
	l := Layout{DataStart: 0x18e460, End: 0x1be100}
	if d := l.DataAddr(); d != 0x18e000+0x60000 || ArenaGap(l.End+d-0x18e000) != 0 {
		t.Errorf("DataAddr = %#x", d)
	}
}

// module is a wasm module with one memory of pages and one data segment
// holding b at addr.
func module(pages uint64, addr uint32, b []byte) []byte {
	m := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	m = append(m, secMemory)
	m = binary.AppendUvarint(m, uint64(2+len(binary.AppendUvarint(nil, pages))))
	m = append(m, 1, 0)
	m = binary.AppendUvarint(m, pages)
	seg := []byte{1, 0, 0x41} // one active segment at i32.const addr
	seg = appendSLEB(seg, int64(addr))
	seg = append(seg, 0x0b)
	seg = binary.AppendUvarint(seg, uint64(len(b)))
	seg = append(seg, b...)
	m = append(m, secData)
	m = binary.AppendUvarint(m, uint64(len(seg)))
	return append(m, seg...)
}

// bounds is runtime.moduledata's eleven section bounds, noptrdata to end.
func bounds(start, end uint64) []byte {
	var b []byte
	for _, v := range []uint64{start, start + 0x100, start + 0x100, start + 0x200, start + 0x210, start + 0x300, start + 0x300, end, end, end, end} {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

func TestRead(t *testing.T) {
	const start, end = 0x18e460, 0x1be100
	pages := uint64((end + 1<<20) / WasmPage)
	data := append(make([]byte, 16), bounds(start, end)...)
	l, err := Read(module(pages, start, data))
	if err != nil || l != (Layout{DataStart: start, End: end, InitialPages: pages}) {
		t.Fatalf("Read = %+v, %v", l, err)
	}
	// The linker sizes the initial memory from runtime.end: a run of
	// bounds that does not match it is not the module's.
	if _, err := Read(module(pages+1, start, data)); err == nil || !strings.Contains(err.Error(), "found 0") {
		t.Errorf("initial memory off by a page: %v", err)
	}
	if _, err := Read(module(pages, start, append(data, data...))); err == nil || !strings.Contains(err.Error(), "found 2") {
		t.Errorf("two candidates: %v", err)
	}
	if _, err := Read([]byte("not wasm")); err == nil {
		t.Error("not wasm: no error")
	}
}

// The linker leaves runs of zeros out of its data segments: a run inside
// moduledata (the high zero bytes of a bound) splits it over two segments,
// and the bounds are still found.
func TestReadSplitBounds(t *testing.T) {
	const start, end = 0x18e460, 0x1be100
	pages := uint64((end + 1<<20) / WasmPage)
	data := append(make([]byte, 16), bounds(start, end)...)
	img := image{{addr: start, data: data[:16+3]}, {addr: start + 16 + 8, data: data[16+8:]}}
	l, err := img.moduledata(pages)
	if err != nil || l != (Layout{DataStart: start, End: end, InitialPages: pages}) {
		t.Fatalf("moduledata over two segments = %+v, %v", l, err)
	}
}

// TestWithout: a range is left out of the segments, whatever segments hold
// it, and every other byte stays where it was.
func TestWithout(t *testing.T) {
	data := make([]byte, 64)
	for i := range data {
		data[i] = byte(i + 1)
	}
	for _, c := range []struct{ lo, hi uint64 }{
		{0x1010, 0x1020}, // inside
		{0x1000, 0x1008}, // at the start
		{0x1038, 0x1040}, // at the end
		{0x0f00, 0x1030}, // from before it
		{0x2000, 0x2010}, // none of it
	} {
		out, err := Without(module(2, 0x1000, data), c.lo, c.hi)
		if err != nil {
			t.Fatal(err)
		}
		img, pages, err := parse(out)
		if err != nil || pages != 2 {
			t.Fatalf("[%#x, %#x): the module left does not parse: %v (pages %d)", c.lo, c.hi, err, pages)
		}
		if img.overlaps(c.lo, c.hi) {
			t.Errorf("[%#x, %#x): a segment still writes it", c.lo, c.hi)
		}
		for i, b := range data {
			addr := 0x1000 + uint64(i)
			got := img.at(addr, 1)
			if inside := addr >= c.lo && addr < c.hi; !inside && (got == nil || got[0] != b) {
				t.Errorf("[%#x, %#x): the byte at %#x is %v, want %d", c.lo, c.hi, addr, got, b)
			}
		}
	}
}
