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
	// m indexes list by key. Each ranges over the list: ranging over a
	// map links the runtime's map iteration, about 7 KB of code in every
	// Envoy.
	m       map[Key]int
	list    []callEntry
	scratch []callEntry // Each's copy of list, kept for the next Each
	// owner is the request whose stream is the current context while an
	// answer is handled (nil: the root context); deciding is set while
	// Decide runs (the deciding request's stream is current).
	owner    any
	deciding bool
}

// callEntry is a call in flight and its client.
type callEntry struct {
	_    [0]func() // not comparable: no equality function in the module
	key  Key
	call any
}

// NewCalls returns an empty set of calls.
func NewCalls() Calls { return Calls{m: map[Key]int{}} }

// Get returns the call in flight for k (nil: none).
func (c *Calls) Get(k Key) any {
	if i, ok := c.m[k]; ok {
		return c.list[i].call
	}
	return nil
}

// Put makes call the one in flight for k.
//
// Not inlined: a copy at each call site costs more wasm code than
// the call (docs/design/memory.md, "Inlining").
//
//go:noinline
func (c *Calls) Put(k Key, call any) {
	if i, ok := c.m[k]; ok {
		c.list[i].call = call
		return
	}
	c.m[k] = len(c.list)
	c.list = append(c.list, callEntry{key: k, call: call})
}

// Forget removes call from the calls in flight, if it is still k's (a later
// call for the same client may have taken its place). The last call of the
// list takes its place.
//
// Not inlined: a copy at each call site costs more wasm code than
// the call (docs/design/memory.md, "Inlining").
//
//go:noinline
func (c *Calls) Forget(k Key, call any) {
	i, ok := c.m[k]
	if !ok || c.list[i].call != call {
		return
	}
	delete(c.m, k)
	last := len(c.list) - 1
	if i != last {
		c.list[i] = c.list[last]
		c.m[c.list[i].key] = i
	}
	c.list[last] = callEntry{}
	c.list = c.list[:last]
}

// Len is the number of calls in flight.
func (c *Calls) Len() int { return len(c.list) }

// Each calls fn for each call in flight; fn may Put and Forget calls, as a
// range over a map may: each client in flight when Each began is visited
// once with its call at that moment, unless it was forgotten before; one
// put since is not visited.
func (c *Calls) Each(fn func(call any)) {
	snap := append(c.scratch[:0], c.list...)
	c.scratch = nil // an Each within fn copies into a buffer of its own
	for _, e := range snap {
		if i, ok := c.m[e.key]; ok {
			fn(c.list[i].call)
		}
	}
	clear(snap) // keeps no call alive
	c.scratch = snap[:0]
}

// Deciding says whether a request's decision runs (its stream is the
// current context).
func (c *Calls) Deciding(on bool) { c.deciding = on }

// Answering makes owner's stream the current context while an answer is
// handled (nil: the root context, the tick's). The caller passes a nil
// interface, not a nil pointer, for none.
//
// Not inlined: a copy at each call site costs more wasm code than
// the call (docs/design/memory.md, "Inlining").
//
//go:noinline
func (c *Calls) Answering(owner any) { c.owner = owner }

// Owner is the request whose stream is the current context while an answer
// is handled (nil: the root context).
func (c *Calls) Owner() any { return c.owner }

// Own reports whether the current context is p's stream: p is being
// decided, or the answer being handled is of a call p's stream sent. A
// call sent now is answered to p.
func (c *Calls) Own(p any) bool { return c.deciding || (c.owner != nil && c.owner == p) }
