// Package engine is the request-time logic of the Sluice plugin, kept free
// of proxy-wasm calls so it can be tested natively: it finds the client of a
// request, evaluates every matching rule against client state kept in a
// shared key-value store, and says what to do with the request.
//
// The store is proxy-wasm shared data in Envoy. Its semantics, which this
// package relies on, are those of proxy-wasm-cpp-host (internal/wasmhost
// follows them for the tests; README.md, "How it works"):
// process-wide; get copies the value and returns the key's CAS; a set with
// cas 0 is unconditional; a set on a missing key succeeds whatever cas is
// passed; otherwise a set fails when the key changed since the get; there
// is no delete.
package engine

import "errors"

// Store is the shared key-value store the client states live in.
type Store interface {
	// Get returns a copy of the value of key and its CAS. found is false
	// when the key does not exist (err is nil then).
	Get(key string) (value []byte, cas uint32, found bool, err error)
	// Set stores value under key if the key's CAS still equals cas (cas 0:
	// unconditionally). mismatch reports a CAS conflict.
	Set(key string, value []byte, cas uint32) (mismatch bool, err error)
}

// BufferStore is a Store that can read a value into a buffer of the
// caller's: GetInto returns the value in buf[:n] when it fits (a new copy
// otherwise), so a read makes no garbage. The caller owns buf: the value is
// only valid until the caller reuses buf. Table uses it for its buckets,
// reading into the same per-table buffer that already serves a missing
// bucket.
type BufferStore interface {
	Store
	GetInto(key string, buf []byte) (value []byte, cas uint32, found bool, err error)
}

// LayoutSignal is a Store with a process-wide count of the writes of
// layout records beside it (layout.go): in Envoy a counter stat, which
// every VM of the process shares and reads with one host call that returns
// no data, where a shared-data get also calls back into the module for a
// buffer. Whoever writes a layout record counts the write (LayoutWritten)
// after the write and before it decides anything in that layout; a table
// whose view of a region's record was read while the count was n holds
// what the record says as long as the count is still n, and does not read
// it again before a fresh state (locate). ok is false when the count
// cannot be read: the record is read then.
type LayoutSignal interface {
	LayoutWrites() (n uint64, ok bool)
	LayoutWritten()
}

// ErrStore is wrapped by errors from a Store that is unusable.
var ErrStore = errors.New("shared data unavailable")
