package sdk

import (
	"cmp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/sdk/header"
)

// maxHosts is how many hosts a Transport remembers. A new host that finds
// the table full cuts it to hostsKept (see hosts.evict), so that the next
// maxHosts-hostsKept new hosts are added without a look at the others.
const (
	maxHosts  = 1024
	hostsKept = maxHosts * 3 / 4
)

// maxPolicies is how many named policies a host's view keeps. Past it, the
// policies with nothing to enforce are forgotten; if none is idle, answers
// naming a new policy update the host-level view instead (the behaviour of
// a server that names none), so memory stays bounded whatever the server
// sends.
const maxPolicies = 64

// hosts is a Transport's table of per-host limit views. Looking a host up
// takes no lock; adding one (and evicting) takes mu.
type hosts struct {
	m   sync.Map // host -> *host
	n   atomic.Int64
	ids atomic.Uint64
	mu  sync.Mutex // held to add hosts and evict them
}

func (hs *hosts) get(name string, now time.Time, rb *RetryBudget, adaptive bool) *host {
	name = strings.ToLower(name) // no allocation when already lower-case
	if h, ok := hs.m.Load(name); ok {
		h := h.(*host)
		h.touch(now)
		return h
	}
	h := &host{id: hs.ids.Add(1), adaptive: adaptive}
	h.all.budget, h.all.crowd, h.all.stray, h.all.adaptive = -1, -1, -1, adaptive
	if rb != nil {
		h.retries, h.budgeted = newRetryBudget(*rb), true
	}
	h.used.Store(now.UnixNano())
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if v, ok := hs.m.Load(name); ok { // added meanwhile
		return v.(*host)
	}
	if hs.n.Load() >= maxHosts {
		hs.evict(now)
	}
	hs.m.Store(name, h)
	hs.n.Add(1)
	return h
}

// evict cuts the table to hostsKept hosts or fewer: first the hosts with
// nothing left to enforce (their learned limits are cheap to learn again),
// then, if that is not enough, the least recently used. A request that
// holds an evicted host finishes with it; the next one to the host starts
// afresh. Cutting a quarter of the table at once makes its cost (a pass
// over the table and a sort) a small constant per host added.
func (hs *hosts) evict(now time.Time) {
	type entry struct {
		name any
		used int64
	}
	busy := make([]entry, 0, hs.n.Load())
	hs.m.Range(func(k, v any) bool {
		h := v.(*host)
		if h.idle(now) {
			hs.m.Delete(k)
			hs.n.Add(-1)
		} else {
			busy = append(busy, entry{k, h.used.Load()})
		}
		return true
	})
	extra := len(busy) - hostsKept
	if extra <= 0 {
		return
	}
	slices.SortFunc(busy, func(a, b entry) int { return cmp.Compare(a.used, b.used) })
	for _, e := range busy[:extra] {
		hs.m.Delete(e.name)
		hs.n.Add(-1)
	}
}

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
				v.retired.Store(true)
				delete(h.policies, k)
			}
		}
		if len(h.policies) >= maxPolicies {
			return nil
		}
	}
	v := &view{name: strings.Clone(name), id: viewIDs.Add(1), host: h.id, budget: -1, crowd: -1, stray: -1, adaptive: h.adaptive}
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

// view is what every request governed by one policy (or, for the
// host-level view, every request to one host) knows about its limit. It
// turns the server's answers into three rules that the next requests obey
// before they are sent:
//
//   - blocked: after a 429 (or 503) with a wait (Retry-After, or the reset
//     of an exhausted quota), no request goes out before the wait is over.
//     One goroutine pays for the lesson; the others do not each earn their
//     own 429.
//   - budget: the requests the server still admits until resetAt. At 0 the
//     next requests wait for the reset, or, when the limit is a token
//     bucket, for its next token (see refillLocked); at the reset the budget becomes the
//     largest quota the server has shown (capacity) and no more, so that a
//     crowd of waiters is released a window's worth at a time instead of as
//     a wave of requests the client already knows will be rejected. See
//     observe for how answers to concurrent requests update it.
//   - pace: once the host has limited this client (a 429, or Remaining at
//     0), requests are spaced at the rate the server announced (Limit per
//     window) through a token bucket a little smaller than the server's.
//     Without it, a client facing a token bucket drains it, is told to wait
//     for the reset in whole seconds, and reaches half the rate it is
//     allowed; with it, the server's bucket never runs dry. Pacing is
//     advice: a pacing wait that would pass MaxWait or the deadline is
//     skipped, never a reason to fail.
//
// The view delays only requests to a host that has shown a limit; it never
// slows a host that sends no rate-limit headers.
type view struct {
	name    string      // the policy's name; "" for the host-level view
	id      uint64      // lock order: policies by id, after the host-level view
	host    uint64      // the id of the host whose policy this is
	retired atomic.Bool // forgotten by its host: routes may drop it

	mu        sync.Mutex
	blocked   time.Time     // no request before this
	budget    int           // requests the server still admits before resetAt; -1: unknown
	budgetAt  time.Time     // when budget was last read from an answer (or refilled)
	resetAt   time.Time     // when the quota is restored; zero: unknown
	slid      int           // requests admitted on budget the slide freed before resetAt (see restoreLocked)
	onSlide   bool          // budget is what the slide freed
	limit     int           // the Limit the server announced; 0: unknown
	maxSeen   int           // the largest Remaining seen, plus one; 0: none seen
	window    time.Duration // the policy's window, or the longest reset seen
	explicit  bool          // window came from the policy's w parameter
	throttled bool          // the host has limited this client: pace
	pacer     *pacer        // nil until throttled with a known rate
	pacing    atomic.Bool   // pacer != nil, read without the lock
	seq       uint64        // requests admitted so far
	lastSend  time.Time     // when the latest of them was admitted
	inflight  int           // admitted and not answered yet
	crowd     int           // lowest Remaining since inflight was last 0; -1: none
	crowdEnd  time.Time     // the latest reset among those answers
	stray     int           // lowest Remaining since an answer the view did not hold; -1: none (see remainingLocked)
	strayEnd  time.Time     // the latest reset among those answers
	spent     []time.Time   // when the latest admitted answers came, oldest first from spentAt (see slideLocked)
	spentAt   int           // the oldest entry of spent, once it is full
	adaptive  bool          // WithAdaptiveRate
	adapt     *adaptiveRate // the rate learned from bare 429s; nil until an answer
	wake      chan struct{} // closed when a hold ends early (see wakeLocked); nil: nobody held
	wakeBy    time.Time     // when the last request held on wake would wake anyway
	heard     time.Time     // the latest answer to the view, or probe it let through (see probeLocked)
}

// ticket identifies an admitted request to observe.
type ticket struct {
	// held: the view admitted the request and counts it in flight. An
	// answer may also name a policy whose view did not hold the request
	// (its route was not known to be governed by it yet).
	held bool
	seq  uint64
	// ordered: no other request was in flight when this one was sent, or
	// the latest was sent at least orderGap before: the server then saw the
	// earlier ones first, so Remaining in this one's answer counts them.
	ordered bool
	// sent is when the request was admitted: a throttle of a request sent
	// before the adaptive rate's last cut belongs to the congestion event
	// already cut for. (The turns of requests still waiting then are
	// re-timed at the cut rate, see pacer.)
	sent time.Time
	// probe: the view held the request longer than MaxWait and let it
	// through to ask again (see ProbeEvery): its answer replaces the hold.
	probe bool
}

// orderGap is how far apart two requests must be sent for the server to be
// assumed to process them in the order they were sent. Requests sent closer
// together (a crowd released at once) race each other to the server.
const orderGap = 10 * time.Millisecond

// paceTurn is a request's turn at one view's pacer.
type paceTurn struct {
	d       time.Duration   // until it is due
	tk      *turn           // nil: due at once
	learned bool            // the rate is learned from bare 429s (see Transport.pace)
	moved   <-chan struct{} // closed if the turn comes sooner
}

// pace reserves the request's turn at the host's announced rate and says
// how long to wait for it; a retry's turn is the first in line (see
// Transport.pace). reserved is false when there is no pacing to do (not
// throttled, rate unknown, or the request must wait for the reset anyway,
// after which it is paced).
func (v *view) pace(now time.Time, retry bool) (pt paceTurn, reserved bool) {
	if !v.pacing.Load() {
		return pt, false // most views never pace: no lock
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.pacer == nil || now.Before(v.blocked) {
		return pt, false
	}
	if v.refillLocked(now); v.budget == 0 && now.Before(v.resetAt) {
		return pt, false
	}
	pt.tk, pt.d = v.pacer.reserve(now, retry)
	pt.learned = v.adapt != nil && v.adapt.enabled
	if pt.d > 0 {
		pt.moved = v.pacer.changed()
	}
	return pt, true
}

// turnDelay says how long until tk, a turn pace handed out, is due now:
// its time follows the rate (see pacer). A turn of a pacer the view has
// dropped is due at once.
func (v *view) turnDelay(tk *turn, now time.Time) (pt paceTurn) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.pacer == nil {
		return pt
	}
	pt.tk, pt.d = tk, v.pacer.delay(tk, now)
	pt.learned = v.adapt != nil && v.adapt.enabled
	if pt.d > 0 {
		pt.moved = v.pacer.changed()
	}
	return pt
}

// cancelTurn gives back tk, a turn pace handed out.
func (v *view) cancelTurn(tk *turn, now time.Time) {
	if tk == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.pacer != nil {
		v.pacer.cancel(tk, now)
	}
}

// viewIDs numbers policy views across every host and Transport, so that
// the lock order is one total order.
var viewIDs atomic.Uint64

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

// acquire admits one request now into every view of g (wait == 0), which
// the caller must then report to observe, or says how long to wait before
// asking again (the longest any view asks), which view asks it, whether
// that view's limit refills continuously (a token bucket, see tokenEvery),
// and a channel closed if an answer ends the hold early (see wakeLocked).
// first says whether this is the request's first attempt, which earns the
// host's retry budget its share. A view that would hold the request longer
// than maxWait lets it through if its probe is due (see ProbeEvery).
func (h *host) acquire(g *governing, now time.Time, first bool, maxWait time.Duration) (wait time.Duration, holder *view, refills bool, woken <-chan struct{}) {
	vs := g.vs[:g.n]
	for _, v := range vs {
		v.mu.Lock()
	}
	var probes [maxViews]bool
	for i, v := range vs {
		w := v.waitLocked(now)
		if probes[i] = v.probeDueLocked(now, w, maxWait); !probes[i] && w > wait {
			wait, holder = w, v
		}
	}
	if holder != nil {
		refills = holder.tokenEvery() > 0
		woken = holder.holdLocked(now.Add(wait))
	}
	if wait <= 0 {
		for i, v := range vs {
			g.tk[i] = v.admitLocked(now)
			if g.tk[i].probe = probes[i]; probes[i] {
				v.heard = now // the next probe is due an interval from now
			}
		}
		if first && h.budgeted {
			h.retries.deposit(now) // guarded by all.mu, vs[0]
		}
	}
	for _, v := range vs {
		v.mu.Unlock()
	}
	return wait, holder, refills, woken
}

// holdLocked registers a request held by the view until until, and returns
// the channel that wakeLocked closes if an answer lets it go sooner. v.mu
// must be held.
func (v *view) holdLocked(until time.Time) <-chan struct{} {
	if v.wake == nil {
		v.wake = make(chan struct{})
	}
	if until.After(v.wakeBy) {
		v.wakeBy = until
	}
	return v.wake
}

// wakeLocked wakes the requests the view holds if, after an answer, the
// view would let a request go before the latest of them wakes: the answer
// has restored budget the holds did not count on. The crowd of a fixed
// window's first requests is the case: its answers, arriving out of order,
// first leave no budget (each counts the whole crowd as still ahead of it)
// until the lowest Remaining among them restores what the server has left,
// and a held request that slept on until the reset would leave that unused.
//
// It wakes them too when the answer pushed the hold (blocked) well past
// the latest of them (by more than a tenth of the time they have left to
// sleep): a request whose deadline the longer hold passes must give up
// now, not when its old hold ends (the contract: return as soon as the
// next attempt is known not to start in time). A push of a few
// milliseconds, as every answer of a crowd refused with the same
// Retry-After brings, wakes nobody. v.mu must be held.
func (v *view) wakeLocked(now time.Time, blockedBefore time.Time) {
	if v.wake == nil {
		return
	}
	end := now.Add(v.waitLocked(now))
	pushed := v.blocked.After(blockedBefore) && end.Sub(v.wakeBy) > v.wakeBy.Sub(now)/10
	if end.Before(v.wakeBy) || pushed {
		close(v.wake)
		v.wake, v.wakeBy = nil, time.Time{}
	}
}

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
// other views only learn that the request is no longer in flight.
func (h *host) observe(rs *routes, k routeKey, known bool, g *governing, now time.Time, status int, in header.Info, also []string) {
	target := &h.all
	if in.Policy != "" {
		target = h.policyView(rs, k, known, g, now, in.Policy)
	} else if !known && status != 0 && status != 429 && status != 503 && in.Has == 0 && h.named() {
		// A route the host's policies do not limit: once learned, the only
		// policy of the host no longer holds it.
		rs.learn(k, nil)
	}
	held := g.answer(target, now, status, in)
	others := -1
	inflight := func() int {
		if others < 0 {
			h.all.mu.Lock()
			others = h.all.inflight
			h.all.mu.Unlock()
		}
		return others
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
		target.observe(unheld, now, status, in, inflight())
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
			v.observe(unheld, now, status, other, inflight())
		}
	}
}

// answer reports an answer to the views of g: the whole answer to target,
// and to the others only that the request is no longer in flight (and, if
// it was their probe, that their hold is void: the server answered with
// another view's word). held says target is one of g's views.
func (g *governing) answer(target *view, now time.Time, status int, in header.Info) (held bool) {
	for i, v := range g.vs[:g.n] {
		if v == target {
			held = true
			v.observe(g.tk[i], now, status, in, 0)
			continue
		}
		if g.tk[i].probe && status != 0 {
			v.lift()
		}
		v.observe(g.tk[i], now, 0, header.Info{}, 0)
	}
	return held
}

// policyView returns the view of the policy an answer names, creating it,
// and teaches route k that the policy governs it; the host-level view when
// the host's table of policies is full.
func (h *host) policyView(rs *routes, k routeKey, known bool, g *governing, now time.Time, name string) *view {
	for _, v := range g.vs[1:g.n] {
		if v.name == name && !v.retired.Load() {
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
// go. v.mu must be held.
func (v *view) waitLocked(now time.Time) time.Duration {
	if now.Before(v.blocked) {
		return v.blocked.Sub(now)
	}
	if v.budget >= 0 && !v.resetAt.IsZero() && !now.Before(v.resetAt) {
		v.restoreLocked(now)
	}
	v.refillLocked(now)
	if v.budget == 0 {
		if now.Before(v.resetAt) {
			if per := v.tokenEvery(); per > 0 {
				if next := v.budgetAt.Add(per); next.Before(v.resetAt) {
					return next.Sub(now)
				}
			}
			if free, at, ok := v.slideLocked(now); ok {
				if free > 0 {
					v.budget, v.onSlide = free, true
					return 0
				}
				if at.Before(v.resetAt) {
					return at.Sub(now)
				}
			}
			return v.resetAt.Sub(now)
		}
		v.budget = -1 // exhausted, with no known reset: nothing to wait for
	}
	return 0
}

// restoreLocked restores the quota at its reset: until a response says
// what is left, the view assumes what the server has shown and no more,
// less the requests admitted before the reset on budget the slide freed
// (see slideLocked). Those went out after the requests they replaced had
// stopped counting, so they count in the quota that follows: with resets
// rounded up to whole seconds, the slide gives a fixed window's requests
// back a few milliseconds before the restore, and a whole quota on top of
// them sent 11 to 13 requests in a window of 10 (429s after the first
// wave, TestConcurrentFixedWindow 1 run in 15). v.mu must be held.
func (v *view) restoreLocked(now time.Time) {
	v.budget, v.budgetAt, v.resetAt = -1, now, time.Time{}
	if c := v.capacity(); c > 0 {
		v.budget = max(c-v.slid, 0)
		if v.window > 0 {
			v.resetAt = now.Add(v.window)
		}
	}
	v.slid, v.onSlide = 0, false
}

// tokenEvery is how often the server adds one request to the quota, for a
// limit that refills continuously (a token bucket), or 0 when the view
// does not know it to: a window (fixed, or unknown) restores its quota only
// at the reset. The server shows a token bucket by admitting fewer at
// once than its announced Limit per window (a burst below the limit),
// which a window never does.
func (v *view) tokenEvery() time.Duration {
	if v.limit <= 0 || v.window <= 0 || v.maxSeen <= 0 || v.maxSeen >= v.limit {
		return 0
	}
	return max(v.window/time.Duration(v.perWindow()), time.Millisecond)
}

// perWindow is how many requests the server admits per v.window: the
// announced Limit, unless the window is only learnt from resets (legacy
// headers name none) and the capacity seen is under half the Limit. A
// reset is then the time a spent burst takes to refill (a token bucket of
// 600 a minute with a burst of 20 says 2 s), and Limit per that time would
// be many times the server's rate; the capacity per that time is its rate,
// at worst a little under it (resets are whole seconds, rounded up). With a
// burst of at least half the Limit, rounding would cost more than that
// error, and the Limit stands.
func (v *view) perWindow() int {
	if c := v.capacity(); !v.explicit && c > 0 && 2*c < v.limit {
		return c
	}
	return v.limit
}

// refillLocked adds to the budget the requests a token bucket has earned
// since the budget was read: one per tokenEvery, up to the capacity. So
// Remaining 0 from a token bucket holds the next request until the next
// token, a tenth of a second at 10 per second, and not until the quota is
// full again: holding everyone until the full reset, and then releasing
// the whole crowd at once to empty the bucket again, is how a client
// paced at exactly the server's rate settles at half of it. v.mu must be
// held.
func (v *view) refillLocked(now time.Time) {
	per := v.tokenEvery()
	if per <= 0 || v.budget < 0 || v.budgetAt.IsZero() || !now.After(v.budgetAt) {
		return
	}
	n := now.Sub(v.budgetAt) / per
	if n <= 0 {
		return
	}
	v.budget = min(v.budget+int(min(n, 1<<20)), max(v.capacity(), v.budget))
	v.budgetAt = v.budgetAt.Add(n * per)
}

// maxSpent is the largest quota whose requests a view remembers one by one
// (see slideLocked): larger quotas wait for their reset.
const maxSpent = 256

// spendLocked remembers, for slideLocked, when a request the view held and
// the server did not refuse, answered now with in, stops counting against
// the quota: at the reset its answer announced (the quota, this request
// and every one answered before it included, is fully restored then), or
// a window after the answer when it announced none (a status 0: the
// answer named another policy, or never came). The times are kept in
// order: an earlier one past a later announcement is that announcement.
// v.mu must be held.
func (v *view) spendLocked(now time.Time, in header.Info) {
	c := v.capacity()
	if c <= 0 || c > maxSpent || v.window <= 0 {
		v.spent, v.spentAt = v.spent[:0], 0 // nothing to remember them by
		return
	}
	at := now.Add(v.window)
	if in.Has&header.HasReset != 0 {
		at = now.Add(in.Reset)
	}
	if len(v.spent) < maxSpent {
		v.spent = append(v.spent, at)
	} else {
		v.spent[v.spentAt] = at
		v.spentAt = (v.spentAt + 1) % maxSpent
	}
	for k := 2; k <= len(v.spent) && v.recentLocked(k).After(at); k++ {
		v.spent[(v.spentAt+len(v.spent)-k)%len(v.spent)] = at
	}
}

// recentLocked is when the k-th latest request spendLocked remembers stops
// counting (k >= 1, at most len(v.spent)). v.mu must be held.
func (v *view) recentLocked(k int) time.Time {
	n := len(v.spent)
	return v.spent[(v.spentAt+n-k)%n]
}

// slideLocked says when a spent quota (budget 0 before its reset) admits
// requests again, counting the client's own requests, while they are all
// the server counts: the capacity latest the view remembers (see
// spendLocked) all still counted when the answer that left the budget at
// 0 came. Each stops counting at the reset announced with it, whatever the
// server's algorithm: a sliding log gives each request back then, a fixed
// window's requests all go at its reset. So free requests are admitted
// now, or the next one is at; ok false: the reset decides. Waiting for
// the latest reset instead, one caller against a sliding log of 50 per
// 5 s sent its 50 in the first second and then waited 5 s: 8 a second of
// 10. Requests in flight count as spent. v.mu must be held.
func (v *view) slideLocked(now time.Time) (free int, at time.Time, ok bool) {
	c := v.capacity()
	if c <= 0 || c > len(v.spent) || v.tokenEvery() > 0 || !v.recentLocked(c).After(v.budgetAt) {
		return 0, time.Time{}, false
	}
	used := v.inflight + sort.Search(c, func(i int) bool { return !v.recentLocked(i + 1).After(now) })
	if used < c {
		return c - used, now, true
	}
	if k := c - v.inflight; k >= 1 {
		return 0, v.recentLocked(k), true
	}
	return 0, time.Time{}, false
}

// admitLocked admits one request that waitLocked let go. v.mu must be held.
func (v *view) admitLocked(now time.Time) (t ticket) {
	if v.budget > 0 {
		v.budget--
		if v.onSlide {
			v.slid++
		}
	}
	t.held = true
	t.ordered = v.inflight == 0 || now.Sub(v.lastSend) >= orderGap
	v.seq++
	t.seq, t.sent = v.seq, now
	v.lastSend = now
	v.inflight++
	return t
}

// capacity is the most requests a restored window admits, as far as the
// client has seen: the largest Remaining seen plus the request that
// received it, at most the announced Limit. It is smaller than Limit for a
// token bucket whose burst is smaller than its limit.
func (v *view) capacity() int {
	if v.maxSeen > 0 && (v.limit == 0 || v.maxSeen < v.limit) {
		return v.maxSeen
	}
	return v.limit
}

// observe records the outcome of the request that acquire admitted with t:
// the response's status and headers, or status 0 for a transport error.
// For a request the view did not hold (t.held false), others is how many
// requests may have reached the server before it without the view counting
// them.
//
// Remaining in an answer does not count the requests sent after it, so the
// budget it implies is Remaining minus those. That holds only if the server
// saw the requests in the order they were sent. A crowd released at once
// reaches the server in any order, and the request sent last may be counted
// first and come back with the highest Remaining; so the answer to a
// request that was not sent in order (see ticket) may only lower the
// budget, by Remaining minus every request still in flight. Once the whole
// crowd has answered, the lowest Remaining among its answers is what the
// server has left, and becomes the budget.
func (v *view) observe(t ticket, now time.Time, status int, in header.Info, others int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	blocked := v.blocked
	defer func() { v.wakeLocked(now, blocked) }() // before the unlock
	if t.held {
		v.inflight--
	}
	if status != 0 {
		if t.probe {
			v.liftLocked() // the answer below says what holds now
		}
		v.heard = now
	}
	if v.adaptive && status != 0 {
		v.learnLocked(now, t.sent, status, in)
	}
	rejected := status == 429 || status == 503
	v.shapeLocked(in)
	if t.held && !rejected {
		v.spendLocked(now, in)
	}
	if in.Has == 0 {
		v.settleLocked(now, others, t.held)
		return
	}
	if in.Has&header.HasRemaining != 0 {
		v.remainingLocked(t, now, in, rejected, others)
	}
	v.settleLocked(now, others, t.held)
	if in.Exhausted() || status == 429 {
		v.throttled = true
	}
	if rejected {
		v.blockLocked(now, status, in)
	}
	v.tune(now)
}

// shapeLocked records what an answer says of the limit's shape: the Limit,
// and the window (the policy's, or the longest reset seen as a lower bound
// of it), which capacity and tokenEvery are computed from. v.mu must be
// held.
func (v *view) shapeLocked(in header.Info) {
	if in.Has&header.HasLimit != 0 && in.Limit > 0 {
		v.limit = in.Limit
	}
	if in.Has&header.HasWindow != 0 {
		v.window, v.explicit = in.Window, true
	} else if in.Has&header.HasReset != 0 && !v.explicit && in.Reset > v.window {
		// No reset exceeds the window, so the longest one seen is the best
		// lower bound of it.
		v.window = min(in.Reset, 24*time.Hour)
	}
}

// remainingLocked learns from the Remaining of an answer to the request
// admitted with t: the capacity it shows and, with a reset, the budget
// until then and the crowd's lowest Remaining (see observe for why an
// answer out of order may only lower the budget). rejected says the answer
// is a 429 or 503. v.mu must be held.
func (v *view) remainingLocked(t ticket, now time.Time, in header.Info, rejected bool, others int) {
	// An admitted request that leaves r shows a capacity of at least
	// r+1; a rejection's 0 shows nothing about it.
	if !rejected && in.Remaining < 1<<30 && in.Remaining+1 > v.maxSeen {
		v.maxSeen = in.Remaining + 1
	}
	if in.Has&header.HasReset == 0 {
		return
	}
	reset := now.Add(in.Reset)
	v.refillLocked(now)
	if t.ordered {
		v.budget = max(in.Remaining-int(min(v.seq-t.seq, 1<<30)), 0)
		v.budgetAt, v.onSlide = now, false
		v.resetLocked(reset, true)
	} else if b := max(in.Remaining-v.inflight-others, 0); v.budget < 0 || b < v.budget {
		v.budget, v.budgetAt, v.onSlide = b, now, false
		v.resetLocked(reset, false)
	}
	// Only the answers to requests this view held make up its crowd. An
	// answer it did not hold (sent before the route was known to be this
	// policy's) may arrive after the crowd was settled, since others is
	// read outside this lock: counted in, its stale Remaining would become
	// the next crowd's budget and hold every request until that crowd's
	// reset (half the rate against a token bucket).
	if t.held {
		if v.crowd < 0 || in.Remaining < v.crowd {
			v.crowd = in.Remaining
		}
		if reset.After(v.crowdEnd) {
			v.crowdEnd = reset
		}
	}
	// The answers the view did not hold make up a crowd of their own, with
	// every answer that comes after them: it is settled only when nothing
	// at all is in flight to the host (see settleLocked), so that no answer
	// can arrive after it. Without it, a policy's first crowd (sent before
	// the route was known to be the policy's) leaves only the budget its
	// answers lowered, to 0 when the lowest Remaining came first.
	if !t.held || v.stray >= 0 {
		if v.stray < 0 || in.Remaining < v.stray {
			v.stray = in.Remaining
		}
		if reset.After(v.strayEnd) {
			v.strayEnd = reset
		}
	}
}

// resetLocked moves resetAt to an answer's reset, later only unless
// always: a reset past the one the slide's requests were admitted before
// is the server's word on the quota that counts them (see restoreLocked).
// v.mu must be held.
func (v *view) resetLocked(reset time.Time, always bool) {
	if reset.After(v.resetAt) {
		v.slid = 0
	} else if !always {
		return
	}
	v.resetAt = reset
}

// blockLocked obeys the wait a rejection (429 or 503) asks for, if any: no
// request goes out before it is over, and after a 429 the quota counts as
// spent until then. v.mu must be held.
func (v *view) blockLocked(now time.Time, status int, in header.Info) {
	w := in.Wait()
	if w <= 0 {
		return
	}
	until := now.Add(w)
	if until.After(v.blocked) {
		v.blocked = until
	}
	if status == 429 {
		// The quota is spent until at least then.
		v.budget, v.budgetAt, v.onSlide = 0, now, false
		v.resetLocked(until, false)
	}
}

// settleLocked makes the lowest Remaining of a crowd the budget once the
// whole crowd has answered (see observe), and that of the answers the view
// did not hold (see remainingLocked) once an answer it did not hold finds
// nothing else in flight to the host (held says whether the view held the
// request answered; others counts the host's requests in flight when it
// did not). v.mu must be held.
func (v *view) settleLocked(now time.Time, others int, held bool) {
	if v.inflight != 0 || others != 0 {
		return
	}
	if v.crowd >= 0 {
		v.budget, v.budgetAt, v.onSlide = v.crowd, now, false
		v.resetLocked(v.crowdEnd, true)
		v.crowd, v.crowdEnd = -1, time.Time{}
	}
	if !held && v.stray >= 0 {
		v.budget, v.budgetAt, v.onSlide = v.stray, now, false
		v.resetLocked(v.strayEnd, true)
		v.stray, v.strayEnd = -1, time.Time{}
	}
}

// learnLocked feeds an answer to the adaptive rate (WithAdaptiveRate): a
// 429 that says nothing of when to come back is a throttle, any other
// answer a success. v.mu must be held.
func (v *view) learnLocked(now, sent time.Time, status int, in header.Info) {
	if v.adapt == nil {
		v.adapt = new(adaptiveRate)
	}
	if sent.IsZero() {
		sent = now // an answer the view did not hold: taken as sent now
	}
	if changed, _ := v.adapt.observe(now, sent, status == 429 && in.Wait() <= 0, v.inflight); changed {
		v.tune(now)
	}
}

// tune sets the pacer to the announced rate, Limit per window, with a
// burst two below the capacity seen: at exactly the server's rate, a client
// that empties the server's bucket keeps it at 0 and is told to wait for the
// reset; keeping two requests in hand absorbs the network's jitter. With
// WithAdaptiveRate, the rate learned from bare 429s (see adaptiveRate)
// paces too, with a burst of a tenth of a second's worth (at least 1),
// starting empty: the host has just pushed back, and its own burst is
// unknown (the AWS SDKs allow a second's worth, which right after a cut
// meets the bucket the host has just said is empty). The lower rate wins.
func (v *view) tune(now time.Time) {
	var every float64 // requests per second
	burst := 0
	if c := v.capacity(); v.throttled && v.limit > 0 && v.window > 0 && c > 0 {
		every, burst = float64(v.perWindow())/v.window.Seconds(), max(c-2, 1)
	}
	learned := v.adapt != nil && v.adapt.enabled
	if learned {
		if r := v.adapt.rate; every == 0 || r < every {
			every = r
		}
		if b := max(int(v.adapt.rate/10), 1); burst == 0 || b < burst {
			burst = b
		}
	}
	if every == 0 {
		if v.pacer != nil {
			v.pacer.wake() // its turns are due at once (see turnDelay)
			v.pacer = nil  // the learned rate is forgotten, and nothing was announced
			v.pacing.Store(false)
		}
		return
	}
	gap := time.Duration(float64(time.Second) / every)
	if v.pacer == nil {
		v.pacer = newPacer(now, gap, burst, learned)
		v.pacing.Store(true)
		return
	}
	v.pacer.set(now, gap, burst)
}

// idle reports whether the view has nothing left to enforce: nothing in
// flight, no hold, no quota to wait for, no request waiting in its pacer's
// line and no rate learned from bare 429s. (The requests in line are not
// in flight: counted idle, a host whose callers all waited their turns was
// the first to be forgotten when the table filled, and the next request
// to it went out at once, past the line, to be refused; and a learned
// rate costs 429s to learn again.)
func (v *view) idle(now time.Time) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.adapt != nil && v.adapt.enabled && now.Sub(v.adapt.lastThrottle) < AdaptiveForget {
		return false
	}
	if v.pacer != nil {
		if v.pacer.trim(now); len(v.pacer.line) > 0 {
			return false
		}
	}
	return v.inflight == 0 && !now.Before(v.blocked) && (v.resetAt.IsZero() || !now.Before(v.resetAt))
}
