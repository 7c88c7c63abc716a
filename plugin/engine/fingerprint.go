// A client's fingerprint: the hash of a rule's key parts for one request.

package engine

import (
	"unsafe"

	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/plugin/internal/ipaddr"
)

// fingerprint hashes the rule and the request's key for that rule.
func (e *Engine) fingerprint(r *config.Rule, ri *requestInfo) uint64 {
	b := e.local.KeyBuf()
	if n := len(b); len(r.Key) == 1 && r.Key[0].Kind == config.KeyClientIP && cap(b)-n >= 18 {
		// A key of the client IP alone (most rules'): its part and the
		// separator without the loop and the append.
		b = b[:n+18]
		b[n] = 'i'
		ri.readAddr(e.cfg)
		*(*[16]byte)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(b)), n+1)) = ri.client.As16()
		b[n+17] = 0
	} else {
		for _, k := range r.Key {
			switch k.Kind {
			case config.KeyClientIP:
				if n := len(b); cap(b)-n >= 17 {
					// appendClient, without its call (most keys are this).
					b = b[:n+17]
					b[n] = 'i'
					putAddr(b, n+1, ri.clientAddr(e.cfg))
				} else {
					b = appendClient(b, ri.clientAddr(e.cfg))
				}
			case config.KeyPath:
				p := ri.t.Path
				if r.Match.IgnoreCase {
					// Every spelling the upstream takes for one path is one
					// client key.
					p = ri.t.Folded
				}
				b = append(append(b, 'p'), p...)
			case config.KeyMethod:
				b = append(append(b, 'm'), ri.t.Method...)
			case config.KeyHeader:
				if val, ok := ri.keyHeader(k.Header); ok {
					b = append(append(b, 'h'), val...)
				} else {
					// A request without the keyed header (or with an empty
					// one, or with several) is keyed by its client IP (not
					// lumped with every other header-less request).
					b = appendClient(b, ri.clientAddr(e.cfg))
				}
			}
			b = append(b, 0)
		}
	}
	// One KeepKey call site: each is inlined (0.7 KB of module).
	return e.local.KeepKey(b, r.ID)
}

// appendClient appends a client IP key part: 'i' and a's 16 bytes (As16).
//
//go:noinline
func appendClient(b []byte, a ipaddr.Addr) []byte {
	var k [17]byte
	k[0] = 'i'
	putAddr(k[:], 1, a)
	return append(b, k[:]...)
}

// putAddr writes a's 16 bytes at b[n:n+16], within b's capacity (the
// caller checks), as one 16-byte move (two 8-byte stores): append would
// copy them with a call in the module.
func putAddr(b []byte, n int, a ipaddr.Addr) {
	*(*[16]byte)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(b)), n)) = a.As16()
}
