package sdk

import "time"

// quota is a view's reading of the requests the server still admits: the
// budget left until the reset, read from answers, refilled for a token
// bucket, freed early by the slide (see spentLog.slide) and restored at
// the reset. It is a pure algorithm: time, and what the view knows of the
// limit's shape, are passed in; the caller locks (the view's mutex).
type quota struct {
	budget  int       // requests the server still admits before resetAt; -1: unknown
	at      time.Time // when budget was last read from an answer (or refilled)
	resetAt time.Time // when the quota is restored; zero: unknown
	slid    int       // requests admitted on budget the slide freed before resetAt (see restore)
	onSlide bool      // budget is what the slide freed
}

// newQuota returns a quota of which nothing is known.
func newQuota() quota { return quota{budget: -1} }

// readAt is when the budget was last read from an answer (or refilled).
func (q *quota) readAt() time.Time { return q.at }

// restoreDue restores the quota if its reset has come (see restore).
func (q *quota) restoreDue(now time.Time, capacity int, window time.Duration) {
	if q.budget >= 0 && !q.resetAt.IsZero() && !now.Before(q.resetAt) {
		q.restore(now, capacity, window)
	}
}

// restore restores the quota at its reset: until a response says what is
// left, the view assumes what the server has shown (capacity) and no
// more, less the requests admitted before the reset on budget the slide
// freed (see spentLog.slide). Those went out after the requests they
// replaced had stopped counting, so they count in the quota that follows:
// with resets rounded up to whole seconds, the slide gives a fixed
// window's requests back a few milliseconds before the restore, and a
// whole quota on top of them sent 11 to 13 requests in a window of 10
// (429s after the first wave, TestConcurrentFixedWindow 1 run in 15). The
// next reset is a window after now, when the window is known.
func (q *quota) restore(now time.Time, capacity int, window time.Duration) {
	q.budget, q.at, q.resetAt = -1, now, time.Time{}
	if capacity > 0 {
		q.budget = max(capacity-q.slid, 0)
		if window > 0 {
			q.resetAt = now.Add(window)
		}
	}
	q.slid, q.onSlide = 0, false
}

// refill adds to the budget the requests a token bucket has earned since
// the budget was read: one per per (see shape.tokenEvery; 0: not a token
// bucket), up to the capacity. So Remaining 0 from a token bucket holds
// the next request until the next token, a tenth of a second at 10 per
// second, and not until the quota is full again: holding everyone until
// the full reset, and then releasing the whole crowd at once to empty the
// bucket again, is how a client paced at exactly the server's rate
// settles at half of it.
func (q *quota) refill(now time.Time, per time.Duration, capacity int) {
	if per <= 0 || q.budget < 0 || q.at.IsZero() || !now.After(q.at) {
		return
	}
	n := now.Sub(q.at) / per
	if n <= 0 {
		return
	}
	q.budget = min(q.budget+int(min(n, 1<<20)), max(capacity, q.budget))
	q.at = q.at.Add(n * per)
}

// wait says how long the quota holds a request sent now (after restoreDue
// and refill): until the next token of a token bucket whose tokens come
// every per, or until the reset. slide says the quota is spent until the
// reset and nothing comes sooner: the slide may free requests earlier
// (see slide). A spent quota whose reset has passed, with no capacity to
// restore, is unknown again: nothing to wait for.
func (q *quota) wait(now time.Time, per time.Duration) (w time.Duration, slide bool) {
	if q.budget != 0 {
		return 0, false
	}
	if !now.Before(q.resetAt) {
		q.budget = -1 // exhausted, with no known reset: nothing to wait for
		return 0, false
	}
	if per > 0 {
		if next := q.at.Add(per); next.Before(q.resetAt) {
			return next.Sub(now), false
		}
	}
	return q.resetAt.Sub(now), true
}

// slide takes what the slide says of a spent quota (see spentLog.slide):
// free requests are admitted now, on a budget of their own; else the next
// one is at, if that comes before the reset. It returns how long to wait.
func (q *quota) slide(now, at time.Time, free int) time.Duration {
	if free > 0 {
		q.budget, q.onSlide = free, true
		return 0
	}
	if at.Before(q.resetAt) {
		return at.Sub(now)
	}
	return q.resetAt.Sub(now)
}

// spentUntilReset reports whether the quota is spent and its reset still
// to come.
func (q *quota) spentUntilReset(now time.Time) bool {
	return q.budget == 0 && now.Before(q.resetAt)
}

// restored reports whether the quota has nothing to wait for: its reset
// is unknown or past.
func (q *quota) restored(now time.Time) bool {
	return q.resetAt.IsZero() || !now.Before(q.resetAt)
}

// take spends one request of the budget, if it is known.
func (q *quota) take() {
	if q.budget > 0 {
		q.budget--
		if q.onSlide {
			q.slid++
		}
	}
}

// set makes b, read now from an answer, the budget until reset (see
// moveReset for always).
func (q *quota) set(b int, now, reset time.Time, always bool) {
	q.budget, q.at, q.onSlide = b, now, false
	q.moveReset(reset, always)
}

// lower makes b, read now from an answer, the budget until reset if it is
// lower than the budget known (or none is): an answer that may have been
// counted out of order may only lower it (see view.observe).
func (q *quota) lower(b int, now, reset time.Time) {
	if q.budget < 0 || b < q.budget {
		q.set(b, now, reset, false)
	}
}

// moveReset moves the reset to an answer's, later only unless always: a
// reset past the one the slide's requests were admitted before is the
// server's word on the quota that counts them (see restore).
func (q *quota) moveReset(reset time.Time, always bool) {
	if reset.After(q.resetAt) {
		q.slid = 0
	} else if !always {
		return
	}
	q.resetAt = reset
}

// lift forgets the quota: the server has answered a probe, and its
// answer, applied next, says what is left.
func (q *quota) lift() {
	q.budget, q.resetAt, q.at = -1, time.Time{}, time.Time{}
	q.slid, q.onSlide = 0, false
}
