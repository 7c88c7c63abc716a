package sdk

import (
	"cmp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/sdk/header"
)

// maxPolicies is how many named policies a host's view keeps. Past it, the
// policies with nothing to enforce are forgotten; if none is idle, answers
// naming a new policy update the host-level view instead (the behaviour of
// a server that names none), so memory stays bounded whatever the server
// sends.
const maxPolicies = 64

// host is what a Transport knows about one host: a view of the limit of
// each policy the host has named, a host-level view for the answers that
// name none, and the host's retry budget.
//
// Which views hold a request: the host-level view always (a 503 with
// Retry-After, or the headers of a server that names no policy, hold every
// request to the host, as they always have); and the views of the policies
// the request's route has been answered with (see route). A route not
// answered yet is held by no policy, with one exception: while the host has
// named a single policy, that policy holds every route it has not been
// told apart from, because a server with one limit applies it to all of
// them (and names it the same everywhere).
//
// Locking: views are locked in a fixed order, the host-level view first,
// then policies by id, so that a request may hold several at once; h.mu
// (the policy table) may be held while locking a view, never the reverse.
type host struct {
	id       uint64       // distinguishes routes of different hosts, see routeOf
	all      view         // id 0
	adaptive bool         // WithAdaptiveRate: its views learn rates from bare 429s
	used     atomic.Int64 // when a request last looked it up (Unix ns), see touch

	// retries is the host's retry budget, guarded by all.mu.
	retries  retryBudget
	budgeted bool

	tickets atomic.Uint64 // the latest ticket a request took (see line)

	// between, set by tests only, runs in observe after the views that
	// held the request were answered: where another request's answer may
	// come between (see observeUnheld).
	between func()

	mu       sync.Mutex
	policies map[string]*view
	multi    atomic.Bool          // the host has named two policies or more
	single   atomic.Pointer[view] // its only policy, while not multi
}

// touch records that a request looked the host up now, for evict to tell
// the least recently used hosts. To a second: requests to a busy host do
// not all write the same word.
func (h *host) touch(now time.Time) {
	if t := now.UnixNano(); t-h.used.Load() >= int64(time.Second) {
		h.used.Store(t)
	}
}

// named reports whether the host has ever named a policy.
func (h *host) named() bool { return h.multi.Load() || h.single.Load() != nil }

// policy returns the view of the policy the host calls name, creating it,
// or nil when the table is full of policies that still enforce something.
func (h *host) policy(name string, now time.Time) *view {
	h.mu.Lock()
	defer h.mu.Unlock()
	if v := h.policies[name]; v != nil {
		return v
	}
	if h.policies == nil {
		h.policies = make(map[string]*view)
	}
	if len(h.policies) >= maxPolicies {
		for k, v := range h.policies {
			if v.idle(now) {
				v.retire()
				delete(h.policies, k)
			}
		}
		if len(h.policies) >= maxPolicies {
			return nil
		}
	}
	v := newView(strings.Clone(name), viewIDs.Add(1), h.id, h.adaptive)
	h.policies[v.name] = v
	switch {
	case h.multi.Load():
	case len(h.policies) == 1:
		h.single.Store(v)
	default:
		h.multi.Store(true)
		h.single.Store(nil)
	}
	return v
}

// idle reports whether nothing of the host's is left to enforce.
func (h *host) idle(now time.Time) bool {
	if !h.all.idle(now) {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, v := range h.policies {
		if !v.idle(now) {
			return false
		}
	}
	return true
}

// maxViews is the most views that hold one request: the host's and its
// route's policies.
const maxViews = 1 + maxRoutePolicies

// governing is the set of views that hold one request, host-level view
// first, then policies by id (the lock order).
type governing struct {
	n  int
	vs [maxViews]*view
	tk [maxViews]ticket
}

// behind reports whether a request that came before the request with
// places pl waits in the line of a view of g (see places.behindLocked).
func (g *governing) behind(pl *places) bool {
	for _, v := range g.vs[:g.n] {
		if pl.free || !v.line.busy() {
			continue // no lock
		}
		v.mu.Lock()
		ahead := pl.behindLocked(v)
		v.mu.Unlock()
		if ahead {
			return true
		}
	}
	return false
}

// govern fills g with the views that hold a request of route k to h, and
// reports whether the route is known.
func (h *host) govern(rs *routes, k routeKey, g *governing) (known bool) {
	g.vs[0], g.n = &h.all, 1
	if !h.named() {
		return false // a host that never named a policy: no lookup at all
	}
	r, known := rs.get(k)
	if !known {
		if s := h.single.Load(); s != nil && !h.multi.Load() {
			g.vs[1], g.n = s, 2
		}
		return false
	}
	for _, v := range r.views[:r.n] {
		if v.host != h.id {
			continue // another host's route with the same hash
		}
		i := g.n
		for ; i > 1 && g.vs[i-1].id > v.id; i-- {
			g.vs[i] = g.vs[i-1]
		}
		g.vs[i] = v
		g.n++
	}
	return true
}

// held is acquire's answer for a request it did not admit.
type held struct {
	wait   time.Duration // the longest hold of the views (0: none), and
	holder *view         // the view that asks it
	// refills: the holder's limit refills continuously (a token bucket,
	// see shape.tokenEvery).
	refills bool
	// queued: requests that came first wait in a view's line (see line):
	// woken is closed when its front leaves. The wait in line lasts at
	// least lineWait, the turns of the requests ahead at the slowest of
	// those views' paces (see view.lineWaitLocked); strict says that pace
	// is learned from bare 429s, and moved is closed if it changes.
	// again: nothing holds the request, but it skipped its pacing turns
	// (see places.skipped): it looks for them first.
	again    bool
	queued   bool
	strict   bool
	lineWait time.Duration
	moved    <-chan struct{}
	woken    <-chan struct{} // closed if the hold ends early (see view.wakeLocked)
}

// inLine notes that v's line has requests that came before the request
// with places pl. v.mu must be held.
func (hd *held) inLine(v *view, now time.Time, pl *places) {
	if !hd.queued {
		hd.queued, hd.woken = true, v.line.changed()
		hd.holder = cmp.Or(hd.holder, v)
	}
	if d, strict, moved := v.lineWaitLocked(now, pl.ticket); d > hd.lineWait {
		hd.lineWait, hd.strict, hd.moved = d, strict, moved
	}
}

// acquire admits one request now into every view of g (ok), which the
// caller must then report to observe, or says how long to wait before
// asking again (see held), and puts the request in the line of every view
// that holds it (see line); pl are its places. first says whether this is
// the request's first attempt, which earns the host's retry budget its
// share. A view that would hold the request longer than maxWait lets it
// through if its probe is due (see ProbeEvery).
func (h *host) acquire(g *governing, pl *places, now time.Time, first bool, maxWait time.Duration) (hd held, ok bool) {
	vs := g.vs[:g.n]
	for _, v := range vs {
		v.mu.Lock()
	}
	var probes, holds [maxViews]bool
	for i, v := range vs {
		w := v.waitLocked(now)
		if pl.behindLocked(v) {
			hd.inLine(v, now, pl)
		}
		probes[i] = v.probeDueLocked(now, w, maxWait)
		if holds[i] = !probes[i] && w > 0; holds[i] && w > hd.wait {
			hd.wait, hd.holder = w, v
		}
	}
	switch {
	case hd.queued:
	case hd.holder != nil:
		hd.refills = hd.holder.refillsLocked()
		hd.woken = hd.holder.holdLocked(now.Add(hd.wait))
	case pl.skipped:
		hd.again = true
	default:
		h.admitLocked(g, pl, now, first, probes)
		ok = true
	}
	for i, v := range vs {
		switch {
		case ok:
		case holds[i] || pl.behindLocked(v):
			pl.joinLocked(v)
		default:
			// It may go here: it does not hold up the requests behind
			// it meanwhile, and takes its place back (its ticket) if
			// held again.
			pl.leaveLocked(v)
		}
		v.mu.Unlock()
	}
	return hd, ok
}

// admitLocked admits the request into every view of g and takes it out of
// their lines; probes says which views let it through as their probe.
// Every view's mutex must be held.
func (h *host) admitLocked(g *governing, pl *places, now time.Time, first bool, probes [maxViews]bool) {
	for i, v := range g.vs[:g.n] {
		g.tk[i] = v.admitLocked(now)
		if g.tk[i].probe = probes[i]; probes[i] {
			v.probedLocked(now) // the next probe is due an interval from now
		}
		pl.leaveLocked(v)
	}
	if first && h.budgeted {
		h.retries.deposit(now) // guarded by all.mu, vs[0]
	}
}

// holdLocked registers a request held by the view until until, and returns
// withdraw spends one retry from the host's budget, if it has one; it
// reports false when the budget is empty.
func (h *host) withdraw(now time.Time, class int) bool {
	if !h.budgeted {
		return true
	}
	h.all.mu.Lock()
	defer h.all.mu.Unlock()
	return h.retries.withdraw(now, class)
}

// observe reports the outcome of a request that acquire admitted into g:
// the answer goes to the view of the policy it names (the host-level view
// when it names none), and the route learns which policy governs it; the
// other views only learn that the request is no longer in flight. cut
// says the answer was a bare 429 that cut a rate learned by a view (see
// call.cut).
func (h *host) observe(rs *routes, k routeKey, known bool, g *governing, now time.Time, status int, in header.Info, also []string) (cut bool) {
	target := &h.all
	if in.Policy != "" {
		target = h.policyView(rs, k, known, g, now, in.Policy)
	} else if !known && status != 0 && status != 429 && status != 503 && in.Has == 0 && h.named() {
		// A route the host's policies do not limit: once learned, the only
		// policy of the host no longer holds it.
		rs.learn(k, nil)
	}
	held, cut := g.answer(target, now, status, in)
	if h.between != nil {
		h.between()
	}
	// A view that did not hold the request learns when it was sent (the
	// host-level view's ticket): a throttle of a request sent before the
	// learned rate's last cut is of the congestion event already cut for
	// (see adaptiveRate.observe). Taken as sent when answered, every
	// refusal of a crowd sent to a route not yet known cut the rate again.
	unheld := ticket{sent: g.tk[0].sent}
	if !held {
		// The answer names a policy the request was not held by: its view
		// learns from it without counting the request, and assumes that
		// every request in flight to the host may have been counted before.
		cut = h.observeUnheld(target, unheld, now, status, in) || cut
	}
	// The other policies a problem document says the request violated
	// hold their routes as the first does.
	for _, name := range also {
		if name == in.Policy {
			continue
		}
		if v := h.policyView(rs, k, known, g, now, name); v != &h.all && v != target {
			other := in
			other.Policy = name
			cut = h.observeUnheld(v, unheld, now, status, other) || cut
		}
	}
	return cut
}

// observeUnheld reports an answer to v, a policy view that did not hold
// the request, with the host's requests in flight (see view.observe)
// counted in the same step, under the host-level view's lock: no request
// to the host is admitted or answered between the count and what v makes
// of it. v settles the crowd of the answers it did not hold on that count
// (see view.settleLocked). Counted before v's lock was taken, an answer
// could count others still in flight that were answered, and settled the
// crowd, before it reached v: it then lowered the budget by requests long
// answered, and a crowd whose answers reached v in the reverse of the
// order the server counted them left a budget of 1 where the server had
// 10 (TestUnheldCrowdCountedInOneStep). Lock order: the host-level view,
// then the policy. cut: see view.observe.
func (h *host) observeUnheld(v *view, t ticket, now time.Time, status int, in header.Info) (cut bool) {
	h.all.mu.Lock()
	defer h.all.mu.Unlock()
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.observeLocked(t, now, status, in, h.all.flight.count())
}

// answer reports an answer to the views of g: the whole answer to target,
// and to the others only that the request is no longer in flight (and, if
// it was their probe, that their hold is void: the server answered with
// another view's word). held says target is one of g's views, cut that
// the answer cut the rate it learns (see view.observe).
func (g *governing) answer(target *view, now time.Time, status int, in header.Info) (held, cut bool) {
	for i, v := range g.vs[:g.n] {
		if v == target {
			held = true
			cut = v.observe(g.tk[i], now, status, in, 0)
			continue
		}
		if g.tk[i].probe && status != 0 {
			v.lift()
		}
		v.observe(g.tk[i], now, 0, header.Info{}, 0)
	}
	return held, cut
}

// policyView returns the view of the policy an answer names, creating it,
// and teaches route k that the policy governs it; the host-level view when
// the host's table of policies is full.
func (h *host) policyView(rs *routes, k routeKey, known bool, g *governing, now time.Time, name string) *view {
	for _, v := range g.vs[1:g.n] {
		if v.name == name && !v.isRetired() {
			if !known {
				rs.learn(k, v)
			}
			return v
		}
	}
	v := h.policy(name, now)
	if v == nil {
		return &h.all // the table is full: per host, as if unnamed
	}
	rs.learn(k, v)
	return v
}

// waitLocked says how long the view holds a request sent now; 0: it may
