package main

import "github.com/sluicehq/sluice/plugin/engine"

// pools are what a plugin context reuses from one request to the next.
type pools struct {
	verdicts verdictPool
	streams  streamPool
}

// verdictPool keeps the verdicts of ended streams for the next requests, so
// that deciding a request allocates none: the verdict is most of a
// stream's context, and a VM's linear memory keeps the peak of its heap
// for life.
type verdictPool struct{ free []*engine.Verdict }

// maxPooledVerdicts bounds what the pool keeps after a burst of streams.
const maxPooledVerdicts = 256

func (p *verdictPool) get() *engine.Verdict {
	if n := len(p.free); n > 0 {
		v := p.free[n-1]
		p.free = p.free[:n-1]
		return v
	}
	return new(engine.Verdict)
}

// put takes back v, cleared: a kept verdict holds on to nothing.
func (p *verdictPool) put(v *engine.Verdict) {
	if v == nil || len(p.free) >= maxPooledVerdicts {
		return
	}
	*v = engine.Verdict{}
	p.free = append(p.free, v)
}

// streamPool keeps the contexts of ended streams for the next streams: a
// context was the one allocation of an admitted request, and garbage makes
// a VM's heap grow to the collector's minimum goal (1 MiB at a growth
// target of 25%) and keep that size for life.
type streamPool struct{ free []*httpContext }

func (p *streamPool) get() *httpContext {
	if n := len(p.free); n > 0 {
		h := p.free[n-1]
		p.free = p.free[:n-1]
		return h
	}
	return new(httpContext)
}

// put takes back h, cleared.
func (p *streamPool) put(h *httpContext) {
	if len(p.free) >= maxPooledVerdicts {
		return
	}
	*h = httpContext{}
	p.free = append(p.free, h)
}
