package limit

import "time"

// DoneWord counts the end of the request Admit gave ticket, of a fast
// class (see ClassBases.Fast) read by a worker whose loop runs lag late,
// too late for its latency to be a sample (see ClassBases.Timed): no
// latency, but its word on the upstream's queue (see DoneFast), with
// the lag's error taken out. latency has the loop's mean lag taken out
// already, and the answer was read between none and about twice that
// late, so what is left of the lag is within ±lag: the request waited in
// the upstream's queue only if latency is over the word's rise times its
// base by lag or more. Under Envoy's loop lag in a launch (10-20 ms, the
// logins 4 ms) the logins were untimed and the fast classes' word silent
// exactly when slow start crossed the knee; the crossing's queue (7 buys
// of 150 ms ahead on 20 slots: 50 ms and more) is well over the lag.
func (p *Sampler) DoneWord(ticket uint32, latency, base, lag time.Duration) bool {
	if base <= 0 {
		return p.Done(ticket, 0, false, false)
	}
	w := p.window(ticket)
	if w == nil {
		return false
	}
	w.out--
	word := max(latency-lag, 0)
	switch {
	case !p.atOnce:
		w.s.addFastWord(word, base, FastRise)
	case !w.cut:
		p.Ready.addFastWord(word, base, CrossRise)
	}
	p.complete()
	return true
}
