package global

// Ref is one global rule of a request: its index, the client's
// fingerprint in this Envoy's table and where its key bytes (its
// descriptor at the service) are.
type Ref struct {
	_      [0]func() // not comparable: no equality function in the module
	Rule   int
	FP     uint64
	Off, N int   // the client's key bytes in Asked.Keys (or a copy of them)
	Cost   int64 // the request's cost at admission (request_header; else 1)
	// Dep is the request's deposit: the hits it takes from the lease at
	// admission.
	Dep uint32
	// Own is the client's fingerprint once FP is the rule's overflow
	// lease (its share of the table is full): what it takes from the
	// overflow it owes its own descriptor too.
	Own uint64
}

// Asked are the global rules a decision set aside and their clients' key
// bytes, in one reused buffer: global rules are decided after every local
// rule admitted the request, and most requests are then served from a
// lease and never need the keys (they are a call's descriptor).
type Asked struct {
	refs []Ref
	keys []byte
}

// Begin starts a decision: no global rule set aside yet.
func (a *Asked) Begin() {
	a.refs = a.refs[:0]
	a.keys = a.keys[:0]
}

// Key keeps a client's key bytes and returns where they start in Keys.
func (a *Asked) Key(key []byte) (off int) {
	off = len(a.keys)
	a.keys = append(a.keys, key...)
	return off
}

// Add sets aside a global rule of the request.
func (a *Asked) Add(r Ref) { a.refs = append(a.refs, r) }

// Refs are the global rules set aside, in rule order; valid until the next
// Begin.
func (a *Asked) Refs() []Ref { return a.refs }

// Keys are the key bytes kept; valid until the next Begin.
func (a *Asked) Keys() []byte { return a.keys }

// KeyOf is r's key bytes in Keys.
func (a *Asked) KeyOf(r Ref) []byte { return a.keys[r.Off : r.Off+r.N] }
