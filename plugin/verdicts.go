package main

// pools are what a plugin context reuses from one request to the next.
type pools struct {
	streams streamPool
}

// maxPooledStreams bounds what the pool keeps after a burst of streams.
const maxPooledStreams = 256

// streamPool keeps the contexts of ended streams for the next streams: a
// context (with its verdict, about 400 bytes) was the one allocation of a
// request, and garbage makes a VM's heap grow to the collector's minimum
// goal (1 MiB at a growth target of 25%) and keep that size for life; the
// verdict is most of it, and a VM's linear memory keeps the peak of its
// heap for life.
type streamPool struct{ free []*httpContext }

func (p *streamPool) get() *httpContext {
	if n := len(p.free); n > 0 {
		h := p.free[n-1]
		p.free = p.free[:n-1]
		return h
	}
	return new(httpContext)
}

// put takes back h, cleared (its verdict with it).
func (p *streamPool) put(h *httpContext) {
	if len(p.free) >= maxPooledStreams {
		return
	}
	*h = httpContext{}
	p.free = append(p.free, h)
}
