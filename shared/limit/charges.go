// Giving charges back (Refund, RefundHeld: a request refused by a later
// rule, or held and gone before its release) and charging after the
// response (Balance, Admit, Debit: a cost known once the upstream
// answered).

package limit

// Refund returns s with n requests that AllowN admitted at or before now
// given back. It undoes a charge when another rule rejected the same
// request, so a rejected request costs no rule anything. It never gives
// back more than was charged in the current window.
func (l Limit) Refund(s State, now int64, n int64) State {
	if n <= 0 {
		n = 1
	}
	switch l.algorithm {
	case Concurrency, AdaptiveConcurrency:
		return s // see Release
	case FixedWindow:
		s.B -= n
		if s.B < 0 {
			s.B = 0
		}
	case SlidingWindow:
		prev, cur := unpackCounts(s.B)
		cur -= n
		if cur < 0 {
			cur = 0
		}
		s.B = packCounts(prev, cur)
	default:
		s.A = satSub(s.A, satMul(n, l.interval))
		if s.A < decidedAt(s, now)-l.tolerance {
			s.A = 0
		}
	}
	return s
}

// RefundHeld gives back, as Refund does, n units charged for a request
// whose release was at release (its admission time plus the Delay it was
// held for), but only while that leaves no hole in the line of requests
// held behind it: the reservation is the latest one (or, one that was not
// delayed, no request is held at all). A reservation in the middle of the
// line cannot be given back: the next request would take the last one's
// turn, and two requests held for the same time would be released together
// (two at once from a leaky bucket, or two in one window of a fixed window
// of 1). It is then kept, spent.
func (l Limit) RefundHeld(s State, now, n, release int64) State {
	if n <= 0 {
		n = 1
	}
	switch l.algorithm {
	case Concurrency, AdaptiveConcurrency, SlidingWindow:
		// Never held by this rule.
	case FixedWindow:
		if s.B <= 0 || l.limit <= 0 {
			return s
		}
		last := satAdd(s.A, satMul((s.B-1)/l.limit, l.window)) // the latest reservation's window
		if last != release-floorMod(release, l.window) {
			return s
		}
	case LeakyBucket:
		if s.A > decidedAt(s, now) && s.A != satAdd(release, satMul(n, l.interval)) {
			return s
		}
	default:
		if s.A > satAdd(decidedAt(s, now), l.tolerance) && s.A != satAdd(release, l.tolerance) {
			return s
		}
	}
	return l.Refund(s, now, n)
}

// Balance returns the client's balance under l at now, in units: what a
// request may still be charged before the client is refused. It is
// negative while the client owes units charged after admission (a debt,
// see Debit), which refill pays back: one unit per interval for token
// bucket, limit per window for fixed_window, and for sliding_window as the
// charged window slides out (at most two windows). Concurrency and leaky
// bucket have no balance in units (0).
func (l Limit) Balance(s State, now int64) int64 {
	switch l.algorithm {
	case TokenBucket:
		at := decidedAt(s, now)
		tat := max(s.A, at)
		// Whole units: the unit being refilled does not count yet.
		return floorDiv(satSub(l.tolerance, satSub(tat, at)), l.interval)
	case FixedWindow:
		s = l.rollFixed(s, now)
		return l.limit - s.B
	case SlidingWindow:
		start, prev, cur := l.rollSliding(s, now)
		est := satAdd(mulDivCeil(prev, l.window-max(now-start, 0), l.window), cur)
		return l.limit - est
	}
	return 0
}

// Admit decides, without charging, whether a request whose cost is charged
// later (Debit, once its response arrives) may pass at now: while the
// client's balance is at least one unit. The state is not changed, so
// concurrent admissions all pass while the balance is positive; their
// charges may then take it below zero (a debt). Decision.Remaining is the
// balance (nothing is charged yet), RetryAfter how long until one unit is
// back when refused (the debt paid back first).
func (l Limit) Admit(s State, now int64) Decision {
	_, d := l.AllowN(s, now, 1, 0)
	if d.Allowed {
		d.Remaining = max(l.Balance(s, now), 1)
		d.Reset = l.Reset(s, now)
	}
	return d
}

// Debit charges n units to s at now unconditionally: the cost of a request
// that was admitted earlier (Admit) and whose response said what it cost.
// It may take the balance below zero. The Decision reports the balance
// after the charge (Remaining, never below 0), when the state is fully
// recovered (Reset) and, if the balance is no longer positive, how long
// until a request would be admitted again (RetryAfter).
func (l Limit) Debit(s State, now int64, n int64) (State, Decision) {
	if n <= 0 {
		return s, l.settled(s, now)
	}
	switch l.algorithm {
	case TokenBucket:
		at := decidedAt(s, now)
		s = State{A: satAdd(max(s.A, at), satMul(n, l.interval)), B: at}
	case FixedWindow:
		s = l.rollFixed(s, now)
		s.B = satAdd(s.B, n)
	case SlidingWindow:
		start, prev, cur := l.rollSliding(s, now)
		s = State{A: start, B: packCounts(prev, satAdd(cur, n))}
	default:
		return s, Decision{Allowed: true}
	}
	return s, l.settled(s, now)
}

// settled describes s at now after a charge.
func (l Limit) settled(s State, now int64) Decision {
	d := Decision{Allowed: true, Remaining: max(l.Balance(s, now), 0), Reset: l.Reset(s, now)}
	if _, next := l.AllowN(s, now, 1, 0); !next.Allowed {
		d.RetryAfter = next.RetryAfter
	}
	return d
}

// rollFixed brings a fixed_window state to the window holding now (what
// fixedWindow does before deciding).
func (l Limit) rollFixed(s State, now int64) State {
	start := now - floorMod(now, l.window)
	if s.A < start && s.B > 0 {
		elapsed := (start - s.A) / l.window
		s.B = max(satSub(s.B, satMul(elapsed, l.limit)), 0)
	} else if s.A > start {
		start = s.A
	}
	s.B = max(s.B, 0)
	s.A = start
	return s
}

// rollSliding brings a sliding_window state to the window holding now:
// its start and the previous and current counts.
func (l Limit) rollSliding(s State, now int64) (start, prev, cur int64) {
	start = now - floorMod(now, l.window)
	prev, cur = unpackCounts(s.B)
	switch {
	case s.A == start:
	case s.A == start-l.window:
		prev, cur = cur, 0
	case s.A > start:
		// Clock went backwards: keep counting in the later window.
		start = s.A
	default:
		prev, cur = 0, 0
	}
	return start, prev, cur
}
