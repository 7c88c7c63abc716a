package main

import "encoding/binary"

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
