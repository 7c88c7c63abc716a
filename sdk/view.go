package sdk

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/sdk/header"
)

// view is what every request governed by one policy (or, for the
// host-level view, every request to one host) knows about its limit. It
// turns the server's answers into three rules that the next requests obey
// before they are sent:
//
//   - blocked: after a 429 (or 503) with a wait (Retry-After, or the reset
//     of an exhausted quota), no request goes out before the wait is over
//     (see cooldown). One goroutine pays for the lesson; the others do not
//     each earn their own 429.
//   - budget: the requests the server still admits until the reset (see
//     quota). At 0 the next requests wait for the reset, or, when the limit
//     is a token bucket, for its next token (see quota.refill), or for the
//     requests it counts to stop counting (see spentLog.slide); at the
//     reset the budget becomes the largest quota the server has shown
//     (capacity) and no more, so that a crowd of waiters is released a
//     window's worth at a time instead of as a wave of requests the client
//     already knows will be rejected. See observe for how answers to
//     concurrent requests update it.
//   - pace: once the host has limited this client (a 429, or Remaining at
//     0), requests are spaced at the rate the server announced (Limit per
//     window) through a token bucket a little smaller than the server's
//     (see pacing). Without it, a client facing a token bucket drains it,
//     is told to wait for the reset in whole seconds, and reaches half the
//     rate it is allowed; with it, the server's bucket never runs dry.
//     Pacing is advice: a pacing wait that would pass MaxWait or the
//     deadline is skipped, never a reason to fail.
//
// The view delays only requests to a host that has shown a limit; it never
// slows a host that sends no rate-limit headers.
//
// Each rule's state is a small type of its own, which the view composes
// under its mutex: the view's methods read them only through their
// methods, and pass each one what it needs of the others.
type view struct {
	name    string      // the policy's name; "" for the host-level view
	id      uint64      // lock order: policies by id, after the host-level view
	host    uint64      // the id of the host whose policy this is
	retired atomic.Bool // forgotten by its host: routes may drop it

	mu       sync.Mutex // guards the fields below
	cooldown cooldown   // the wait a rejection asked for, and the probes of a long one
	sleepers sleepers   // the requests held, to wake when an answer ends their hold early
	quota    quota      // the requests the server still admits until its reset
	shape    shape      // the limit's announced Limit, the capacity seen, the window
	flight   flight     // the requests admitted, and those not answered yet
	crowd    lowest     // the answers held since nothing was last in flight (see remainingLocked)
	stray    lowest     // the answers not held, and every one after them (see remainingLocked)
	spent    spentLog   // when the admitted answers stop counting against the quota
	pacing   pacing     // the rate requests are spaced at: announced, or learned
	line     line       // the requests held, first come, first served
}

// viewIDs numbers policy views across every host and Transport, so that
// the lock order is one total order.
var viewIDs atomic.Uint64

// newView returns the view of a policy named name, see init.
func newView(name string, id, host uint64, adaptive bool) *view {
	v := new(view)
	v.init(name, id, host, adaptive)
	return v
}

// init makes v the view of a policy named name ("" for the host-level
// view) of the host numbered host, with its lock order id; adaptive says
// it learns rates from bare 429s (WithAdaptiveRate). Nothing is known of
// the limit yet.
func (v *view) init(name string, id, host uint64, adaptive bool) {
	v.name, v.id, v.host = name, id, host
	v.quota, v.crowd, v.stray = newQuota(), newLowest(), newLowest()
	v.pacing.init(adaptive)
}

// retire marks the view forgotten by its host.
func (v *view) retire() { v.retired.Store(true) }

// isRetired reports whether the view's host has forgotten it.
func (v *view) isRetired() bool { return v.retired.Load() }

// blockedFor is how long from now the view holds requests on a wait the
// server asked for (negative when none).
func (v *view) blockedFor(now time.Time) time.Duration {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.cooldown.end().Sub(now)
}

// waitLocked says how long the view holds a request sent now; 0: it may
// go. v.mu must be held.
func (v *view) waitLocked(now time.Time) time.Duration {
	if w := v.cooldown.left(now); w > 0 {
		return w
	}
	per, c := v.shape.tokenEvery(), v.shape.capacity()
	v.quota.restoreDue(now, c, v.shape.window())
	v.quota.refill(now, per, c)
	w, slide := v.quota.wait(now, per)
	if !slide || per > 0 {
		// A token bucket's reset is when it is full again, not when
		// the requests it counted stop counting: slid, a late answer's
		// reset freed a crowd at once, that the bucket refused.
		return w
	}
	if free, at, ok := v.spent.slide(now, c, per, v.flight.count(), v.quota.readAt()); ok {
		return v.quota.slide(now, at, free)
	}
	return w
}

// refillLocked refills the quota of a token bucket (see quota.refill).
// v.mu must be held.
func (v *view) refillLocked(now time.Time) {
	v.quota.refill(now, v.shape.tokenEvery(), v.shape.capacity())
}

// refillsLocked reports whether the view's limit refills continuously (a
// token bucket, see shape.tokenEvery). v.mu must be held.
func (v *view) refillsLocked() bool { return v.shape.tokenEvery() > 0 }

// admitLocked admits one request that waitLocked let go. v.mu must be held.
func (v *view) admitLocked(now time.Time) ticket {
	v.quota.take()
	return v.flight.admit(now)
}

// holdLocked registers a request held by the view until until, and returns
// the channel that wakeLocked closes if an answer lets it go sooner. v.mu
// must be held.
func (v *view) holdLocked(until time.Time) <-chan struct{} {
	return v.sleepers.hold(until)
}

// wakeLocked wakes the requests the view holds if, after an answer, the
// view would let a request go before the latest of them wakes, or the
// answer pushed the hold well past it (see sleepers.wake). blockedBefore
// is the end of the hold the server asked for before the answer. v.mu
// must be held.
func (v *view) wakeLocked(now time.Time, blockedBefore time.Time) {
	if !v.sleepers.any() {
		return
	}
	end := now.Add(v.waitLocked(now))
	v.sleepers.wake(now, end, v.cooldown.end().After(blockedBefore))
}

// idle reports whether the view has nothing left to enforce: nothing in
// flight, no hold, no quota to wait for, no request waiting in its line
// (see line) or its pacer's, and no rate learned from bare 429s. (The requests in line are not
// in flight: counted idle, a host whose callers all waited their turns was
// the first to be forgotten when the table filled, and the next request
// to it went out at once, past the line, to be refused; and a learned
// rate costs 429s to learn again.)
func (v *view) idle(now time.Time) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.pacing.busy(now) {
		return false
	}
	return v.flight.count() == 0 && !v.line.busy() && v.cooldown.left(now) <= 0 && v.quota.restored(now)
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
//
// cut says the answer was a bare 429 that cut the rate the view learns
// (see learnLocked).
func (v *view) observe(t ticket, now time.Time, status int, in header.Info, others int) (cut bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.observeLocked(t, now, status, in, others)
}

// observeLocked is observe with v.mu held.
func (v *view) observeLocked(t ticket, now time.Time, status int, in header.Info, others int) (cut bool) {
	blocked := v.cooldown.end()
	defer func() { v.wakeLocked(now, blocked) }() // before the unlock
	if t.held {
		v.flight.done()
	}
	if status != 0 {
		if t.probe {
			v.liftLocked() // the answer below says what holds now
		}
		v.cooldown.hear(now)
		if v.pacing.learns() {
			cut = v.learnLocked(now, t.sent, status, in)
		}
	}
	rejected := status == 429 || status == 503
	v.shape.learn(in)
	if t.held && !rejected {
		v.spent.add(now, t, in, v.shape.capacity(), v.shape.window())
	}
	if in.Has == 0 {
		v.settleLocked(now, others, t.held)
		return cut
	}
	if in.Has&header.HasRemaining != 0 {
		v.remainingLocked(t, now, in, rejected, others)
	}
	v.settleLocked(now, others, t.held)
	if in.Exhausted() || status == 429 {
		v.pacing.throttle()
	}
	if rejected {
		v.blockLocked(now, status, in)
	}
	v.tune(now)
	return cut
}

// remainingLocked learns from the Remaining of an answer to the request
// admitted with t: the capacity it shows and, with a reset, the budget
// until then and the crowd's lowest Remaining (see observe for why an
// answer out of order may only lower the budget). rejected says the answer
// is a 429 or 503. v.mu must be held.
func (v *view) remainingLocked(t ticket, now time.Time, in header.Info, rejected bool, others int) {
	// An admitted request that leaves r shows a capacity of at least
	// r+1; a rejection's 0 shows nothing about it.
	if !rejected {
		v.shape.admitted(in.Remaining)
	}
	if in.Has&header.HasReset == 0 {
		return
	}
	reset := now.Add(in.Reset)
	v.refillLocked(now)
	if t.ordered {
		v.quota.set(max(in.Remaining-v.flight.since(t.seq), 0), now, reset, true)
	} else {
		v.quota.lower(max(in.Remaining-v.flight.count()-others, 0), now, reset)
	}
	// Only the answers to requests this view held make up its crowd. An
	// answer it did not hold (sent before the route was known to be this
	// policy's) is not in the view's count of requests in flight, and may
	// arrive after the crowd was settled: counted in, its stale Remaining
	// would become the next crowd's budget and hold every request until
	// that crowd's reset (half the rate against a token bucket).
	if t.held {
		v.crowd.note(in.Remaining, reset)
	}
	// The answers the view did not hold make up a crowd of their own, with
	// every answer that comes after them: it is settled only when nothing
	// at all is in flight to the host (see settleLocked), so that no answer
	// can arrive after it. Without it, a policy's first crowd (sent before
	// the route was known to be the policy's) leaves only the budget its
	// answers lowered, to 0 when the lowest Remaining came first. The
	// host's requests in flight are counted under this lock (see
	// host.observeUnheld), but an answer leaves the host's count before it
	// reaches this view: two answers of one crowd may both find nothing
	// else in flight, and settle it twice. The answer of a request sent
	// before the set was last taken belongs to the crowd settled then, and
	// may only lower the budget (above): made a crowd of its own, its
	// Remaining, read by the server before those of the crowd's last
	// answers, raised the budget of a spent quota
	// (TestStrayAnswerAfterSettle).
	if (!t.held && v.stray.since(t.sent)) || v.stray.open() {
		v.stray.note(in.Remaining, reset)
	}
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
	v.cooldown.extend(until)
	if status == 429 {
		v.quota.set(0, now, until, false) // the quota is spent until at least then
	}
}

// settleLocked makes the lowest Remaining of a crowd the budget once the
// whole crowd has answered (see observe), and that of the answers the view
// did not hold (see remainingLocked) once an answer it did not hold finds
// nothing else in flight to the host (held says whether the view held the
// request answered; others counts the host's requests in flight when it
// did not). v.mu must be held.
func (v *view) settleLocked(now time.Time, others int, held bool) {
	if v.flight.count() != 0 || others != 0 {
		return
	}
	if r, end, ok := v.crowd.take(now); ok {
		v.quota.set(r, now, end, true)
	}
	if held {
		return
	}
	if r, end, ok := v.stray.take(now); ok {
		v.quota.set(r, now, end, true)
	}
}

// learnLocked feeds an answer to the adaptive rate (WithAdaptiveRate): a
// 429 that says nothing of when to come back is a throttle, any other
// answer a success. cut says the throttle cut the rate. v.mu must be held.
func (v *view) learnLocked(now, sent time.Time, status int, in header.Info) (cut bool) {
	changed, cut := v.pacing.learn(now, sent, status == 429 && in.Wait() <= 0, v.flight.count())
	if changed {
		v.tune(now)
	}
	return cut
}

// tune sets the view's pacing to the rate the server announced and the
// rate learned from bare 429s (see pacing.tune). v.mu must be held.
func (v *view) tune(now time.Time) {
	every, burst := v.shape.announced()
	v.pacing.tune(now, every, burst)
}

// pace reserves the request's turn at the host's announced rate and says
// how long to wait for it; a retry's turn is the first in line (see
// call.pace), and with gap the turn before it is left empty (see
// call.gap). reserved is false when there is no pacing to do (not
// throttled, rate unknown, or the request must wait for the reset anyway,
// after which it is paced, or requests that came before it wait in the
// view's line: it takes its turn when it is at the front). A request given
// a turn to wait for joins the view's line (pl are its places, see line).
func (v *view) pace(now time.Time, retry, gap bool, pl *places) (pt paceTurn, reserved bool) {
	if !v.pacing.active() {
		return pt, false // most views never pace: no lock
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.pacing.paces() || v.cooldown.left(now) > 0 {
		return pt, false
	}
	if pl.behindLocked(v) {
		pl.skipped = true
		return pt, false
	}
	if v.refillLocked(now); v.quota.spentUntilReset(now) {
		return pt, false
	}
	if pt = v.pacing.reserve(now, retry, gap); pt.d > 0 {
		pl.joinLocked(v)
	}
	return pt, true
}

// lineWaitLocked says how long, at least, the request with ticket t waits
// in the view's line for the turns of the requests that came before it,
// at the view's pace (0: the view does not pace); strict says the pace is
// learned from bare 429s (see call.pace), and moved is closed if the
// pace changes. v.mu must be held.
func (v *view) lineWaitLocked(now time.Time, t uint64) (d time.Duration, strict bool, moved <-chan struct{}) {
	if !v.pacing.paces() {
		return 0, false, nil
	}
	return v.pacing.after(now, v.line.before(t))
}

// turnDelay says how long until tk, a turn pace handed out, is due now:
// its time follows the rate (see pacer). A turn of a pacer the view has
// dropped is due at once.
func (v *view) turnDelay(tk *turn, now time.Time) paceTurn {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.pacing.delay(tk, now)
}

// cancelTurn gives back tk, a turn pace handed out.
func (v *view) cancelTurn(tk *turn, now time.Time) {
	if tk == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.pacing.cancel(tk, now)
}
