package main

import (
	"encoding/binary"
	"unsafe"
)

// appendHeaderMap appends headers to b in the proxy-wasm header-map
// encoding: the pair count, each pair's key and value lengths (uint32 little
// endian), then each key and value followed by a NUL.
func appendHeaderMap(b []byte, headers [][2]string) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(headers)))
	for _, kv := range headers {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(kv[0])))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(kv[1])))
	}
	for _, kv := range headers {
		b = append(append(b, kv[0]...), 0)
		b = append(append(b, kv[1]...), 0)
	}
	return b
}

// headerFields scans b, a header map in the proxy-wasm header-map encoding
// (as appendHeaderMap writes it and proxy_get_header_map_pairs returns it),
// for the fields named name, compared case-insensitively (Envoy's keys are
// lower case already). It returns the first one's value, a view of b, and
// how many there are, counting no further than 2. A malformed map (Envoy
// never sends one) reads as a map without the header.
func headerFields(b []byte, name string) (first string, n int) {
	if len(b) < 4 {
		return "", 0
	}
	count := binary.LittleEndian.Uint32(b)
	if uint64(count) > uint64(len(b)-4)/8 {
		return "", 0
	}
	sizes, data := 4, 4+8*int(count)
	for i := 0; i < int(count); i++ {
		kl := uint64(binary.LittleEndian.Uint32(b[sizes:]))
		vl := uint64(binary.LittleEndian.Uint32(b[sizes+4:]))
		sizes += 8
		if uint64(data)+kl+vl+2 > uint64(len(b)) {
			return "", 0
		}
		k := b[data : data+int(kl)]
		v := b[data+int(kl)+1 : data+int(kl)+1+int(vl)]
		data += int(kl) + int(vl) + 2
		if !equalFoldASCII(k, name) {
			continue
		}
		if n++; n == 2 {
			return first, n
		}
		if len(v) > 0 {
			first = unsafe.String(&v[0], len(v))
		}
	}
	return first, n
}

// equalFoldASCII reports whether k and name are equal, ASCII letters
// compared without case (header names are ASCII tokens).
func equalFoldASCII(k []byte, name string) bool {
	if len(k) != len(name) {
		return false
	}
	for i := 0; i < len(k); i++ {
		a, c := k[i], name[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if a != c {
			return false
		}
	}
	return true
}
