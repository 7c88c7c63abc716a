// Package limit implements Sluice's rate-limit algorithms as pure state
// transitions.
//
// Like golang.org/x/time/rate's AllowN(t, n), every decision takes the current
// time as an argument, so the algorithms are testable without sleeping and
// behave identically in the plugin, in tests and in benchmarks. Unlike
// x/time/rate, the state is not hidden inside a Limiter: it is a small
// fixed-size value (State, 16 bytes) that the caller loads, passes in and
// stores back. That is what lets the Envoy plugin keep one state per client
// in proxy-wasm shared data and update it with a single compare-and-swap.
//
// Time is int64 nanoseconds (any epoch, as long as it is the same one for
// every call on a state). All arithmetic saturates, so huge windows or
// clocks far in the future cannot overflow into permissive values, and a
// clock that goes backwards never grants more than the limit.
package limit

import (
	"encoding/binary"
	"errors"
	"math"
	"math/bits"
	"time"
)

// Algorithm selects how a Limit counts.
type Algorithm uint8

const (
	// TokenBucket holds up to Burst tokens and refills Limit tokens per
	// Window, continuously. It is implemented as GCRA (one timestamp of
	// state): the "theoretical arrival time" of the next request.
	TokenBucket Algorithm = iota
	// FixedWindow admits Limit requests per aligned window of Window.
	FixedWindow
	// SlidingWindow admits Limit requests per Window using the weighted
	// two-window estimate (the previous window's count weighted by how much
	// of it still overlaps the sliding window, plus the current count).
	SlidingWindow
	// LeakyBucket is a shaping queue: admitted requests leave at exactly
	// Limit per Window, one every Window/Limit, and at most Burst wait in the
	// queue; requests beyond the queue are rejected.
	LeakyBucket
)

var algorithmNames = [...]string{"token_bucket", "fixed_window", "sliding_window", "leaky_bucket", "concurrency", "adaptive_concurrency"}

func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return "unknown"
}

// ParseAlgorithm maps a configuration name to an Algorithm.
func ParseAlgorithm(s string) (Algorithm, bool) {
	for i, n := range algorithmNames {
		if n == s {
			return Algorithm(i), true
		}
	}
	return TokenBucket, false
}

// State is the whole state of one client under one limit. Its zero value is
// a new client. The meaning of A and B depends on the algorithm; callers
// treat it as opaque and store it with Encode.
type State struct {
	A, B int64
}

// StateSize is the size of an encoded State in bytes.
const StateSize = 16

// Encode writes s to b[:StateSize] (little-endian).
func (s State) Encode(b []byte) {
	_ = b[StateSize-1]
	putInt64(b[0:8], s.A)
	putInt64(b[8:16], s.B)
}

// DecodeState reads a State written by Encode.
func DecodeState(b []byte) State {
	_ = b[StateSize-1]
	return State{A: getInt64(b[0:8]), B: getInt64(b[8:16])}
}

// putInt64 and getInt64 use encoding/binary's unrolled form, which the
// compiler turns into one 64-bit store or load (on wasm too).
func putInt64(b []byte, v int64) { binary.LittleEndian.PutUint64(b, uint64(v)) }

func getInt64(b []byte) int64 { return int64(binary.LittleEndian.Uint64(b)) }

// Limit is an immutable rate: Limit requests per Window, with Burst as the
// bucket capacity (token bucket) or queue length (leaky bucket). Build it
// with New; the zero value is not usable.
type Limit struct {
	_         [0]func() // not comparable: no equality function in the module
	algorithm Algorithm
	limit     int64
	window    int64 // ns
	burst     int64
	interval  int64 // ns between two requests at the sustained rate, >= 1
	tolerance int64 // burst * interval, saturated
}

// MaxSpan is the longest window, and the longest time a full bucket takes
// to refill (burst × window/limit), that New accepts: about 73 years. The
// bound keeps every timestamp the algorithms compute far from int64
// overflow, so a saturated value can never make a state look recovered.
const MaxSpan = int64(1) << 61

// Errors returned by New.
var (
	ErrSpan   = errors.New("window and burst span more than 73 years")
	ErrLimit  = errors.New("must be > 0")
	ErrWindow = errors.New("must be > 0")
	ErrBurst  = errors.New("must be > 0")
)

// New returns the Limit of limit requests per window with the given burst.
// burst <= 0 means burst = limit. Window may be sub-second; the sustained
// interval is window/limit rounded down to a nanosecond (at least 1 ns).
func New(a Algorithm, limit int64, window time.Duration, burst int64) (Limit, error) {
	if limit <= 0 {
		return Limit{}, ErrLimit
	}
	if window <= 0 {
		return Limit{}, ErrWindow
	}
	if burst <= 0 {
		burst = limit
	}
	if limit > math.MaxUint32 || burst > math.MaxUint32 {
		return Limit{}, errors.New("must be <= 4294967295")
	}
	iv := int64(window) / limit
	if iv < 1 {
		iv = 1
	}
	if int64(window) > MaxSpan || satMul(burst, iv) > MaxSpan {
		return Limit{}, ErrSpan
	}
	return Limit{
		algorithm: a,
		limit:     limit,
		window:    int64(window),
		burst:     burst,
		interval:  iv,
		tolerance: satMul(burst, iv),
	}, nil
}

// Algorithm returns the algorithm of l.
func (l Limit) Algorithm() Algorithm { return l.algorithm }

// Limit returns the number of requests per window.
func (l Limit) Limit() int64 { return l.limit }

// Window returns the window.
func (l Limit) Window() time.Duration { return time.Duration(l.window) }

// Burst returns the capacity (token and leaky bucket).
func (l Limit) Burst() int64 { return l.burst }

// Interval returns the time between two requests at the sustained rate.
func (l Limit) Interval() time.Duration { return time.Duration(l.interval) }

// Decision is the outcome of one call to AllowN.
type Decision struct {
	// Allowed reports whether the requests are admitted (now, or after Delay).
	Allowed bool
	// Delay is how long an admitted request must be held before it is
	// forwarded (throttling, leaky bucket). Zero for immediate admission.
	Delay time.Duration
	// RetryAfter is, for a rejection, how long until the same request would
	// be admitted: for a token bucket, without a hold; for a fixed window
	// and a leaky bucket with maxDelay, held within maxDelay. Zero when
	// Allowed.
	RetryAfter time.Duration
	// Remaining is how many more requests would be admitted at once after
	// this decision.
	Remaining int64
	// Reset is how long until the state is fully recovered (a new client).
	Reset time.Duration
}

// AllowN decides whether n requests arriving at now are admitted, given the
// state s, and returns the new state. A request that would be rejected but
// can be admitted within maxDelay is admitted with Decision.Delay set: the
// caller must hold it that long (throttling). Rejections leave the state
// unchanged, so a rejected request costs nothing.
//
// SlidingWindow cannot schedule future admissions and ignores maxDelay.
// LeakyBucket always delays to its rate; maxDelay, if > 0, further bounds
// the wait (its queue is Burst requests).
//
// AllowN and Reset, which every charged request calls, take a pointer: a
// Limit is 48 bytes, which a value receiver copies at each call.
func (l *Limit) AllowN(s State, now int64, n int64, maxDelay time.Duration) (State, Decision) {
	if n <= 0 {
		n = 1
	}
	md := int64(maxDelay)
	if md < 0 {
		md = 0
	}
	switch l.algorithm {
	case Concurrency, AdaptiveConcurrency:
		// Not a rate: see Acquire. Admitting keeps a misuse harmless.
		return s, Decision{Allowed: true, Remaining: l.limit}
	case FixedWindow:
		return l.fixedWindow(s, now, n, md)
	case SlidingWindow:
		return l.slidingWindow(s, now, n)
	case LeakyBucket:
		at := decidedAt(s, now)
		next, d := l.leakyBucket(s, at, n, md)
		return stamped(next, d, at, now)
	default:
		// The token bucket (GCRA), most rules' algorithm, here rather
		// than in a function of its own: on wasm every call is dear, and
		// every request makes this one. s.A is the theoretical arrival
		// time (TAT): the time at which the bucket will be full again. A
		// request is conforming when, after adding its cost, the TAT is
		// no further than burst*interval ahead. s.B is the time of the
		// last charge (decidedAt).
		at := decidedAt(s, now)
		tat := max(s.A, at)
		step := l.interval // one unit, most charges: no division (a call on wasm)
		if n != 1 {
			step = satMul(n, l.interval)
		}
		newTAT := satAdd(tat, step)
		ahead := satSub(newTAT, at)
		over := ahead - l.tolerance // how far past the bucket's capacity
		if over > md || n > l.burst {
			retry := over
			if n > l.burst {
				retry = math.MaxInt64
			}
			return stamped(s, Decision{RetryAfter: time.Duration(retry), Reset: time.Duration(satSub(tat, at))}, at, now)
		}
		d := Decision{Allowed: true, Reset: time.Duration(ahead)}
		if over > 0 {
			d.Delay = time.Duration(over)
		} else {
			// Unsigned: a signed 64-bit division is a call on wasm
			// (runtime.wasmDiv, for MinInt64 / -1); here 0 <= -over
			// (ahead >= 0, tolerance <= MaxInt64) and interval >= 1.
			d.Remaining = int64(uint64(-over) / uint64(l.interval))
		}
		return stamped(State{A: newTAT}, d, at, now)
	}
}

// decidedAt is the time a token or leaky bucket state s is decided at:
// now, or the time it was last charged at (s.B) if that is later.
// Workers of one Envoy read the (one) clock when a request arrives and the
// shared state afterwards: another worker, whose clock read came a moment
// later, may store its charge in between. The request is then decided
// after that charge, so as of its time. At now the charge would read as
// made in the request's future, the bucket as over by the gap: of two
// requests arriving together under a burst of 2, one held for the gap (a
// few microseconds), a leaky bucket's queue one longer. Deciding at a time
// no later than the real time of the decision never admits more than the
// rate, and a clock that goes backwards is held at the latest charge.
// States of other algorithms, and the zero state, have no such time.
func decidedAt(s State, now int64) int64 { return max(now, s.B) }

// stamped gives a token or leaky bucket decision made at at for a request
// that arrived at now: the new state records at, and the durations count
// from now, so that a request held for Delay leaves when its reservation
// comes due (RefundHeld compares the two).
func stamped(next State, d Decision, at, now int64) (State, Decision) {
	skew := time.Duration(at - now)
	d.Reset += skew
	switch {
	case d.Allowed:
		next.B = at
		if d.Delay > 0 {
			d.Delay += skew
		}
	case d.RetryAfter < math.MaxInt64-skew:
		d.RetryAfter += skew
	}
	return next, d
}

// Reset returns how long until s is fully recovered at now: the time after
// which s is indistinguishable from a new client's zero State. A result
// <= 0 means s may be discarded.
func (l *Limit) Reset(s State, now int64) time.Duration {
	switch l.algorithm {
	case Concurrency, AdaptiveConcurrency:
		return time.Duration(DecodeSlots(s).Expiry(now) - now)
	case FixedWindow:
		if s.B <= 0 {
			return 0
		}
		// Reservations may extend over several windows.
		windows := (s.B + l.limit - 1) / l.limit
		return time.Duration(satSub(satAdd(s.A, satMul(windows, l.window)), now))
	case SlidingWindow:
		prev, cur := unpackCounts(s.B)
		switch {
		case cur > 0:
			return time.Duration(satSub(satAdd(s.A, satMul(2, l.window)), now))
		case prev > 0:
			return time.Duration(satSub(satAdd(s.A, l.window), now))
		}
		return 0
	default: // token and leaky bucket: A is the time the bucket is empty again
		return time.Duration(satSub(s.A, now))
	}
}

// Expiry is now + Reset(s, now), the time after which s may be discarded.
// A token bucket's (most rules') is s.A when neither time is negative
// (s.A - now cannot overflow then), answered here: small enough to be
// inlined, as every admitted request asks and a call is dear on wasm.
func (l *Limit) Expiry(s State, now int64) int64 {
	if l.algorithm == TokenBucket && s.A|now >= 0 { // both >= 0
		return s.A
	}
	return now + int64(l.Reset(s, now))
}

// leakyBucket: s.A is the departure time of the next request, s.B the time
// of the last charge (decidedAt). Each admitted request leaves one interval
// after the previous one; the queue holds at most burst waiting requests.
func (l Limit) leakyBucket(s State, now, n, maxDelay int64) (State, Decision) {
	depart := s.A
	if depart < now {
		depart = now
	}
	wait := depart - now
	// Waiting requests ahead of this one (rounded up) plus this one's n-1
	// companions must fit in the queue.
	queued := (wait + l.interval - 1) / l.interval
	capWait := l.tolerance
	if maxDelay > 0 && maxDelay < capWait {
		capWait = maxDelay
	}
	last := satAdd(wait, satMul(n-1, l.interval)) // wait of the last of the n requests
	if queued+n-1 > l.burst || last > capWait {
		// Admitted once the queue has drained enough for the last one to fit.
		retry := last - capWait
		if q := satMul(queued+n-1-l.burst, l.interval); q > retry {
			retry = q
		}
		if n > l.burst+1 {
			retry = math.MaxInt64
		}
		return s, Decision{RetryAfter: time.Duration(retry), Reset: time.Duration(wait)}
	}
	next := satAdd(depart, satMul(n, l.interval))
	free := l.burst - (queued + n - 1)
	if free < 0 {
		free = 0
	}
	return State{A: next}, Decision{
		Allowed:   true,
		Delay:     time.Duration(wait),
		Remaining: free,
		Reset:     time.Duration(satSub(next, now)),
	}
}

// fixedWindow: s.A is the start of the current window, s.B the number of
// requests charged from that window on. Counts beyond limit are
// reservations in later windows (throttling): the k-th request (0-based)
// belongs to window k/limit.
func (l Limit) fixedWindow(s State, now, n, maxDelay int64) (State, Decision) {
	start := now - floorMod(now, l.window)
	if s.A < start && s.B > 0 {
		// Roll forward: every elapsed window consumed limit reservations.
		elapsed := (start - s.A) / l.window
		s.B = satSub(s.B, satMul(elapsed, l.limit))
		if s.B < 0 {
			s.B = 0
		}
	} else if s.A > start {
		// Clock went backwards: keep the later window and its count.
		start = s.A
	}
	if s.B <= 0 {
		s.B = 0
	}
	s.A = start
	end := satAdd(start, l.window)
	last := s.B + n - 1                       // index of the last of the n requests
	wait := satMul(last/l.limit, l.window)    // start of its window, relative to start
	delay := satSub(satAdd(start, wait), now) // how long it must be held
	if n > l.limit || (last >= l.limit && delay > maxDelay) {
		retry := satSub(end, now)
		if n > l.limit {
			retry = math.MaxInt64
		} else if over := delay - maxDelay; over > retry {
			// Reservations (throttling) or a debt (Debit) that reach
			// beyond this window: the wait is until the request's window.
			retry = over
		}
		return s, Decision{RetryAfter: time.Duration(retry), Reset: l.Reset(s, now)}
	}
	s.B += n
	d := Decision{Allowed: true, Reset: l.Reset(s, now)}
	if last >= l.limit {
		d.Delay = time.Duration(delay)
	} else {
		d.Remaining = l.limit - s.B
	}
	return s, d
}

// slidingWindow: s.A is the start of the current window, s.B packs the
// previous and current window counts (32 bits each).
func (l Limit) slidingWindow(s State, now, n int64) (State, Decision) {
	start, prev, cur := l.rollSliding(s, now)
	elapsed := now - start
	if elapsed < 0 {
		elapsed = 0
	}
	// Estimated count in the sliding window ending at now, scaled by window
	// to stay in integers: prev*(window-elapsed) + cur*window.
	est := satAdd(mulDivCeil(prev, l.window-elapsed, l.window), cur)
	ns := State{A: start, B: packCounts(prev, cur)}
	if n > l.limit || est+n > l.limit {
		return ns, Decision{RetryAfter: time.Duration(l.slidingWait(start, prev, cur, now, n)), Reset: l.Reset(ns, now)}
	}
	cur += n
	ns.B = packCounts(prev, cur)
	rem := l.limit - (est + n)
	return ns, Decision{Allowed: true, Remaining: rem, Reset: l.Reset(ns, now)}
}

// slidingWait returns how long until n more requests fit under the
// sliding-window estimate.
func (l Limit) slidingWait(start, prev, cur, now, n int64) int64 {
	if n > l.limit {
		return math.MaxInt64
	}
	room := l.limit - n // the estimate must drop to at most room
	// In the current window the estimate falls as prev's weight decays:
	// prev*(W-e)/W + cur <= room  <=>  e >= W - (room-cur)*W/prev.
	if cur <= room && prev > 0 {
		e := l.window - mulDivFloor(room-cur, l.window, prev)
		if e < l.window {
			return satSub(start+e, now)
		}
	}
	// In the next window, cur becomes the previous count.
	next := start + l.window
	if cur <= room {
		return satSub(next, now)
	}
	e := l.window - mulDivFloor(room, l.window, cur)
	return satSub(next+e, now)
}

func packCounts(prev, cur int64) int64 {
	if prev > math.MaxUint32 {
		prev = math.MaxUint32
	}
	if cur > math.MaxUint32 {
		cur = math.MaxUint32
	}
	return int64(uint64(prev)<<32 | uint64(cur))
}

func unpackCounts(b int64) (prev, cur int64) {
	u := uint64(b)
	return int64(u >> 32), int64(u & math.MaxUint32)
}

// mulDivCeil returns ceil(a*b/c) saturated, for a, b >= 0 and c > 0.
func mulDivCeil(a, b, c int64) int64 { return mulDiv(a, b, c, true) }

// mulDivFloor returns floor(a*b/c) saturated, for a, b >= 0 and c > 0.
func mulDivFloor(a, b, c int64) int64 { return mulDiv(a, b, c, false) }

func mulDiv(a, b, c int64, ceil bool) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, r := bits.Div64(hi, lo, uint64(c))
	if ceil && r != 0 {
		q++
	}
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

func floorMod(a, m int64) int64 {
	r := a % m
	if r < 0 {
		r += m
	}
	return r
}

func satAdd(a, b int64) int64 {
	c := a + b
	if (c > a) == (b > 0) {
		return c
	}
	if b > 0 {
		return math.MaxInt64
	}
	return math.MinInt64
}

func satSub(a, b int64) int64 {
	if b == math.MinInt64 {
		if a >= 0 {
			return math.MaxInt64
		}
		return a - b
	}
	return satAdd(a, -b)
}

func satMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	c := a * b
	if c/b != a || (a == -1 && b == math.MinInt64) || (b == -1 && a == math.MinInt64) {
		if (a > 0) == (b > 0) {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return c
}
