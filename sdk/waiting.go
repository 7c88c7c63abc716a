package sdk

import (
	"cmp"
	"net/http"
	"slices"
	"time"
)

// The hold phase of a call (see call): before each attempt, the request
// waits for its pacing turns, for the holds of the views that govern it,
// and for its place in their lines (see line); every one of these waits is
// bounded by MaxWait and the context's deadline.

// hold waits until every view that governs the next attempt lets it go,
// and admits it into them. Pacing turns are reserved first (see pace);
// then the views' holds (a cool-down, an exhausted quota) and the requests
// that came first (see line) are waited out. stop says the call ends here
// with resp and err: the wait would exceed MaxWait or pass the deadline,
// or the context ended; the call then leaves every line and gives its
// turns back, so that it holds up no request behind it.
func (c *call) hold() (resp *http.Response, err error, stop bool) {
	var paced turns // the views whose pace this attempt has reserved
	c.pl.free, c.inLine = false, time.Time{}
	if resp, err, stop = c.holdLoop(&paced); stop {
		paced.giveBack(c.t.cfg.clock.Now())
		c.pl.leave()
	}
	return resp, err, stop
}

// holdLoop is hold's loop; paced are the turns it reserved.
func (c *call) holdLoop(paced *turns) (resp *http.Response, err error, stop bool) {
	t := c.t
	// The views are looked up again before every attempt: the answer to
	// the last one may have taught the route its policy.
	c.known = c.h.govern(&t.routes, c.rk, &c.g)
	c.pl.keep(&c.g)
	lined := false // the hook heard of its wait in line
	for fresh := c.attempt == 0; ; fresh = false {
		if !fresh { // after any wait, and before a retry
			c.now = t.cfg.clock.Now()
		}
		if pt, v, again, why, ok := c.pace(paced); ok {
			ev := c.holdEvent(pt.d, v)
			if why != "" {
				return c.giveUpHold(ev, why)
			}
			if !again { // a turn re-timed is the same wait
				t.emit(c.ctx, ev)
			}
			if e := t.sleepWake(c.ctx, pt.d, pt.moved, nil); e != nil {
				return c.interrupted(e)
			}
			continue
		}
		hd, ok := c.h.acquire(&c.g, &c.pl, c.now, c.attempt == 0, t.cfg.maxWait)
		if ok {
			return nil, nil, false
		}
		if hd.again {
			continue // it looks for its pacing turns first (see places.skipped)
		}
		if !hd.queued {
			c.inLine = time.Time{}
		} else if c.inLine.IsZero() {
			c.inLine = c.now
		}
		if hd.refills || hd.queued {
			// Held by a token bucket until its next token, or behind
			// requests that came first: the turns reserved before the
			// hold are given back and taken again after it, in order.
			// Kept, they would release the whole crowd of waiters at
			// once when the hold ends, to empty the server's bucket
			// again. (A window restores its whole quota at the reset:
			// there, the crowd that the budget releases at once is what
			// the server admits.)
			paced.giveBack(c.now)
		}
		if e, stop := c.sleepHeld(hd, &lined); stop {
			return e.resp, e.err, true
		}
		c.known = c.h.govern(&t.routes, c.rk, &c.g) // a concurrent answer may have taught the route
		paced.keep(&c.g, t.cfg.clock.Now())
		c.pl.keep(&c.g)
	}
}

// lineRecheck is the longest a request waiting in a view's line behind
// requests that came first sleeps before it looks again, when no hold
// says when: the front's leaving wakes it (see line), this only bounds the
// cost of a wake-up missed.
const lineRecheck = time.Second

// waited reports why a wait that began at since cannot go on for d more
// from now, or "": it would last longer than MaxWait in all, or pass the
// deadline. A turn at a pace that moves, or a place in a line that moves
// slowly, is one wait however many times it is re-timed or woken: else a
// request would wait for good, each step shorter than MaxWait.
func (c *call) waited(since time.Time, d time.Duration) string {
	if why := c.t.tooLong(c.ctx, c.now, d); why != "" {
		return why
	}
	if c.now.Sub(since)+d > c.t.cfg.maxWait {
		return GiveUpMaxWait
	}
	return ""
}

// ended is how a call ends when its hold is not waited out.
type ended struct {
	resp *http.Response
	err  error
}

// sleepHeld waits out a hold acquire reported, or gives up when it cannot
// be waited out (stop, with how the call ends). lined says the request
// waited in line already: the hook heard of that wait.
//
// A wait in line behind requests that came first (see line) has no end
// known in advance: it is made in steps (the front's leaving wakes it),
// and ends when the request has waited MaxWait in line, or at the
// deadline: the request then gives up, or, if no hold of the server's
// holds it, only the turns of the requests ahead at a pace the server
// announced, goes past the lines (pacing at an announced rate is advice,
// see pace). At a pace learned from bare 429s, it gives up as soon as the
// turns of the requests ahead (hd.lineWait) cannot end in time, as a turn
// of its own would (see pace).
func (c *call) sleepHeld(hd held, lined *bool) (e ended, stop bool) {
	t := c.t
	ev := c.holdEvent(hd.wait, hd.holder)
	d, why := hd.wait, ""
	if d > 0 {
		why = t.tooLong(c.ctx, c.now, d)
	}
	if hd.queued && why == "" {
		if hd.strict {
			why = c.waited(c.inLine, max(d, hd.lineWait))
		}
		if why == "" {
			d, why = c.lineStep(cmp.Or(d, lineRecheck))
		}
		if why != "" && hd.wait <= 0 && !hd.strict {
			c.pl.free = true
			c.pl.leave()
			return e, false
		}
		if *lined {
			ev = RetryEvent{} // one event for the whole wait in line
		}
		*lined = true
	}
	if why != "" {
		ev = c.holdEvent(max(hd.wait, hd.lineWait), hd.holder)
		e.resp, e.err, _ = c.giveUpHold(ev, why)
		return e, true
	}
	if ev.Request != nil {
		t.emit(c.ctx, ev)
	}
	if err := t.sleepWake(c.ctx, d, hd.woken, hd.moved); err != nil {
		e.resp, e.err, _ = c.interrupted(err)
		return e, true
	}
	return e, false
}

// lineStep cuts a step of d in line to what is left of MaxWait since the
// wait in line began and of the time to the deadline, or says why no step
// is left.
func (c *call) lineStep(d time.Duration) (time.Duration, string) {
	left := c.t.cfg.maxWait - c.now.Sub(c.inLine)
	why := GiveUpMaxWait
	if dl, ok := c.ctx.Deadline(); ok && dl.Sub(c.now) <= left {
		left, why = dl.Sub(c.now), GiveUpDeadline
	}
	if left <= 0 {
		return 0, why
	}
	return min(d, left), ""
}

func (c *call) holdEvent(d time.Duration, v *view) RetryEvent {
	ev := RetryEvent{Request: c.req, Attempt: c.attempt, Reason: HostLimit, Delay: d, Limit: fromInfo(c.info), Policy: v.name}
	if c.resp != nil {
		ev.StatusCode = c.resp.StatusCode
	}
	return ev
}

// giveUpHold ends the call because a hold cannot be waited out: the first
// attempt is not sent at all (a *RateLimitError), a retry leaves the last
// outcome standing.
func (c *call) giveUpHold(ev RetryEvent, why string) (*http.Response, error, bool) {
	ev.GiveUp = why
	c.t.emit(c.ctx, ev)
	if c.attempt > 0 {
		return c.resp, c.err, true
	}
	closeBody(c.req)
	return nil, &RateLimitError{RetryAfter: ev.Delay, Host: c.req.URL.Host}, true
}

func (c *call) interrupted(e error) (*http.Response, error, bool) {
	if c.attempt == 0 {
		closeBody(c.req)
	}
	discard(c.resp)
	return nil, e, true
}

// pace reserves the attempt's turn at the rate of each view that governs
// it and paces (see view), in order, and returns the first wait to make,
// with the view that asks for it; again says the turn was reserved before
// (its time has moved, or its holder was woken to look). paced holds the
// turns the attempt has reserved. Pacing at an announced rate is advice: a
// wait that would make the attempt's wait exceed MaxWait or pass the
// deadline (see call.waited) is given back and skipped, never a reason to
// fail. Pacing at a rate learned from bare 429s (WithAdaptiveRate) is not:
// the host has shown it refuses requests sent faster, so such a wait is
// returned with why it does not fit, for the caller to give up.
//
// A request behind requests that came first, in the line of any view that
// governs it (see line), reserves no turn: it waits its place in line
// first (see acquire). Given turns while it waits there, it would spend
// them, or push back the turns of the requests ahead of it, and move no
// further. A request that waits for a turn waits in the view's line, so
// that no request that came after it takes the view's turns before it.
//
// A retry takes the first turn in line: it has waited its backoff, after
// a refusal that cut a learned rate. Sent soon after the cut, the host's
// bucket refilling, it is admitted; queued behind the callers' first
// attempts (seconds, with dozens of callers), it meets the next probe
// past the rate, and a request refused at every attempt is lost. A last
// attempt comes after an empty turn (see gap): a backoff as long as the
// learned rate takes to climb back brings it to the next probe too.
func (c *call) pace(paced *turns) (pt paceTurn, v *view, again bool, why string, ok bool) {
	if c.pl.skipped = c.g.behind(&c.pl); c.pl.skipped {
		return paceTurn{}, nil, false, "", false
	}
	for _, v := range c.g.vs[:c.g.n] {
		i := paced.find(v)
		if again = i >= 0; again {
			pt = v.turnDelay(paced.ts[i], c.now)
		} else {
			var reserved bool
			if pt, reserved = v.pace(c.now, c.attempt > 0, c.gap(), &c.pl); !reserved {
				continue
			}
			i = paced.add(v, pt.tk, c.now)
		}
		if pt.d <= 0 {
			continue
		}
		if why = c.waited(paced.at[i], pt.d); why != "" {
			v.cancelTurn(pt.tk, c.now)
			paced.vs[i], paced.ts[i] = nil, nil
			if pt.learned {
				return pt, v, again, why, true
			}
			continue
		}
		return pt, v, again, "", true
	}
	return paceTurn{}, nil, false, "", false
}

// gap reports whether the attempt's pacing turns come after an empty turn
// (see pacer.reserve): it is the request's last, after a refusal that cut
// a learned rate (see cut). Refused again, the request is lost.
//
// Each cut is a probe past the rate: the turn that found the host's bucket
// empty, the first to do so since the last cut. Its request's retry takes
// the first turn in line once its backoff is over (see pace), but the
// learned rate climbs back to where the host refused at about the same time
// after every cut (1.9 s at 10/s), and from the third attempt on the backoff
// (0.75-2.25 s, then 1.1-3.4 s) brought the retry there about once in 18:
// TestPacingAdaptiveCrowd's cold start gives 2-3 requests a second refusal
// at a probe, and one in a hundred runs lost a request refused at all four
// attempts. The turn before a probe was admitted, so the probe came less
// than 1/R - 1/r too early (R the host's rate, r the learned one: 13 ms at
// 10 and 11.5/s); a turn left empty before the retry, 1/r, makes up for it
// while r < 2R. It costs the crowd a turn (half a second at 2/s): given to
// every retry after a cut, that cost TestAdvCrowdRateFlaps (a host whose
// rate falls to 2/s and 5/s) a fifth of its successes, so it is spent only
// where a refusal loses the request.
func (c *call) gap() bool { return c.cut && c.attempt == c.t.cfg.maxAttempts-1 }

// turns are the pacing turns one attempt has reserved, one per view (a
// nil turn: due when reserved), and when each was reserved.
type turns struct {
	vs [maxViews]*view
	ts [maxViews]*turn
	at [maxViews]time.Time
}

// find returns the index of v's turn, or -1.
func (p *turns) find(v *view) int {
	for i, u := range p.vs {
		if u == v {
			return i
		}
	}
	return -1
}

// add records v's turn tk, reserved at now, and returns its index.
func (p *turns) add(v *view, tk *turn, now time.Time) int {
	i := p.find(nil) // there is room: one turn per view of a request
	p.vs[i], p.ts[i], p.at[i] = v, tk, now
	return i
}

// keep gives back the turns of the views that no longer govern the
// attempt (g changed: the route learned its policies meanwhile). Kept,
// such a turn would hold its place in a line the attempt no longer waits
// in, and the turns of a server that names a new policy in every answer
// would outgrow the one slot per view (a panic).
func (p *turns) keep(g *governing, now time.Time) {
	for i, v := range p.vs {
		if v != nil && !slices.Contains(g.vs[:g.n], v) {
			v.cancelTurn(p.ts[i], now)
			p.vs[i], p.ts[i] = nil, nil
		}
	}
}

// giveBack cancels the reserved turns (those not yet due go back to their
// pacer) and forgets them, so that the attempt reserves new ones.
func (p *turns) giveBack(now time.Time) {
	for i, v := range p.vs {
		if v != nil {
			v.cancelTurn(p.ts[i], now)
		}
		p.vs[i], p.ts[i] = nil, nil
	}
}
