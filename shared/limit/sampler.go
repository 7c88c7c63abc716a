package limit

import "time"

// Sampler gathers one worker's latency samples of a Gauge round so that
// they say what the upstream's latency is, not how fast its fastest answers
// are.
//
// A round decides on its first N samples. Counted as they arrive, those are
// the round's fastest answers: a request admitted late in the round is
// counted only if it was quick. Where service times vary (25-75 ms), the
// first 16 answers of 16 in flight average 10-15% under the upstream's
// mean, and less so the more round trips a round spans. A Base learnt in
// rounds of one size then reads as a queue in rounds of another, and the
// limit ratchets down on an upstream that has no queue at all.
//
// So samples are counted by admission, in windows: a window holds the
// requests this worker admitted in a span of time, and its samples count
// only once all of them are done, the slow ones with the quick. Whether a
// request is counted then no longer depends on its latency. The price is
// time: a round's samples reach the Gauge about one latency later.
//
// A request still not done wait after its window closed is counted at its
// age then (a lower bound, as for a stream that ended without an answer):
// a request that never answers does not stop learning, and one that takes
// far longer than the others still counts as long.
//
// The zero Sampler is ready for use; Reset starts it on a round.
type Sampler struct {
	_ [0]func() // not comparable: no equality function in the module
	// Ready holds the samples of complete windows, not yet added to the
	// Gauge (its Round is the round the Sampler was reset to).
	Ready Samples
	win   [samplerWindows]window
	n     int    // windows in use; win[n-1] is open
	next  uint32 // the ticket of the next window opened
	// atOnce: the fast classes' word counts in Ready as soon as each
	// sample is back, not when its window completes (see ResetTo).
	atOnce bool
}

// window is the requests admitted from a time on, until the next window
// opened.
type window struct {
	_      [0]func() // not comparable: no equality function in the module
	ticket uint32
	from   int64
	out    int64 // admitted, not yet done
	s      Samples
	// cut: a request of the window ended before its answer, early (see
	// Cut): the window's samples are those of the quick ones only.
	cut bool
	// bears is the longest stall the samples of all the window's
	// requests bear (see AdmitBearing; 0: not said, none).
	bears time.Duration
}

// samplerWindows bounds the windows in use: the open one stays open while
// they all are.
const samplerWindows = 8

// Reset drops every window and sample, and starts gathering samples of
// round at now: the requests admitted before are not counted.
func (p *Sampler) Reset(round uint32, now int64) {
	next := p.next
	*p = Sampler{Ready: Samples{Round: round}, next: next}
	p.open(now)
}

// ResetTo is Reset for g's round. In a round that watches slow start's
// growth (see Gauge.WordAtOnce), a sample of a fast class gives its word
// on the upstream's queue at once (see DoneFast).
func (p *Sampler) ResetTo(g Gauge, now int64) {
	p.Reset(g.Round, now)
	p.atOnce = g.WordAtOnce()
}

func (p *Sampler) open(now int64) {
	p.next++
	if p.next == 0 {
		p.next = 1 // 0 is no ticket
	}
	p.win[p.n] = window{ticket: p.next, from: now}
	p.n++
}

// Admit counts a request admitted at now and returns its ticket, for Done.
// span is how long a window stays open to admissions (a new one opens when
// the windows are not all in use).
func (p *Sampler) Admit(now int64, span time.Duration) uint32 {
	if p.n == 0 {
		p.Reset(p.Ready.Round, now)
	}
	if now-p.win[p.n-1].from >= int64(span) && p.n < samplerWindows {
		p.open(now)
	}
	w := &p.win[p.n-1]
	w.out++
	return w.ticket
}

// AdmitBearing is Admit for a request whose sample a stall of the worker
// of up to bears does not move (for a rule with classes: an eighth of its
// class's latency, see ClassBases.Bears): a stall drops its window only
// if longer (see LateBy).
func (p *Sampler) AdmitBearing(now int64, span, bears time.Duration) uint32 {
	t := p.Admit(now, span)
	if w := &p.win[p.n-1]; w.out == 1 || bears < w.bears {
		w.bears = bears
	}
	return t
}

// Done counts the end of the request Admit gave ticket: with its latency
// when sample is set, or only as done (an answer that says nothing about
// the upstream). It reports whether the request was still counted (not
// admitted before a Reset, nor in a window given up on).
func (p *Sampler) Done(ticket uint32, latency time.Duration, sample, saturated bool) bool {
	return p.DoneBase(ticket, latency, 0, sample, saturated)
}

// DoneBase is Done for a rule with classes: the request's class has the
// no-queue latency base (see ClassBases; 0: a rule without classes).
func (p *Sampler) DoneBase(ticket uint32, latency, base time.Duration, sample, saturated bool) bool {
	return p.done(ticket, latency, base, sample, false, saturated)
}

// DoneFast is DoneBase with a sample of a fast class (see
// ClassBases.Fast): it also counts in Samples.Fast and Queued, when its
// window completes, or at once in Ready in a round that watches slow
// start's growth (see ResetTo; unless its window was given up on).
func (p *Sampler) DoneFast(ticket uint32, latency, base time.Duration, saturated bool) bool {
	return p.done(ticket, latency, base, true, base > 0, saturated)
}

func (p *Sampler) done(ticket uint32, latency, base time.Duration, sample, fast, saturated bool) bool {
	w := p.window(ticket)
	if w == nil {
		return false
	}
	w.out--
	switch {
	case sample && fast:
		// Its latency waits for the window (see Sampler). Its word on
		// the queue does not, after slow start's growth: it is the
		// round's first sign that the growth filled the upstream (see
		// Gauge.WordAtOnce), 100 ms and more before the buys of its
		// window are back.
		w.s.AddBase(latency, base, saturated)
		switch {
		case !p.atOnce:
			w.s.addFastWord(latency, base, FastRise)
		case !w.cut:
			p.Ready.addFastWord(latency, base, CrossRise)
			if saturated && latency < FastRise*base {
				p.Ready.Calm++
			}
		}
	case sample && base > 0:
		w.s.AddBase(latency, base, saturated)
	case sample:
		w.s.Add(latency, saturated)
	}
	p.complete()
	return true
}

// window returns the window of ticket with a request still out, or nil.
func (p *Sampler) window(ticket uint32) *window {
	for i := range p.n {
		if w := &p.win[i]; w.ticket == ticket && ticket != 0 && w.out > 0 {
			return w
		}
	}
	return nil
}

// Counts reports whether the request Admit gave ticket will count as a
// sample (its window is still counted: not given up on, cut or dropped in
// a stall, see Late).
func (p *Sampler) Counts(ticket uint32) bool {
	w := p.window(ticket)
	return w != nil && !w.cut
}

// Cut counts the end of the request Admit gave ticket before its answer
// (its client gone), at an age that says nothing (under the latency
// learnt): its window's other samples are then those of the requests that
// answered before it, the quicker ones, and the window counts for
// nothing. It reports whether the request was still counted.
func (p *Sampler) Cut(ticket uint32) bool {
	if w := p.window(ticket); w != nil {
		w.cut = true
	}
	return p.Done(ticket, 0, false, false)
}

// Late drops the windows opened at or before since whose requests are not
// all done: the worker that reads their answers was late (its event loop
// stalled from about since on, see the engine's loop lag), so their
// latencies include that wait, which is not the upstream's. They count for
// nothing, as a cut window does. Windows opened after since were opened
// once the loop ran again, and count as usual; if the open window was
// dropped, a new one opens at now for the admissions to come.
// It returns how many windows it dropped (not counting those dropped
// before).
func (p *Sampler) Late(since, now int64) int { return p.LateBy(since, now, MaxLatency) }

// LateBy is Late for a stall of by: it drops only the windows whose
// requests do not all bear it (see AdmitBearing). In a launch, Envoy's
// loop ran 2-20 ms late again and again: dropping every window with a
// request out dropped nearly every buy (150 ms out, a stall catches it),
// and no round could end for as long (the store-wide model with Envoy's
// lag: a median of 76% of the orders, 86% with windows that bear it).
func (p *Sampler) LateBy(since, now int64, by time.Duration) int {
	dropped := 0
	for i := range p.n {
		if w := &p.win[i]; w.out > 0 && w.from <= since && !w.cut && by >= w.bears {
			w.cut = true
			dropped++
		}
	}
	if p.n > 0 && p.n < samplerWindows && p.win[p.n-1].cut {
		p.open(now)
	}
	return dropped
}

// Close closes the open window at now when it has been open span or
// longer: its samples count once its requests are done, without waiting
// for the next admission.
func (p *Sampler) Close(now int64, span time.Duration) {
	if p.n == 0 || p.n == samplerWindows || now-p.win[p.n-1].from < int64(span) {
		return
	}
	p.open(now)
	p.complete()
}

// Expire gives up at now on the requests still out in windows that closed
// wait or longer ago: each counts as a sample of its age (the time since
// its window closed, a lower bound).
func (p *Sampler) Expire(now int64, wait time.Duration) {
	for p.n > 1 && now-p.win[1].from >= int64(wait) {
		w := &p.win[0]
		age := time.Duration(now - p.win[1].from)
		for ; w.out > 0; w.out-- {
			switch {
			case w.s.Exp > 0:
				// A rule with classes: against the window's mean base.
				w.s.AddBase(age, w.s.Exp/time.Duration(w.s.N), false)
			case p.Ready.Exp > 0:
				w.s.AddBase(age, p.Ready.Exp/time.Duration(p.Ready.N), false)
			default:
				w.s.Add(age, false)
			}
		}
		p.complete()
	}
}

// complete moves the samples of the oldest windows whose requests are all
// done to Ready (never the open window: it may admit more).
func (p *Sampler) complete() {
	for p.n > 1 && p.win[0].out <= 0 {
		if w := &p.win[0]; !w.cut {
			p.Ready.N += w.s.N
			p.Ready.Sum += w.s.Sum
			p.Ready.Exp += w.s.Exp
			p.Ready.Fast += w.s.Fast
			p.Ready.Queued += w.s.Queued
			p.Ready.Saturated = p.Ready.Saturated || w.s.Saturated
		}
		copy(p.win[:], p.win[1:p.n])
		p.n--
		p.win[p.n] = window{}
	}
}

// SamplerTiming returns how long a Sampler's windows stay open to
// admissions (span: an eighth of Base, so that the windows in use cover
// about one latency of admissions) and how long it waits for a window's
// last requests (wait: three times Base, a second before Base is known).
func (g Gauge) SamplerTiming() (span, wait time.Duration) {
	if g.Base <= 0 {
		return time.Millisecond, time.Second
	}
	return max(g.Base/8, time.Millisecond), 3 * g.Base
}
