//go:build wasip1

package main

import "unsafe"

// codeDetailsPath is the property path response.code_details in the ABI's
// encoding, prepared once.
var codeDetailsPath = []byte("response\x00code_details")

// codeDetailsBuf receives response.code_details (see sluiceOnMemoryAllocate):
// "via_upstream" and Envoy's own details fit; a longer value gets a buffer
// of its own.
var codeDetailsBuf [64]byte

// getCodeDetails returns Envoy's response.code_details of the current
// stream ("via_upstream" for a response of the upstream), valid until the
// next call; nil when Envoy has none.
func getCodeDetails() []byte {
	out := &hostOut
	*out = hostResult{}
	allocInto = codeDetailsBuf[:]
	st := proxyGetProperty(&codeDetailsPath[0], int32(len(codeDetailsPath)), unsafe.Pointer(&out.ret), &out.size)
	allocInto = nil
	ret, size := out.ret, out.size
	if st != 0 || ret == nil {
		return nil
	}
	return unsafe.Slice(ret, size)
}
