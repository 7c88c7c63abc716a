package sdk

import (
	"sort"
	"time"

	"github.com/sluicehq/sluice/sdk/header"
)

// maxSpent is the largest quota whose requests a view remembers one by one
// (see spentLog): larger quotas wait for their reset.
const maxSpent = 256

// spentLog remembers when the latest requests a view admitted, and the
// server did not refuse, stop counting against the quota, so that a spent
// quota admits requests again as they stop counting (see slide) rather
// than all at its latest reset. It is a ring of at most maxSpent times,
// kept in order. It is a pure algorithm: time, and what the view knows of
// the limit, are passed in; the caller locks (the view's mutex).
type spentLog struct {
	at     []time.Time // when the latest admitted answers stop counting, oldest first from oldest
	oldest int         // the oldest entry of at, once it is full
	newest uint64      // the highest ticket (see flight) of a request remembered
}

// add remembers when the request admitted with t, answered now with in,
// stops counting: at the reset its answer announced (the quota, with
// every request the server counted before this one, is fully restored
// then), or a window after the answer when it announced none (a status 0:
// the answer named another policy, or never came). capacity and window
// are the view's (see shape): with either unknown, or a quota over
// maxSpent, there is nothing to remember the requests by.
//
// The times are kept in order. An answer that the server is known to have
// counted after every request remembered (t.ordered, and sent after each
// of them) speaks for them too: an earlier time past its reset becomes its
// reset. Any other answer speaks for its own request only, and takes its
// place in the order: a crowd released at once reaches the server in any
// order, and a token bucket tells each of its requests a different reset
// (the time until it is full again, after that request). The request the
// server counted first, answered last, says the shortest; made the reset
// of the whole crowd, it freed the crowd a second after it was sent, when
// the bucket had refilled a fifth of it (TestSpentLogCrowdOutOfOrder).
func (l *spentLog) add(now time.Time, t ticket, in header.Info, capacity int, window time.Duration) {
	if capacity <= 0 || capacity > maxSpent || window <= 0 {
		l.clear() // nothing to remember them by
		return
	}
	at := now.Add(window)
	if in.Has&header.HasReset != 0 {
		at = now.Add(in.Reset)
	}
	last := t.ordered && t.seq > l.newest
	l.newest = max(l.newest, t.seq)
	n := len(l.at)
	switch {
	case n < maxSpent:
		l.at = append(l.at, at)
		n++
	case !at.After(l.at[l.oldest]) && !last:
		return // earlier than every time remembered: the latest are kept
	default:
		l.at[l.oldest] = at
		l.oldest = (l.oldest + 1) % maxSpent
	}
	// at is the latest entry (k = 1); move it, or the times it speaks for,
	// back to keep the order.
	for k := 2; k <= n && l.recent(k).After(at); k++ {
		i, j := (l.oldest+n-k)%n, (l.oldest+n-k+1)%n
		if last {
			l.at[i] = at
		} else {
			l.at[i], l.at[j] = at, l.at[i]
		}
	}
}

// clear forgets every request.
func (l *spentLog) clear() { l.at, l.oldest, l.newest = l.at[:0], 0, 0 }

// recent is when the k-th latest request add remembers stops counting
// (k >= 1, at most len(l.at)).
func (l *spentLog) recent(k int) time.Time {
	n := len(l.at)
	return l.at[(l.oldest+n-k)%n]
}

// slide says when a spent quota (budget 0 before its reset) admits
// requests again, counting the client's own requests, while they are all
// the server counts: the capacity latest the log remembers all still
// counted when the answer that left the budget at 0 came (at readAt).
// Each stops counting at the reset announced with it, whatever the
// server's algorithm: a sliding log gives each request back then, a fixed
// window's requests all go at its reset. So free requests are admitted
// now, or the next one is at; ok false: the reset decides (as it does for
// a token bucket, whose tokens come every per). Waiting for the latest
// reset instead, one caller against a sliding log of 50 per 5 s sent its
// 50 in the first second and then waited 5 s: 8 a second of 10. The
// inflight requests count as spent.
func (l *spentLog) slide(now time.Time, capacity int, per time.Duration, inflight int, readAt time.Time) (free int, at time.Time, ok bool) {
	c := capacity
	if c <= 0 || c > len(l.at) || per > 0 || !l.recent(c).After(readAt) {
		return 0, time.Time{}, false
	}
	used := inflight + sort.Search(c, func(i int) bool { return !l.recent(i + 1).After(now) })
	if used < c {
		return c - used, now, true
	}
	if k := c - inflight; k >= 1 {
		return 0, l.recent(k), true
	}
	return 0, time.Time{}, false
}
