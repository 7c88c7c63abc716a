//go:build wasip1

package engine

import "unsafe"

//go:wasmimport wasi_snapshot_preview1 random_get
//go:noescape
func wasiRandomGet(buf unsafe.Pointer, size uint32) uint32

// ReadRandom fills b from the host's random source (WASI random_get, which
// Envoy serves from its own secure random generator). crypto/rand would do
// the same call but pulls Go's FIPS crypto packages into the module, which
// every worker's VM would then carry as code.
func ReadRandom(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if errno := wasiRandomGet(unsafe.Pointer(&b[0]), uint32(len(b))); errno != 0 {
		return errRandom
	}
	return nil
}
