package sdk

import (
	"math"
	"time"
)

// The parameters of WithAdaptiveRate's rate learner, those of the AWS
// SDKs' adaptive retry mode (its client-side rate limiter): CUBIC
// congestion control (RFC 9438) applied to a request rate.
const (
	// AdaptiveBeta is the share of the rate kept after a throttle: the
	// rate drops to 0.7 of what the host was admitting.
	AdaptiveBeta = 0.7
	// AdaptiveScale is CUBIC's C, in requests per second per second³: how
	// fast the rate grows back, and past the rate of the last throttle.
	AdaptiveScale = 0.4
	// AdaptiveSmooth is the weight of the newest half-second in the
	// measured admitted rate (an exponential moving average).
	AdaptiveSmooth = 0.8
	// AdaptiveMinRate is the lowest rate, in requests per second, the
	// learner paces to: a host that throttles everything still gets a
	// probe every two seconds.
	AdaptiveMinRate = 0.5
	// AdaptiveForget is how long after its last throttle a host is no
	// longer paced: the rate has grown far past what the client sends by
	// then, and a host that has recovered is not held to its history.
	AdaptiveForget = time.Minute
)

// adaptiveRate learns the rate a host admits from its throttles, the AWS
// SDKs' way: the rate of requests the host admits (every answer but a
// throttle) is measured in half-second buckets and smoothed; a throttle (a
// 429 with no hint) sets the rate to AdaptiveBeta times the lower of that
// measured rate and the current one, and remembers the rate it cut from
// (lastMax); every other answer moves the rate along the cubic curve
//
//	rate(t) = AdaptiveScale × (t − K)³ + lastMax,  K = ∛(lastMax × (1 − AdaptiveBeta) / AdaptiveScale)
//
// where t is the time since the last throttle: the rate climbs back fast,
// flattens near lastMax (at t = K), where the host pushed back last, and
// then probes past it faster and faster. The rate never exceeds twice the
// measured rate, so that a quiet spell does not grant a burst the host
// never admitted. It is a pure algorithm: time is passed in, the caller
// locks.
//
// The AWS SDKs measure every request sent, throttles included. Against a
// host that admits 10/s, that put lastMax (where the curve lingers) at
// 11.6-14.8/s: the client kept draining the host's bucket, and a request
// was refused every 1-2 s, often a retry, some at every attempt. The rate
// the host admitted is the rate it can take.
type adaptiveRate struct {
	enabled      bool
	rate         float64   // requests per second, while enabled
	lastMax      float64   // the rate at the last throttle
	k            float64   // seconds after the last throttle when rate is lastMax again
	lastThrottle time.Time // of the last throttle
	measured     float64   // smoothed admitted rate, requests per second
	bucket       time.Time // start of the current half-second bucket
	count        int       // answers other than throttles in the current bucket
}

const adaptiveBucket = 500 * time.Millisecond

// observe records one answer at now to a request sent at sent; throttled
// says whether it was a throttle (a 429 that carried no hint), inflight how
// many other requests are still unanswered. It reports whether the rate to
// pace to changed, whether this throttle cut it (it was not of a congestion
// event already cut for), and the rate (0 when not pacing).
//
// One congestion event cuts the rate once, as in TCP: the throttles of
// requests sent before the last cut were sent at the rate already cut, and
// a crowd of them (every request in flight when the host started
// refusing) would otherwise cut it to the floor.
func (a *adaptiveRate) observe(now, sent time.Time, throttled bool, inflight int) (changed, cut bool, rate float64) {
	a.measure(now, !throttled)
	before, was := a.rate, a.enabled
	switch {
	case throttled && a.enabled && sent.Before(a.lastThrottle):
		return false, false, a.rate
	case throttled:
		r := a.measured
		if r == 0 {
			// No half-second has passed yet: what the host admitted so
			// far and the requests still in flight. (The answers alone
			// say 2/s when a crowd of 64 sent at once has its first
			// answer a throttle.)
			r = float64(a.count+inflight) / adaptiveBucket.Seconds()
		}
		if a.enabled {
			r = min(r, a.rate)
		}
		a.lastMax = r
		a.k = math.Cbrt(r * (1 - AdaptiveBeta) / AdaptiveScale)
		a.lastThrottle = now
		a.enabled = true
		a.set(r * AdaptiveBeta)
		cut = true
	case !a.enabled:
		return false, false, 0
	case now.Sub(a.lastThrottle) >= AdaptiveForget:
		a.enabled, a.rate = false, 0
		return true, false, 0
	default:
		t := now.Sub(a.lastThrottle).Seconds() - a.k
		a.set(AdaptiveScale*t*t*t + a.lastMax)
	}
	return a.enabled != was || a.rate != before, cut, a.rate
}

// set paces to r, at most twice the measured rate and at least
// AdaptiveMinRate.
func (a *adaptiveRate) set(r float64) {
	if m := 2 * a.measured; m > 0 && r > m {
		r = m
	}
	a.rate = max(r, AdaptiveMinRate)
}

// measure counts one answer at now in the admitted rate, if the host
// admitted it (it was not a throttle).
func (a *adaptiveRate) measure(now time.Time, admitted bool) {
	b := now.Truncate(adaptiveBucket)
	if a.bucket.IsZero() {
		a.bucket = b
	} else if b.After(a.bucket) {
		cur := float64(a.count) / b.Sub(a.bucket).Seconds()
		a.measured = cur*AdaptiveSmooth + a.measured*(1-AdaptiveSmooth)
		a.count, a.bucket = 0, b
	}
	if admitted {
		a.count++
	}
}

// learning reports whether a rate has been learned and paces (false for a
// nil a: no answer yet).
func (a *adaptiveRate) learning() bool { return a != nil && a.enabled }

// pace is the rate learned, in requests per second, while learning.
func (a *adaptiveRate) pace() float64 { return a.rate }

// recent reports whether a rate is learned from a throttle less than
// AdaptiveForget before now.
func (a *adaptiveRate) recent(now time.Time) bool {
	return a.learning() && now.Sub(a.lastThrottle) < AdaptiveForget
}
