package engine

import "strconv"

// A bucket's number in its shared-data key (Table.locate).

// appendBucket appends bucket number n in decimal (strconv.AppendUint's
// digits). A number below 2^32 (any table's) is written with 32-bit
// arithmetic: on wasm a 64-bit division by a constant has no multiply-high
// to become and costs several times more. Its digits are counted without a
// loop and written in place, a turn each (the tables' key buffers have
// room for them: no append, which checks the capacity per byte).
func appendBucket(dst []byte, n uint64) []byte {
	if n >= 1<<32 {
		return strconv.AppendUint(dst, n, 10)
	}
	x := uint32(n)
	start := len(dst)
	d := digits32(x)
	if cap(dst)-start < d {
		dst = append(dst, make([]byte, d)...)
	}
	dst = dst[:start+d]
	for i := start + d - 1; i > start; i-- {
		q := x / 10
		dst[i] = byte('0' + x - q*10)
		x = q
	}
	dst[start] = byte('0' + x)
	return dst
}

// digits32 is the number of decimal digits of x, without a loop.
func digits32(x uint32) int {
	switch {
	case x < 10:
		return 1
	case x < 100:
		return 2
	case x < 1000:
		return 3
	case x < 10000:
		return 4
	case x < 100000:
		return 5
	case x < 1000000:
		return 6
	case x < 10000000:
		return 7
	case x < 100000000:
		return 8
	case x < 1000000000:
		return 9
	}
	return 10
}
