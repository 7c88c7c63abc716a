package sdk

import "time"

// cooldown is the hold a rejection asked for (a Retry-After, the reset of
// an exhausted quota): no request goes out before it is over, unless it
// is long enough to be probed (see ProbeEvery and probeDue). The caller
// locks (the view's mutex).
type cooldown struct {
	until time.Time // no request before this
	heard time.Time // the latest answer to the view, or probe it let through (see probeDue)
}

// end is when the hold ends; zero: there is none.
func (c *cooldown) end() time.Time { return c.until }

// left is how long the hold lasts from now; 0 when it is over.
func (c *cooldown) left(now time.Time) time.Duration {
	if now.Before(c.until) {
		return c.until.Sub(now)
	}
	return 0
}

// extend holds requests until until, if that is later than the hold.
func (c *cooldown) extend(until time.Time) {
	if until.After(c.until) {
		c.until = until
	}
}

// hear records that the server answered now, or that a probe went out
// now: the next probe is due a probe interval from now.
func (c *cooldown) hear(now time.Time) { c.heard = now }

// lift forgets the hold.
func (c *cooldown) lift() { c.until = time.Time{} }

// sleepers are the requests a view holds, sleeping until the hold ends or
// an answer ends it early (see wake). The caller locks (the view's
// mutex).
type sleepers struct {
	ch chan struct{} // closed when a hold ends early (see wake); nil: nobody held
	by time.Time     // when the last request held on ch would wake anyway
}

// any reports whether a request is held.
func (s *sleepers) any() bool { return s.ch != nil }

// hold registers a request held until until, and returns the channel that
// wake closes if an answer lets it go sooner.
func (s *sleepers) hold(until time.Time) <-chan struct{} {
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	if until.After(s.by) {
		s.by = until
	}
	return s.ch
}

// wake wakes the held requests if, after an answer, the view would let a
// request go at end, before the latest of them wakes: the answer has
// restored budget the holds did not count on. The crowd of a fixed
// window's first requests is the case: its answers, arriving out of order,
// first leave no budget (each counts the whole crowd as still ahead of it)
// until the lowest Remaining among them restores what the server has left,
// and a held request that slept on until the reset would leave that unused.
//
// It wakes them too when the answer pushed the hold the server asked for
// (pushed) well past the latest of them (by more than a tenth of the time
// they have left to sleep): a request whose deadline the longer hold
// passes must give up now, not when its old hold ends (the contract:
// return as soon as the next attempt is known not to start in time). A
// push of a few milliseconds, as every answer of a crowd refused with the
// same Retry-After brings, wakes nobody.
func (s *sleepers) wake(now, end time.Time, pushed bool) {
	if s.ch == nil {
		return
	}
	pushed = pushed && end.Sub(s.by) > s.by.Sub(now)/10
	if end.Before(s.by) || pushed {
		close(s.ch)
		s.ch, s.by = nil, time.Time{}
	}
}
