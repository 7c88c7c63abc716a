// A client's fingerprint: the hash of a rule's key parts for one request.

package engine

import (
	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/plugin/internal/ipaddr"
)

// fingerprint hashes the rule and the request's key for that rule.
func (e *Engine) fingerprint(r *config.Rule, ri *requestInfo) uint64 {
	b := e.local.KeyBuf()
	for _, k := range r.Key {
		switch k.Kind {
		case config.KeyClientIP:
			b = appendAddr(append(b, 'i'), ri.clientAddr(e.cfg))
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
				b = appendAddr(append(b, 'i'), ri.clientAddr(e.cfg))
			}
		}
		b = append(b, 0)
	}
	return e.local.KeepKey(b, r.ID)
}

// appendAddr appends a's 16 bytes (As16) as two 8-byte stores where b has
// room: append would copy them with a call in the module.
func appendAddr(b []byte, a ipaddr.Addr) []byte {
	x := a.As16()
	n := len(b)
	if cap(b)-n < 16 {
		return append(b, x[:]...)
	}
	b = b[:n+16]
	putUint64(b[n:], getUint64(x[0:8]))
	putUint64(b[n+8:], getUint64(x[8:16]))
	return b
}
