package sdk

import (
	"math"
	"slices"
	"sort"
	"time"
)

// A view lets the requests it holds go in the order it first held them:
// each takes a place at the back of the view's line (view.line) when the
// view first holds it, and when the view admits requests again, only as
// many as it admits, from the front of the line, may go; a request that
// has not been held yet goes only if the line leaves room for it.
//
// Without the line, every request held until the same time woke then and
// raced for the quota, and the ones that had just been served, back for
// more, raced as well: 200 callers sharing a quota of 50 per 5 s (a
// sliding log) waited up to 40-50 s for a request, where first come,
// first served takes 20 s, and some were served 6 times in a minute while
// others were served twice (TestHoldReleasesInArrivalOrder).
//
// A place is a number, the request's ticket, handed out by the host in
// increasing order when the request first waits, and the same in every
// view's line: so the lines are sorted, a request's position is a binary
// search, and every line puts two requests in the same order. (Numbered
// per view, a request held by two views could be ahead in one and behind
// in the other of a request in the same case: each kept the other back,
// for good.)

// places are the places one request holds in the lines of the views that
// hold it, one per view, all with its ticket.
type places struct {
	ticket uint64 // 0: none yet
	vs     [maxViews]*view
}

// at returns the request's place in v's line; 0: none.
func (p *places) at(v *view) uint64 {
	for _, u := range p.vs {
		if u == v {
			return p.ticket
		}
	}
	return 0
}

// joinLocked takes the request's place in v's line, unless it has one;
// its ticket is h's next if it has none. v.mu must be held.
func (p *places) joinLocked(h *host, v *view) {
	if p.at(v) != 0 {
		return
	}
	if p.ticket == 0 {
		p.ticket = h.tickets.Add(1)
	}
	for i, u := range p.vs {
		if u == nil { // there is room: one place per view of a request
			p.vs[i] = v
			k := v.aheadLocked(p.ticket)
			v.line = slices.Insert(v.line, k, p.ticket)
			return
		}
	}
}

// leaveLocked gives up the request's place in v's line, if it has one.
// v.mu must be held.
func (p *places) leaveLocked(v *view, admitted bool) {
	for i, u := range p.vs {
		if u == v {
			v.leaveLineLocked(p.ticket, admitted)
			p.vs[i] = nil
		}
	}
}

// leave gives up every place the request holds: it stops waiting (it
// gave up, its context ended, or it was sent). Its next wait takes a new
// ticket.
func (p *places) leave() {
	for _, v := range p.vs {
		if v != nil {
			v.mu.Lock()
			p.leaveLocked(v, false)
			v.mu.Unlock()
		}
	}
	p.ticket = 0
}

// keep gives up the places in the lines of the views that no longer hold
// the request (g changed: its route learned its policies meanwhile): kept,
// the place would hold up the requests behind it for good.
func (p *places) keep(g *governing) {
	for _, v := range p.vs {
		if v != nil && !slices.Contains(g.vs[:g.n], v) {
			v.mu.Lock()
			p.leaveLocked(v, false)
			v.mu.Unlock()
		}
	}
}

// queue takes the request's place in the line of every view of g that
// holds a request now: a retry the server refused, from the refusal on,
// though it sleeps its own backoff first. Queued only once it woke, it
// was behind every request held meanwhile, the ones just served and back
// for more among them: in the first wave of 200 callers against 50 per
// 5 s, the 150 refused waited up to 25 s (1.25 times the fair 20 s).
func (h *host) queue(g *governing, pl *places, now time.Time) {
	for _, v := range g.vs[:g.n] {
		v.mu.Lock()
		if v.waitLocked(now) > 0 {
			pl.joinLocked(h, v)
		}
		v.mu.Unlock()
	}
}

// leaveLineLocked removes place id from the line. A request that leaves
// without being admitted moves the ones behind it up, and they are woken
// to see whether that lets them go; one admitted leaves the ones behind
// as far from the quota as they were (the quota is one smaller too),
// unless it took the last of it: they are woken then to learn how long
// they must wait for more. v.mu must be held.
func (v *view) leaveLineLocked(id uint64, admitted bool) {
	i := v.aheadLocked(id)
	if i >= len(v.line) || v.line[i] != id {
		return
	}
	v.line = append(v.line[:i], v.line[i+1:]...)
	if len(v.line) > i && (!admitted || v.budget == 0) {
		v.wakeAllLocked()
	}
}

// aheadLocked is how many requests in the line are ahead of place id (the
// whole line for a request with no place). v.mu must be held.
func (v *view) aheadLocked(id uint64) int {
	if id == 0 {
		return len(v.line)
	}
	return sort.Search(len(v.line), func(i int) bool { return v.line[i] >= id })
}

// turnLocked reports whether the request with place id (0: none) may go
// now, as far as v's line is concerned: fewer requests are ahead of it
// than the view admits now. Call it when waitLocked says the view admits
// a request. v.mu must be held.
func (v *view) turnLocked(id uint64) bool {
	if len(v.line) == 0 || v.budget < 0 {
		return true // an unknown budget admits everyone: no order to keep
	}
	return v.aheadLocked(id) < v.budget
}

// lineWaitLocked says how long a request that the requests ahead of it in
// line keep from going should wait at most before it looks again (it is
// woken sooner when they go, see leaveLineLocked): until the view admits
// more, if it knows when. The wait is not the request's to give up on (it
// is not known how long the requests ahead take): the hold it meets once
// they have gone is. v.mu must be held.
func (v *view) lineWaitLocked(now time.Time) time.Duration {
	w := time.Duration(math.MaxInt64)
	if per := v.tokenEvery(); per > 0 {
		w = per
	}
	if v.resetAt.After(now) {
		w = min(w, v.resetAt.Sub(now))
	}
	if n := len(v.spent); n > 0 {
		if k := sort.Search(n, func(i int) bool { return !v.recentLocked(i + 1).After(now) }); k > 0 {
			w = min(w, v.recentLocked(k).Sub(now)) // the next one to stop counting
		}
	}
	if w == math.MaxInt64 {
		w = max(v.window, time.Second)
	}
	return max(w, time.Millisecond)
}

// wakeAllLocked wakes every request the view holds, to look again. v.mu
// must be held.
func (v *view) wakeAllLocked() {
	if v.wake != nil {
		close(v.wake)
		v.wake, v.wakeBy = nil, time.Time{}
	}
}
