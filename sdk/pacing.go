package sdk

import (
	"sync/atomic"
	"time"
)

// pacing spaces a view's requests: at the rate the server announced, once
// it has limited this client (see view), and, with WithAdaptiveRate, at the
// rate learned from bare 429s (see adaptiveRate); the lower wins. It owns
// the view's pacer. The caller locks (the view's mutex), but for active.
type pacing struct {
	throttled bool          // the host has limited this client: pace
	pacer     *pacer        // nil until throttled with a known rate
	on        atomic.Bool   // pacer != nil, read without the lock
	adaptive  bool          // WithAdaptiveRate
	adapt     *adaptiveRate // the rate learned from bare 429s; nil until an answer
}

// paceTurn is a request's turn at one view's pacer.
type paceTurn struct {
	d       time.Duration   // until it is due
	tk      *turn           // nil: due at once
	learned bool            // the rate is learned from bare 429s (see Transport.pace)
	moved   <-chan struct{} // closed if the turn comes sooner
}

// init sets whether rates are learned from bare 429s.
func (p *pacing) init(adaptive bool) { p.adaptive = adaptive }

// active reports, without the lock, whether requests are paced.
func (p *pacing) active() bool { return p.on.Load() }

// paces reports whether requests are paced.
func (p *pacing) paces() bool { return p.pacer != nil }

// learns reports whether rates are learned from bare 429s.
func (p *pacing) learns() bool { return p.adaptive }

// throttle records that the host has limited this client: from the next
// tune on, requests are paced at the announced rate.
func (p *pacing) throttle() { p.throttled = true }

// reserve hands out the request's turn (see view.pace).
func (p *pacing) reserve(now time.Time, retry, gap bool) (pt paceTurn) {
	pt.tk, pt.d = p.pacer.reserve(now, retry, gap)
	pt.learned = p.adapt.learning()
	if pt.d > 0 {
		pt.moved = p.pacer.changed()
	}
	return pt
}

// delay says how long until tk is due (see view.turnDelay).
func (p *pacing) delay(tk *turn, now time.Time) (pt paceTurn) {
	if p.pacer == nil {
		return pt
	}
	pt.tk, pt.d = tk, p.pacer.delay(tk, now)
	pt.learned = p.adapt.learning()
	if pt.d > 0 {
		pt.moved = p.pacer.changed()
	}
	return pt
}

// after says how long until the turn after k more turns is due (see
// view.lineWaitLocked).
func (p *pacing) after(now time.Time, k int) (d time.Duration, learned bool, moved <-chan struct{}) {
	if d = p.pacer.after(now, k); d > 0 {
		moved = p.pacer.changed()
	}
	return d, p.adapt.learning(), moved
}

// cancel gives back tk, if the pacer that handed it out is still in use.
func (p *pacing) cancel(tk *turn, now time.Time) {
	if p.pacer != nil {
		p.pacer.cancel(tk, now)
	}
}

// learn feeds an answer at now to the adaptive rate: throttled says it is
// a bare 429, sent when its request went out (zero: an answer the view did
// not hold, taken as sent now), inflight how many others are unanswered.
// It reports whether the learned rate changed (and must be tuned to), and
// whether the throttle cut it (it was not of a congestion event already
// cut for, see adaptiveRate.observe).
func (p *pacing) learn(now, sent time.Time, throttled bool, inflight int) (changed, cut bool) {
	if p.adapt == nil {
		p.adapt = new(adaptiveRate)
	}
	if sent.IsZero() {
		sent = now // an answer the view did not hold: taken as sent now
	}
	changed, cut, _ = p.adapt.observe(now, sent, throttled, inflight)
	return changed, cut
}

// tune sets the pacer to the announced rate, Limit per window (announced
// requests per second; 0: unknown), with a burst two below the capacity
// seen (burst): at exactly the server's rate, a client that empties the
// server's bucket keeps it at 0 and is told to wait for the reset; keeping
// two requests in hand absorbs the network's jitter. With
// WithAdaptiveRate, the rate learned from bare 429s (see adaptiveRate)
// paces too, with a burst of a tenth of a second's worth (at least 1),
// starting empty: the host has just pushed back, and its own burst is
// unknown (the AWS SDKs allow a second's worth, which right after a cut
// meets the bucket the host has just said is empty). The lower rate wins.
func (p *pacing) tune(now time.Time, announced float64, announcedBurst int) {
	var every float64 // requests per second
	burst := 0
	if p.throttled && announced > 0 {
		every, burst = announced, announcedBurst
	}
	learned := p.adapt.learning()
	if learned {
		r := p.adapt.pace()
		if every == 0 || r < every {
			every = r
		}
		if b := max(int(r/10), 1); burst == 0 || b < burst {
			burst = b
		}
	}
	if every == 0 {
		if p.pacer != nil {
			p.pacer.wake() // its turns are due at once (see view.turnDelay)
			p.pacer = nil  // the learned rate is forgotten, and nothing was announced
			p.on.Store(false)
		}
		return
	}
	gap := time.Duration(float64(time.Second) / every)
	if p.pacer == nil {
		p.pacer = newPacer(now, gap, burst, learned)
		p.on.Store(true)
		return
	}
	p.pacer.set(now, gap, burst)
}

// busy reports whether pacing has something left to enforce: a rate
// learned from a recent throttle, or requests waiting in the pacer's line
// (see view.idle).
func (p *pacing) busy(now time.Time) bool {
	if p.adapt.recent(now) {
		return true
	}
	return p.pacer != nil && p.pacer.waiting(now)
}
