package rls

import (
	"bytes"
	"math"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// compareWire holds the consume functions to protowire on b: the same
// lengths (or both an error) and values.
func compareWire(t *testing.T, b []byte) {
	t.Helper()
	v, n := consumeVarint(b)
	pv, pn := protowire.ConsumeVarint(b)
	if (n < 0) != (pn < 0) || n >= 0 && (n != pn || v != pv) {
		t.Fatalf("consumeVarint(%x) = %d, %d; protowire %d, %d", b, v, n, pv, pn)
	}
	num, typ, n := consumeTag(b)
	pnum, ptyp, pn := protowire.ConsumeTag(b)
	if (n < 0) != (pn < 0) || n >= 0 && (n != pn || num != int32(pnum) || int8(typ) != int8(ptyp)) {
		t.Fatalf("consumeTag(%x) = %d, %d, %d; protowire %d, %d, %d", b, num, typ, n, pnum, ptyp, pn)
	}
	by, n := consumeBytes(b)
	pby, pn := protowire.ConsumeBytes(b)
	if (n < 0) != (pn < 0) || n >= 0 && (n != pn || !bytes.Equal(by, pby)) {
		t.Fatalf("consumeBytes(%x) = %d; protowire %d", b, n, pn)
	}
	if n := len(b); n > 0 {
		// The first byte as the field number and type, the rest as value.
		num, typ := int32(b[0]>>3)+1, wireType(b[0]&7)
		m := consumeFieldValue(num, typ, b[1:])
		pm := protowire.ConsumeFieldValue(protowire.Number(num), protowire.Type(typ), b[1:])
		if (m < 0) != (pm < 0) || m >= 0 && m != pm {
			t.Fatalf("consumeFieldValue(%d, %d, %x) = %d; protowire %d", num, typ, b[1:], m, pm)
		}
	}
}

func TestWireAgainstProtowire(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 255, 300, 1<<14 - 1, 1 << 14, 1<<21 + 5, 1 << 35, 1<<56 - 1, 1 << 63, math.MaxUint64} {
		if got, want := appendVarint(nil, v), protowire.AppendVarint(nil, v); !bytes.Equal(got, want) || sizeVarint(v) != protowire.SizeVarint(v) {
			t.Errorf("varint %d: %x (size %d), protowire %x (size %d)", v, got, sizeVarint(v), want, protowire.SizeVarint(v))
		}
		compareWire(t, appendVarint(nil, v))
	}
	for _, num := range []int32{1, 2, 15, 16, 2047, 2048, 1<<29 - 1} {
		for typ := wireType(0); typ < 6; typ++ {
			if got, want := appendTag(nil, num, typ), protowire.AppendTag(nil, protowire.Number(num), protowire.Type(typ)); !bytes.Equal(got, want) {
				t.Errorf("tag %d/%d: %x, protowire %x", num, typ, got, want)
			}
		}
	}
	for _, n := range []int{0, 1, 127, 128, 70000} {
		s := string(make([]byte, n))
		if got, want := appendString(nil, s), protowire.AppendString(nil, s); !bytes.Equal(got, want) || sizeBytes(n) != protowire.SizeBytes(n) {
			t.Errorf("string of %d bytes differs", n)
		}
	}
	for _, b := range [][]byte{
		nil, {0x80}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02},
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x80, 0x00}, {0x00}, {0x07}, {0x08}, {0xf8, 0xff, 0xff, 0xff, 0x7f}, {0xf8, 0xff, 0xff, 0xff, 0xff, 0x01},
		{0x03, 0x0b, 0x0c}, {0x03, 0x0b, 0x08, 0x01, 0x0c}, {0x03, 0x0b, 0x14}, {0x04}, {0x06}, {0x0a, 0x02, 'h', 'i'}, {0x0a, 0x03, 'h'},
		append(bytes.Repeat([]byte{0x0b}, 10002), bytes.Repeat([]byte{0x0c}, 10002)...),
	} {
		compareWire(t, b)
	}
}

func FuzzWire(f *testing.F) {
	f.Add([]byte{0x0a, 0x02, 'h', 'i'})
	f.Add([]byte{0x03, 0x0b, 0x08, 0x01, 0x0c})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) { compareWire(t, b) })
}
