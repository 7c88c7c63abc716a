package engine

import "unsafe"

// unsafeString views b as a string without copying. The string is only
// valid until b is next modified: it is for passing scratch keys to host
// calls, which copy them.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
