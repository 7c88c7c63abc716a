package sdk

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/shared/header"
	"golang.org/x/time/rate"
)

// maxHosts is how many hosts a Transport remembers before it forgets those
// with nothing to enforce: their learned limits are cheap to learn again.
const maxHosts = 1024

// hosts is a Transport's table of per-host limit views.
type hosts struct {
	m sync.Map // host -> *hostView
	n atomic.Int64
}

func (hs *hosts) get(host string, now time.Time) *hostView {
	host = strings.ToLower(host) // no allocation when already lower-case
	if v, ok := hs.m.Load(host); ok {
		return v.(*hostView)
	}
	if hs.n.Load() >= maxHosts {
		hs.prune(now)
	}
	v, loaded := hs.m.LoadOrStore(host, &hostView{budget: -1, crowd: -1})
	if !loaded {
		hs.n.Add(1)
	}
	return v.(*hostView)
}

func (hs *hosts) prune(now time.Time) {
	hs.m.Range(func(k, v any) bool {
		if v.(*hostView).idle(now) && hs.m.CompareAndDelete(k, v) {
			hs.n.Add(-1)
		}
		return true
	})
}

// hostView is what every request to one host knows about its limit. It
// turns the server's answers into three rules that the next requests obey
// before they are sent:
//
//   - blocked: after a 429 (or 503) with a wait (Retry-After, or the reset
//     of an exhausted quota), no request goes out before the wait is over.
//     One goroutine pays for the lesson; the others do not each earn their
//     own 429.
//   - budget: the requests the server still admits until resetAt. At 0 the
//     next requests wait for the reset; at the reset the budget becomes the
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
type hostView struct {
	mu        sync.Mutex
	blocked   time.Time     // no request before this
	budget    int           // requests the server still admits before resetAt; -1: unknown
	resetAt   time.Time     // when the quota is restored; zero: unknown
	limit     int           // the Limit the server announced; 0: unknown
	maxSeen   int           // the largest Remaining seen, plus one; 0: none seen
	window    time.Duration // the policy's window, or the longest reset seen
	explicit  bool          // window came from the policy's w parameter
	throttled bool          // the host has limited this client: pace
	pacer     *rate.Limiter // nil until throttled with a known rate
	seq       uint64        // requests admitted so far
	lastSend  time.Time     // when the latest of them was admitted
	inflight  int           // admitted and not answered yet
	crowd     int           // lowest Remaining since inflight was last 0; -1: none
	crowdEnd  time.Time     // the latest reset among those answers
}

// ticket identifies an admitted request to observe.
type ticket struct {
	seq uint64
	// ordered: no other request was in flight when this one was sent, or
	// the latest was sent at least orderGap before: the server then saw the
	// earlier ones first, so Remaining in this one's answer counts them.
	ordered bool
}

// orderGap is how far apart two requests must be sent for the server to be
// assumed to process them in the order they were sent. Requests sent closer
// together (a crowd released at once) race each other to the server.
const orderGap = 10 * time.Millisecond

// pace reserves the request's turn at the host's announced rate and says
// how long to wait for it. reserved is false when there is no pacing to do
// (not throttled, rate unknown, or the request must wait for the reset
// anyway, after which it is paced).
func (v *hostView) pace(now time.Time) (d time.Duration, r *rate.Reservation, reserved bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.pacer == nil || now.Before(v.blocked) || (v.budget == 0 && now.Before(v.resetAt)) {
		return 0, nil, false
	}
	r = v.pacer.ReserveN(now, 1)
	if !r.OK() {
		return 0, nil, false
	}
	return r.DelayFrom(now), r, true
}

// acquire admits one request now (wait == 0), which the caller must then
// report to observe with the ticket, or says how long to wait before asking
// again.
func (v *hostView) acquire(now time.Time) (wait time.Duration, t ticket) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if now.Before(v.blocked) {
		return v.blocked.Sub(now), t
	}
	if v.budget >= 0 && !v.resetAt.IsZero() && !now.Before(v.resetAt) {
		// The server has restored the quota. Until a response says what
		// is left, assume what it has shown and no more.
		v.budget, v.resetAt = -1, time.Time{}
		if c := v.capacity(); c > 0 {
			v.budget = c
			if v.window > 0 {
				v.resetAt = now.Add(v.window)
			}
		}
	}
	if v.budget == 0 {
		if now.Before(v.resetAt) {
			return v.resetAt.Sub(now), t
		}
		v.budget = -1 // exhausted, with no known reset: nothing to wait for
	}
	if v.budget > 0 {
		v.budget--
	}
	t.ordered = v.inflight == 0 || now.Sub(v.lastSend) >= orderGap
	v.seq++
	t.seq = v.seq
	v.lastSend = now
	v.inflight++
	return 0, t
}

// capacity is the most requests a restored window admits, as far as the
// client has seen: the largest Remaining seen plus the request that
// received it, at most the announced Limit. It is smaller than Limit for a
// token bucket whose burst is smaller than its limit.
func (v *hostView) capacity() int {
	if v.maxSeen > 0 && (v.limit == 0 || v.maxSeen < v.limit) {
		return v.maxSeen
	}
	return v.limit
}

// observe records the outcome of the request that acquire admitted with t:
// the response's status and headers, or status 0 for a transport error.
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
func (v *hostView) observe(t ticket, now time.Time, status int, in header.Info) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.inflight--
	if in.Has == 0 {
		if v.inflight == 0 && v.crowd >= 0 {
			v.budget, v.resetAt = v.crowd, v.crowdEnd
			v.crowd, v.crowdEnd = -1, time.Time{}
		}
		return
	}
	rejected := status == 429 || status == 503
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
	if in.Has&header.HasRemaining != 0 {
		// An admitted request that leaves r shows a capacity of at least
		// r+1; a rejection's 0 shows nothing about it.
		if !rejected && in.Remaining < 1<<30 && in.Remaining+1 > v.maxSeen {
			v.maxSeen = in.Remaining + 1
		}
		if in.Has&header.HasReset != 0 {
			reset := now.Add(in.Reset)
			if t.ordered {
				v.budget = max(in.Remaining-int(min(v.seq-t.seq, 1<<30)), 0)
				v.resetAt = reset
			} else if b := max(in.Remaining-v.inflight, 0); v.budget < 0 || b < v.budget {
				v.budget = b
				if reset.After(v.resetAt) {
					v.resetAt = reset
				}
			}
			if v.crowd < 0 || in.Remaining < v.crowd {
				v.crowd = in.Remaining
			}
			if reset.After(v.crowdEnd) {
				v.crowdEnd = reset
			}
		}
	}
	if v.inflight == 0 && v.crowd >= 0 {
		v.budget, v.resetAt = v.crowd, v.crowdEnd
		v.crowd, v.crowdEnd = -1, time.Time{}
	}
	if in.Exhausted() || status == 429 {
		v.throttled = true
	}
	if rejected {
		if w := in.Wait(); w > 0 {
			until := now.Add(w)
			if until.After(v.blocked) {
				v.blocked = until
			}
			if status == 429 {
				// The quota is spent until at least then.
				v.budget = 0
				if until.After(v.resetAt) {
					v.resetAt = until
				}
			}
		}
	}
	v.tune(now)
}

// tune sets the pacer to the announced rate, Limit per window, with a
// burst two below the capacity seen: at exactly the server's rate, a client
// that empties the server's bucket keeps it at 0 and is told to wait for the
// reset; keeping two requests in hand absorbs the network's jitter.
func (v *hostView) tune(now time.Time) {
	c := v.capacity()
	if !v.throttled || v.limit <= 0 || v.window <= 0 || c <= 0 {
		return
	}
	every := rate.Limit(float64(v.limit) / v.window.Seconds())
	burst := max(c-2, 1)
	if v.pacer == nil {
		v.pacer = rate.NewLimiter(every, burst)
		return
	}
	if v.pacer.Limit() != every {
		v.pacer.SetLimitAt(now, every)
	}
	if v.pacer.Burst() != burst {
		v.pacer.SetBurstAt(now, burst)
	}
}

// idle reports whether the view has nothing left to enforce.
func (v *hostView) idle(now time.Time) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.inflight == 0 && !now.Before(v.blocked) && (v.resetAt.IsZero() || !now.Before(v.resetAt))
}
