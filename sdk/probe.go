package sdk

import "time"

// ProbeEvery is the shortest interval at which a long hold (longer than
// LongHold and than MaxWait) lets one request through to ask the server
// again (see probeInterval).
//
// A hold that the Transport cannot wait out (longer than MaxWait) makes
// requests fail fast, unsent, with a *RateLimitError, until it ends: the
// contract's "wait for the reset instead of being sent and rejected". If
// that were all, one absurd or lying answer (a reset in the year 2500, a
// correct epoch reset read against a Date of 1970, X-RateLimit-Reset:
// 99999999) would lock the host out for the life of the process: no
// request would ever be sent again, so no answer could ever correct it.
// So a hold longer than an hour (LongHold: the longest window of most
// APIs' rate limits, GitHub's among them) is probed: once the view has
// heard nothing from the server for the probe interval, the next request
// goes out, and its answer replaces the hold, whatever it says (a 200
// lifts it, a new long hold renews it). A server that really means
// "tomorrow" (a daily quota) gets one request an hour. A hold of an hour or
// less is never probed: it is the server's word.
//
// Probing was preferred to capping holds: a cap short enough to matter
// would cut honest daily and hourly quotas short, for every caller at once
// at the end of the cap; a cap of a day still locks a host out for a day on
// one bad answer.
const ProbeEvery = time.Hour

// LongHold is the longest hold the Transport takes as the server's word
// for good: a longer one is probed every ProbeEvery.
const LongHold = time.Hour

// probeInterval is how often an absurd hold lets a probe through: at most
// once per MaxWait, and never more than once per ProbeEvery, whatever
// MaxWait (a client with a MaxWait of a second would otherwise ask a lying
// server every second).
func probeInterval(maxWait time.Duration) time.Duration {
	return max(maxWait, ProbeEvery)
}

// probeDueLocked reports whether a request that the view holds for wait
// may go out now as the view's probe (see cooldown.probeDue). v.mu must be
// held.
func (v *view) probeDueLocked(now time.Time, wait, maxWait time.Duration) bool {
	return v.cooldown.probeDue(now, wait, maxWait)
}

// probedLocked records that the view let its probe through now: the next
// probe is due a probe interval from now. v.mu must be held.
func (v *view) probedLocked(now time.Time) { v.cooldown.hear(now) }

// probeDue reports whether a request held for wait may go out now as a
// probe: the hold is longer than LongHold and maxWait (a shorter one is
// waited out, or fails fast, never probed) and the server has not been
// heard from, nor a probe let through, for the probe interval.
func (c *cooldown) probeDue(now time.Time, wait, maxWait time.Duration) bool {
	return wait > max(LongHold, maxWait) && now.Sub(c.heard) >= probeInterval(maxWait)
}

// lift forgets the view's hold (a cool-down, a spent quota, and the
// requests remembered until resets the hold announced): the server has
// answered a probe, and its answer, applied next, says what holds now.
func (v *view) lift() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.liftLocked()
}

// liftLocked is lift with v.mu held.
func (v *view) liftLocked() {
	v.cooldown.lift()
	v.quota.lift()
	v.spent.clear()
}
