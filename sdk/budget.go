package sdk

import (
	"math"
	"time"
)

// RetryBudget caps the retries a Transport makes to one host to a share of
// the requests it sends there, so that an outage does not multiply the
// load of every client on a server that is already failing (the retry
// throttling of gRPC, the retry quota of the AWS SDKs, Finagle's retry
// budget).
//
// Every request's first attempt to a host earns Ratio of a retry; every
// retry that counts (see below) spends one. Besides, MinPerSecond retries
// are earned per second whatever the traffic, so that a client that sends
// little can still retry its failures, and no more than Burst retries are
// saved up. A fresh host starts with Burst saved.
//
// So over any period T, the retries to a host are at most
// Ratio × (requests sent) + MinPerSecond × T + Burst.
//
// Which retries count: a retry after a 503, a transport error, or a 429
// that carries no hint. A retry after a 429 that says when to come back
// (Retry-After, or an exhausted quota's reset) does not: the server has
// scheduled it, it did not process the request, and the shared view of the
// limit already holds the other requests until then, so these retries do
// not add to the load the server allows. They are bounded by MaxAttempts
// and MaxWait as before.
//
// When a retry that counts finds the budget empty, the Transport returns
// the last response (or error) at once, and the retry hook receives an
// event with GiveUp set to GiveUpBudget.
type RetryBudget struct {
	// Ratio is the retries earned by each request sent: 0.1 lets retries
	// add at most 10% to the load a host sees, plus the floor below.
	Ratio float64
	// MinPerSecond is the retries earned per second whatever the traffic.
	MinPerSecond float64
	// Burst is the most retries saved up, and what a fresh host starts
	// with. Values below 1 are 1, above a million a million.
	Burst int
	// TransientCost is what one retry after a transient failure (a
	// transport error, a 503 without Retry-After) spends; 0 means 1.
	TransientCost float64
	// ThrottleCost is what one retry after a throttle the server did not
	// schedule (a 429 without a hint, a 503 with Retry-After) spends; 0
	// means DefaultThrottleCost. Cheaper than a transient retry, as in the
	// AWS SDKs (5 tokens against 14): it waits at least a second, and a
	// throttling server refuses it at little cost to itself.
	ThrottleCost float64
}

// DefaultThrottleCost is ThrottleCost when 0: the AWS SDKs' 5 to 14.
const DefaultThrottleCost = 5.0 / 14

// DefaultRetryBudget is the budget of every host unless WithRetryBudget
// says otherwise: retries add at most 10% to a host's load, plus one per
// second, plus a one-time allowance of 100 (what a client that has been
// idle, or has just started, may spend at once).
var DefaultRetryBudget = RetryBudget{Ratio: 0.1, MinPerSecond: 1, Burst: 100}

// retryBudget is the token bucket behind RetryBudget. It is a pure
// algorithm: time is passed in, and the caller provides the locking.
// Tokens are counted in millionths so that a ratio of 0.1 adds exactly.
type retryBudget struct {
	perRequest int64 // micro-tokens per first attempt
	perSecond  int64 // micro-tokens per second
	max        int64 // micro-tokens
	tokens     int64
	last       time.Time // of the last refill; zero: never
	cost       [2]int64  // micro-tokens per retry of each class (see retryClass)
}

const microToken = 1_000_000

func newRetryBudget(b RetryBudget) retryBudget {
	burst := int64(min(max(b.Burst, 1), 1_000_000))
	rb := retryBudget{
		perRequest: microTokens(b.Ratio),
		perSecond:  microTokens(b.MinPerSecond),
		max:        burst * microToken,
		tokens:     burst * microToken,
	}
	rb.cost[transientRetry] = costOf(b.TransientCost, 1)
	rb.cost[throttleRetry] = costOf(b.ThrottleCost, DefaultThrottleCost)
	return rb
}

// costOf is a retry's cost in micro-tokens: f, def when f is 0, and free
// when f is negative.
func costOf(f, def float64) int64 {
	switch {
	case f == 0:
		f = def
	case f < 0:
		return 0
	}
	return max(microTokens(f), 1)
}

// microTokens converts a count of retries to micro-tokens, clamped to
// [0, 1e12] so that no product overflows.
func microTokens(f float64) int64 {
	switch {
	case !(f > 0): // NaN included
		return 0
	case f >= 1e6:
		return 1e12
	}
	return int64(f * microToken)
}

// refill adds the floor earned since the last call. Less than a
// micro-token is lost per call, so frequent calls do not starve the floor.
func (b *retryBudget) refill(now time.Time) {
	if b.last.IsZero() || now.Before(b.last) {
		b.last = now
		return
	}
	el := now.Sub(b.last)
	b.last = now
	if b.perSecond == 0 || b.tokens >= b.max {
		return
	}
	// Past max/perSecond seconds the bucket is full whatever el is; the cap
	// keeps el (in µs) × perSecond below 2^63 (max ≤ 1e12, perSecond ≤
	// 1e12). A cap longer than any Duration is not needed: then perSecond
	// is at most 1e12 / 9.2e9 s, below 109, and any Duration in µs (below
	// 9.3e15) times that stays below 2^63.
	if secs := b.max/b.perSecond + 1; secs < int64(math.MaxInt64/time.Second) {
		el = min(el, time.Duration(secs)*time.Second)
	}
	b.tokens = min(b.max, b.tokens+int64(el)/1000*b.perSecond/1_000_000)
}

// deposit records a first attempt.
func (b *retryBudget) deposit(now time.Time) {
	b.refill(now)
	b.tokens = min(b.max, b.tokens+b.perRequest)
}

// withdraw spends one retry of the class if the budget has it.
func (b *retryBudget) withdraw(now time.Time, class int) bool {
	b.refill(now)
	c := b.cost[class]
	if b.tokens < c {
		return false
	}
	b.tokens -= c
	return true
}
