package main

import "github.com/sluicehq/sluice/plugin/engine"

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
