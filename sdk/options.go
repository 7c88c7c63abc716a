package sdk

import (
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Defaults a partner can ship with: a few attempts, no single wait longer
// than a minute, and a bound on the whole retry sequence.
const (
	// DefaultMaxAttempts is the number of attempts, the first included.
	DefaultMaxAttempts = 4
	// DefaultMaxWait is the longest single wait.
	DefaultMaxWait = 60 * time.Second
	// DefaultMaxElapsed bounds the time the default backoff keeps retrying
	// one request, waits included, whatever mix of throttles and transient
	// failures it meets: past it the Transport returns the last response
	// instead of waiting again.
	DefaultMaxElapsed = 2 * time.Minute
	// DrainLimit is how much of an intermediate response body (one that a
	// retry replaces) the Transport reads, in the background during the
	// wait, so that its connection can be reused. A longer body, or one
	// still arriving when the retry has been answered, costs its
	// connection, never unbounded reading or a later retry.
	DrainLimit = 64 << 10
	// DefaultThrottleBase is the first wait of the default backoff after a
	// throttle the server gave no wait for (a bare 429): a server that
	// sheds load answers the same way for a while.
	DefaultThrottleBase = time.Second
	// DefaultTransientBase is the first wait of the default backoff after
	// a transient failure (a transport error, a 503 without Retry-After):
	// a reset connection or a restarting instance is usually gone at once.
	DefaultTransientBase = 50 * time.Millisecond
)

// An Option configures a Transport.
type Option func(*config)

type config struct {
	maxAttempts int
	maxWait     time.Duration
	newBackOffs func() [2]backoff.BackOff // one request's, by retry class, reset; see WithBackOff
	hook        func(RetryEvent)
	logger      *slog.Logger
	clock       Clock
	budget      *RetryBudget // nil: no retry budget
	adaptive    bool
}

func newConfig(opts []Option) config {
	c := config{
		maxAttempts: DefaultMaxAttempts,
		maxWait:     DefaultMaxWait,
		clock:       systemClock{},
		budget:      &DefaultRetryBudget,
	}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.budget == &DefaultRetryBudget {
		b := DefaultRetryBudget // a caller that changes the variable later changes nothing
		c.budget = &b
	}
	if c.newBackOffs == nil {
		clk := backoffClock{c.clock}
		c.newBackOffs = func() [2]backoff.BackOff {
			// Made, and so reset, together: MaxElapsedTime counts from
			// the same start for both, and bounds the whole sequence.
			return [2]backoff.BackOff{
				throttleRetry:  defaultBackOff(DefaultThrottleBase, clk),
				transientRetry: defaultBackOff(DefaultTransientBase, clk),
			}
		}
	}
	return c
}

func defaultBackOff(base time.Duration, clk backoff.Clock) backoff.BackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(base),
		backoff.WithMaxElapsedTime(DefaultMaxElapsed),
		backoff.WithClockProvider(clk),
	)
}

// WithMaxAttempts sets the number of attempts per request, the first
// included; the default is DefaultMaxAttempts. n < 1 means 1: no retries.
func WithMaxAttempts(n int) Option {
	return func(c *config) { c.maxAttempts = max(n, 1) }
}

// WithMaxWait sets the longest single wait; the default is DefaultMaxWait.
// A server that asks for more (a Retry-After of an hour) gets no retry: the
// Transport returns its response at once, so the caller decides, instead of
// blocking a goroutine for as long as the server says. A computed backoff
// longer than d is shortened to d, so d = 0 gives up every retry the
// server asks to delay and makes the others immediate. A negative d is 0.
func WithMaxWait(d time.Duration) Option {
	return func(c *config) { c.maxWait = max(d, 0) }
}

// WithBackOff sets the policy for waits the server gives no hint for
// (transport errors, a 503 or 429 without Retry-After or rate-limit
// headers). f is called once per request that needs a retry, because a
// backoff.BackOff keeps per-sequence state and is not safe for concurrent
// use: f must return a new instance each time. That instance serves every
// retry of the request, whatever its cause. A BackOff that returns
// backoff.Stop ends the retries, server hint or not, so
// backoff.WithMaxRetries and MaxElapsedTime bound the whole sequence.
//
// The default is backoff.NewExponentialBackOff (x1.5, ±50% jitter, at
// most 60 s apart, MaxElapsedTime DefaultMaxElapsed) from one of two bases,
// as the AWS SDKs do: DefaultThrottleBase (1 s) after a 429 or a 503 with
// Retry-After, DefaultTransientBase (50 ms) after a transport error or a
// 503 without. Each class's waits grow from its own base; its
// MaxElapsedTime counts from the request's first retry for both, so it
// bounds the whole sequence too. f replaces both; nil restores the
// default.
func WithBackOff(f func() backoff.BackOff) Option {
	return func(c *config) {
		if f == nil {
			c.newBackOffs = nil
			return
		}
		c.newBackOffs = func() [2]backoff.BackOff {
			b := f()
			b.Reset()
			return [2]backoff.BackOff{b, b}
		}
	}
}

// WithRetryHook calls f for every wait and every give-up, synchronously, on
// the goroutine of the request, before the wait starts. f must be safe for
// concurrent use and quick; it is the place for metrics.
func WithRetryHook(f func(RetryEvent)) Option {
	return func(c *config) { c.hook = f }
}

// WithLogger logs every wait (Info for retries, Debug for holds on the
// host's limit) and every give-up (Warn) to l. Without it the Transport logs
// nothing.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// WithClock replaces the system clock, for deterministic tests; see Clock.
func WithClock(clk Clock) Option {
	return func(c *config) {
		if clk != nil {
			c.clock = clk
		}
	}
}

// WithRetryBudget sets the retry budget that each host's requests share
// (see RetryBudget); the default is DefaultRetryBudget. nil disables it:
// every retry that MaxAttempts, MaxWait and the deadline allow is made.
func WithRetryBudget(b *RetryBudget) Option {
	return func(c *config) {
		if b == nil {
			c.budget = nil
			return
		}
		cp := *b
		c.budget = &cp
	}
}

// WithAdaptiveRate makes the Transport learn the rate a host admits from
// the 429s it answers with no hint (no Retry-After, no rate-limit
// headers), and pace requests to it, first attempts and retries alike; the
// rate grows back once the 429s stop, and a host that has not throttled
// for AdaptiveForget is no longer paced. A host that names the policy of
// such a 429 (an application/problem+json body listing violated-policies)
// is learned per policy; otherwise per host.
//
// The learner is the AWS SDKs' adaptive retry mode: a client token bucket
// whose rate follows CUBIC (RFC 9438) on throttles, with AdaptiveBeta 0.7
// (the rate kept after a throttle), AdaptiveScale 0.4 (how fast it grows
// back), an admitted rate measured in half-second buckets and smoothed by
// AdaptiveSmooth, and a floor of AdaptiveMinRate; see adaptiveRate for the
// curve. Without it, a hintless 429 is retried after a backoff and the
// request rate is whatever the callers push.
func WithAdaptiveRate() Option {
	return func(c *config) { c.adaptive = true }
}
