package main

import "github.com/sluicehq/sluice/plugin/engine"

// verdictPool keeps the verdicts of ended streams for the next requests, so
// that deciding a request allocates none: the verdict is most of a
// stream's context, and a VM's linear memory keeps the peak of its heap
// for life.
type verdictPool struct {
	free     []*engine.Verdict
	contexts []*httpContext // getContext
}

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

// getContext and putContext keep ended streams' contexts for the next
// streams, as get and put keep verdicts. A context was the one allocation
// of a request: with none, a VM's Go heap stops growing once it serves
// traffic, and the collector, which runs inline on Envoy's worker and
// marks the whole heap each time, does not run on the request path.
func (p *verdictPool) getContext() *httpContext {
	if n := len(p.contexts); n > 0 {
		h := p.contexts[n-1]
		p.contexts = p.contexts[:n-1]
		return h
	}
	return new(httpContext)
}

// putContext takes back h, whose stream ended, unless something outside
// it may still refer to it (shared: a call to the rate-limit service, a
// concurrency queue or a response held for its charge held it).
func (p *verdictPool) putContext(h *httpContext) {
	if h.shared || len(p.contexts) >= maxPooledVerdicts {
		return
	}
	p.contexts = append(p.contexts, h)
}
