package sdk

import (
	"context"
	"log/slog"
	"net/http"
	"time"
)

// Reason says why a Transport waits or gives up.
type Reason uint8

const (
	// RateLimited: the server answered 429 Too Many Requests.
	RateLimited Reason = iota + 1
	// Unavailable: the server answered 503 Service Unavailable.
	Unavailable
	// TransportError: the base RoundTripper returned an error.
	TransportError
	// HostLimit: a shared limit holds the request before it is sent,
	// because a 429 asked every client to wait or no quota remains until
	// the reset: the limit of the request's policy (RetryEvent.Policy), or
	// the host's when the server named none.
	HostLimit
)

func (r Reason) String() string {
	switch r {
	case RateLimited:
		return "rate_limited"
	case Unavailable:
		return "unavailable"
	case TransportError:
		return "transport_error"
	case HostLimit:
		return "host_limit"
	}
	return "unknown"
}

// RetryEvent describes one wait, or one decision to stop, of a Transport.
type RetryEvent struct {
	// Request is the caller's request.
	Request *http.Request
	// Attempt is the number of attempts sent so far for this request (0
	// when the host's limit holds the first one).
	Attempt int
	Reason  Reason
	// StatusCode is the last response's status, 0 if none.
	StatusCode int
	// Err is the last transport error, if any; with GiveUpGetBody, the
	// error GetBody returned.
	Err error
	// Limit is what the last response's headers said.
	Limit RateLimit
	// Delay is the wait about to start, or, with GiveUp, the wait that
	// would have been needed (0 when unknown).
	Delay time.Duration
	// GiveUp, when not empty, says why the Transport stops here and
	// returns the last response (or error) instead of waiting: one of the
	// GiveUp constants.
	GiveUp string
	// Policy names the policy whose view of the limit holds the request
	// (Reason HostLimit), or "" when the host-level view holds it (the
	// server named no policy, or a 503 asked every request to wait).
	Policy string
}

// Why a Transport gives up: the values of RetryEvent.GiveUp.
const (
	GiveUpAttempts    = "attempts exhausted"
	GiveUpMaxWait     = "wait exceeds MaxWait"
	GiveUpDeadline    = "wait passes the context deadline"
	GiveUpBackOff     = "backoff stopped"
	GiveUpBody        = "body cannot be replayed"
	GiveUpIdempotent  = "method not idempotent"
	GiveUpContextDone = "context done"
	// GiveUpBudget: the host's retry budget is empty (see RetryBudget).
	GiveUpBudget = "retry budget exhausted"
	// GiveUpGetBody: the request's GetBody failed, so the retry announced
	// before the wait could not be sent; the last response (or error)
	// stands, and Err is GetBody's error.
	GiveUpGetBody = "GetBody failed"
)

func (c *config) observed() bool { return c.hook != nil || c.logger != nil }

func (c *config) emit(ctx context.Context, ev RetryEvent) {
	if c.hook != nil {
		c.hook(ev)
	}
	if c.logger == nil {
		return
	}
	level, msg := slog.LevelInfo, "sluice: retrying"
	switch {
	case ev.GiveUp != "":
		level, msg = slog.LevelWarn, "sluice: giving up"
	case ev.Reason == HostLimit:
		level, msg = slog.LevelDebug, "sluice: holding request for the host's rate limit"
	}
	if !c.logger.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 13)
	attrs = append(attrs,
		slog.String("method", ev.Request.Method),
		slog.String("host", ev.Request.URL.Host),
		slog.String("path", ev.Request.URL.Path),
		slog.Int("attempt", ev.Attempt),
		slog.String("reason", ev.Reason.String()),
		slog.Duration("delay", ev.Delay),
	)
	if ev.StatusCode != 0 {
		attrs = append(attrs, slog.Int("status", ev.StatusCode))
	}
	if ev.Err != nil {
		attrs = append(attrs, slog.String("error", ev.Err.Error()))
	}
	if ev.GiveUp != "" {
		attrs = append(attrs, slog.String("give_up", ev.GiveUp))
	}
	if l := ev.Limit; l != (RateLimit{}) {
		attrs = append(attrs, slog.Group("limit",
			slog.Int("limit", l.Limit), slog.Int("remaining", l.Remaining),
			slog.Duration("reset", l.Reset), slog.Duration("retry_after", l.RetryAfter),
			slog.String("policy", l.Policy)))
	}
	if ev.Policy != "" {
		attrs = append(attrs, slog.String("held_by", ev.Policy))
	}
	c.logger.LogAttrs(ctx, level, msg, attrs...)
}
