package global

// Calls are a worker's calls to the rate-limit service in flight, at most
// one per client of a rule (Key), and which request's stream is the
// current proxy-wasm context. The Go SDK delivers a call's answer only
// while the stream that sent it lives (or to the root context, for a call
// sent from the tick), so whether a call may be sent now depends on whose
// stream is current: the deciding request's (Decide), a waiting request's
// whose call is being answered, or none (the tick).
//
// A call and a request are the engine's (pointers, compared by identity):
// Calls only keeps them. Not a type parameter: a generic type's
// instantiation names spell out its type arguments and cost the wasm
// module kilobytes.
type Calls struct {
	m map[Key]any
	// owner is the request whose stream is the current context while an
	// answer is handled (nil: the root context); deciding is set while
	// Decide runs (the deciding request's stream is current).
	owner    any
	deciding bool
}

// NewCalls returns an empty set of calls.
func NewCalls() Calls { return Calls{m: map[Key]any{}} }

// Get returns the call in flight for k (nil: none).
func (c *Calls) Get(k Key) any { return c.m[k] }

// Put makes call the one in flight for k.
func (c *Calls) Put(k Key, call any) { c.m[k] = call }

// Forget removes call from the calls in flight, if it is still k's (a later
// call for the same client may have taken its place).
func (c *Calls) Forget(k Key, call any) {
	if c.m[k] == call {
		delete(c.m, k)
	}
}

// Len is the number of calls in flight.
func (c *Calls) Len() int { return len(c.m) }

// Each calls fn for each call in flight; fn may Put and Forget calls (as a
// range over a map may).
func (c *Calls) Each(fn func(call any)) {
	for _, call := range c.m {
		fn(call)
	}
}

// Deciding says whether a request's decision runs (its stream is the
// current context).
func (c *Calls) Deciding(on bool) { c.deciding = on }

// Answering makes owner's stream the current context while an answer is
// handled (nil: the root context, the tick's). The caller passes a nil
// interface, not a nil pointer, for none.
func (c *Calls) Answering(owner any) { c.owner = owner }

// Owner is the request whose stream is the current context while an answer
// is handled (nil: the root context).
func (c *Calls) Owner() any { return c.owner }

// Own reports whether the current context is p's stream: p is being
// decided, or the answer being handled is of a call p's stream sent. A
// call sent now is answered to p.
func (c *Calls) Own(p any) bool { return c.deciding || (c.owner != nil && c.owner == p) }
