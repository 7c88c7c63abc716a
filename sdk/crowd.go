package sdk

import "time"

// lowest is the lowest Remaining among a set of answers, and the latest
// reset among them: what the server has left once every answer of a
// crowd, which reached the server in any order, has come (see
// view.remainingLocked and view.settleLocked). The caller locks (the
// view's mutex).
type lowest struct {
	remaining int       // -1: no answer yet
	end       time.Time // the latest reset among the answers
	taken     time.Time // when the set was last taken (see since)
}

// newLowest returns an empty set of answers.
func newLowest() lowest { return lowest{remaining: -1} }

// open reports whether the set has an answer.
func (l *lowest) open() bool { return l.remaining >= 0 }

// note adds an answer of Remaining remaining, whose quota is restored at
// reset.
func (l *lowest) note(remaining int, reset time.Time) {
	if l.remaining < 0 || remaining < l.remaining {
		l.remaining = remaining
	}
	if reset.After(l.end) {
		l.end = reset
	}
}

// take returns the lowest Remaining and the latest reset, and empties the
// set, now; ok false when it had no answer.
func (l *lowest) take(now time.Time) (remaining int, end time.Time, ok bool) {
	if l.remaining < 0 {
		return 0, time.Time{}, false
	}
	remaining, end = l.remaining, l.end
	l.remaining, l.end, l.taken = -1, time.Time{}, now
	return remaining, end, true
}

// since reports whether a request sent at sent went out after the set was
// last taken: the answer of one sent before belongs to a set already
// taken (see view.remainingLocked).
func (l *lowest) since(sent time.Time) bool { return !sent.Before(l.taken) }
