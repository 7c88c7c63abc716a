package rls

// The protobuf wire format (varints, tags, length-delimited fields), just
// what the request encoder and the reply decoder use. Why not protowire:
// its package initialization formats errors with fmt, which links fmt and
// reflect into the plugin (about 350 KB of module, resident in every Envoy);
// TestWireAgainstProtowire holds these to protowire.

// wireType is a protobuf wire type.
type wireType int8

const (
	varintType     wireType = 0
	fixed64Type    wireType = 1
	bytesType      wireType = 2
	startGroupType wireType = 3
	endGroupType   wireType = 4
	fixed32Type    wireType = 5
)

// errWire is the (negative) length a consume function returns for a
// malformed field; callers only test n < 0.
const errWire = -1

// maxGroupDepth bounds the nesting of groups that consumeFieldValue skips
// (protowire's default recursion limit).
const maxGroupDepth = 10000

// Not inlined: a copy at each call site costs more wasm code than
// the call (docs/design/memory.md, "Inlining").
//
//go:noinline
func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendTag(b []byte, num int32, typ wireType) []byte {
	return appendVarint(b, uint64(num)<<3|uint64(typ))
}

func appendString(b []byte, s string) []byte {
	return append(appendVarint(b, uint64(len(s))), s...)
}

// sizeVarint is the encoded length of v.
func sizeVarint(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// sizeBytes is the encoded length of a length-delimited field body of n bytes.
func sizeBytes(n int) int { return sizeVarint(uint64(n)) + n }

// consumeVarint reads a varint of at most 10 bytes whose value fits 64 bits.
//
// Not inlined: a copy at each call site costs more wasm code than
// the call (docs/design/memory.md, "Inlining").
//
//go:noinline
func consumeVarint(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < 10; i++ {
		if i >= len(b) {
			return 0, errWire
		}
		c := b[i]
		if i == 9 && c > 1 {
			return 0, errWire // more than 64 bits
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1
		}
	}
	return 0, errWire
}

// consumeTag reads a field's tag: its number (1 to 2^31-1) and wire type.
func consumeTag(b []byte) (int32, wireType, int) {
	v, n := consumeVarint(b)
	if n < 0 || v>>3 == 0 || v>>3 > 1<<31-1 {
		return 0, 0, errWire
	}
	return int32(v >> 3), wireType(v & 7), n
}

// consumeBytes reads a length-delimited field body.
func consumeBytes(b []byte) ([]byte, int) {
	m, n := consumeVarint(b)
	if n < 0 || m > uint64(len(b)-n) {
		return nil, errWire
	}
	return b[n : n+int(m)], n + int(m)
}

// consumeFieldValue skips the value of a field of number num and type typ
// (groups included, to their matching end).
func consumeFieldValue(num int32, typ wireType, b []byte) int {
	return consumeFieldValueDepth(num, typ, b, maxGroupDepth)
}

func consumeFieldValueDepth(num int32, typ wireType, b []byte, depth int) int {
	switch typ {
	case varintType:
		_, n := consumeVarint(b)
		return n
	case fixed32Type:
		if len(b) < 4 {
			return errWire
		}
		return 4
	case fixed64Type:
		if len(b) < 8 {
			return errWire
		}
		return 8
	case bytesType:
		_, n := consumeBytes(b)
		return n
	case startGroupType:
		if depth < 0 {
			return errWire
		}
		total := 0
		for {
			num2, typ2, n := consumeTag(b[total:])
			if n < 0 {
				return errWire
			}
			total += n
			if typ2 == endGroupType {
				if num2 != num {
					return errWire
				}
				return total
			}
			m := consumeFieldValueDepth(num2, typ2, b[total:], depth-1)
			if m < 0 {
				return errWire
			}
			total += m
		}
	}
	return errWire // an end group without its start, or a reserved type
}
