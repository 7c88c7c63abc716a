package sdk

import (
	"slices"
	"sync/atomic"
)

// A view lets the requests it holds go first come, first served: each
// request takes a ticket from its host when its call starts (a retry keeps
// it), and once a view holds it (a cool-down, a spent quota, a pacing
// turn), it waits in the view's line, sorted by ticket. Only the front of
// the line may look for a pacing turn or be admitted; the others sleep
// until the front leaves (admitted, or giving up), and a request that
// arrives while the line is not empty waits behind the requests in it
// that came before it. So the requests a view releases at once (at a
// reset, after a slide, one token at a time) go one after another, in the
// order they came.
//
// Without the line, every request held until the same time woke then and
// raced for the quota, and the callers just served, back for more, raced
// with them: 200 callers sharing a quota of 50 per 5 s (a sliding log)
// waited up to 45 s for a request, where first come, first served takes
// 20 s, and were served 1 to 4 times each in 40 s
// (TestHoldReleasesInArrivalOrder).
//
// One ticket per request, the same in every view's line, keeps the lines
// in one order: the request with the lowest ticket of all those waiting is
// at the front of every line it is in, so some request always moves (with
// a number per view, two requests held by two views could each be ahead
// of the other in one line, and wait for each other for good).

// line is the tickets of the requests a view holds, in order. The caller
// locks (the view's mutex), but for busy.
type line struct {
	q  []uint64      // sorted
	ch chan struct{} // closed when the front leaves; nil: nobody waits on it
	n  atomic.Int32  // len(q), read without the lock (see busy)
}

// busy reports, without the lock, whether a request waits in line.
func (l *line) busy() bool { return l.n.Load() != 0 }

// join puts ticket t in line, unless it is there.
func (l *line) join(t uint64) {
	if i, ok := slices.BinarySearch(l.q, t); !ok {
		l.q = slices.Insert(l.q, i, t)
		l.n.Store(int32(len(l.q)))
	}
}

// leave takes ticket t out of the line; if it was at the front, the
// requests waiting behind are woken to see whose turn it is.
func (l *line) leave(t uint64) {
	i, ok := slices.BinarySearch(l.q, t)
	if !ok {
		return
	}
	l.q = slices.Delete(l.q, i, i+1)
	l.n.Store(int32(len(l.q)))
	if i == 0 && l.ch != nil {
		close(l.ch)
		l.ch = nil
	}
}

// ahead reports whether a request that came before ticket t waits in line.
func (l *line) ahead(t uint64) bool { return len(l.q) > 0 && l.q[0] < t }

// before counts the requests in line that came before ticket t.
func (l *line) before(t uint64) int {
	i, _ := slices.BinarySearch(l.q, t)
	return i
}

// changed returns a channel closed when the front of the line leaves.
func (l *line) changed() <-chan struct{} {
	if l.ch == nil {
		l.ch = make(chan struct{})
	}
	return l.ch
}

// places are the lines one request waits in, all with its ticket: the
// views that hold it, or whose pacing turn it waits for, or whose line has
// requests that came before it. Each view is in vs[:n] once.
//
// free says the request goes past the lines for the rest of its attempt:
// it could not wait its place in a line that only a pace announced by
// the server makes (see call.sleepHeld), and such a pace is advice, never
// a reason to fail.
//
// skipped says the request did not look for its pacing turns when it
// last looked (see call.pace): a request that came first waited in a
// line. It is not admitted until it has looked again (see host.acquire):
// the request ahead may have left the line since (admitted, or giving up),
// and the request, first now, has no turn. Admitted, it went out past the
// pace: near their common deadline, where callers give up their places by
// the thousand, one caller after another slipped through between two
// looks, and up to 95 requests went out in the last 60 ms of a run paced
// at 20/s (nearly all refused).
type places struct {
	ticket  uint64
	free    bool
	skipped bool
	n       int
	vs      [maxViews]*view
}

// behindLocked reports whether a request that came first waits in v's
// line, and the request waits its turn there (it is not free). v.mu must
// be held.
func (p *places) behindLocked(v *view) bool { return !p.free && v.line.ahead(p.ticket) }

// index returns where v is in p.vs[:p.n], or -1.
func (p *places) index(v *view) int {
	for i, u := range p.vs[:p.n] {
		if u == v {
			return i
		}
	}
	return -1
}

// joinLocked puts the request in v's line. v.mu must be held. There is
// room: a request waits only in the lines of the views that govern it
// (see keep), at most maxViews.
func (p *places) joinLocked(v *view) {
	if p.index(v) >= 0 || p.n == len(p.vs) {
		return
	}
	p.vs[p.n] = v
	p.n++
	v.line.join(p.ticket)
}

// leaveLocked takes the request out of v's line, if it is in it. v.mu must
// be held.
func (p *places) leaveLocked(v *view) {
	i := p.index(v)
	if i < 0 {
		return
	}
	v.line.leave(p.ticket)
	p.n--
	p.vs[i], p.vs[p.n] = p.vs[p.n], nil
}

// leave takes the request out of every line: it was admitted, or stops
// waiting.
func (p *places) leave() {
	for p.n > 0 {
		v := p.vs[p.n-1]
		v.mu.Lock()
		p.leaveLocked(v)
		v.mu.Unlock()
	}
}

// keep takes the request out of the lines of the views that no longer
// govern it (its route learned its policies meanwhile): left there, it
// would hold up the requests behind it for good.
func (p *places) keep(g *governing) {
	for i := p.n - 1; i >= 0; i-- {
		if v := p.vs[i]; !slices.Contains(g.vs[:g.n], v) {
			v.mu.Lock()
			p.leaveLocked(v)
			v.mu.Unlock()
		}
	}
}
