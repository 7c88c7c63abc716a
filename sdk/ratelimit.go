package sdk

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/sdk/header"
)

// RateLimit is what a response's headers say about the client's limit.
// A field the headers do not carry is zero.
type RateLimit struct {
	// Limit is the quota: requests allowed per window.
	Limit int
	// Remaining is how many more requests the current window admits.
	Remaining int
	// Reset is the time until the quota is restored, from the moment the
	// response was received.
	Reset time.Duration
	// RetryAfter is the wait the Retry-After field asks for.
	RetryAfter time.Duration
	// Policy names the policy the fields describe, from the IETF draft's
	// RateLimit field ("burst" in `"burst";r=50;t=30`).
	Policy string
}

func fromInfo(in header.Info) RateLimit {
	return RateLimit{
		Limit:      in.Limit,
		Remaining:  in.Remaining,
		Reset:      in.Reset,
		RetryAfter: in.RetryAfter,
		Policy:     in.Policy,
	}
}

// ParseRateLimit reads Retry-After (delta-seconds or any HTTP-date form),
// the IETF draft's RateLimit and RateLimit-Policy fields, X-RateLimit-* and
// X-Rate-Limit-* (Limit, Remaining, Reset, Used). now is when the response
// was received. A reset that is a Unix time, as GitHub sends, becomes a
// duration from the response's Date field when present, so that clock skew
// between client and server does not distort it, and from now otherwise.
// Malformed values are ignored; no duration is negative. It returns false
// when the headers carry no rate-limit information.
//
// When several policies are listed, the result describes the most
// constrained one. The parser is shared with the Sluice plugin
// (package sdk/header), so the two cannot disagree.
func ParseRateLimit(h http.Header, now time.Time) (RateLimit, bool) {
	in, ok := header.Parse(h, now)
	return fromInfo(in), ok
}

// RateLimitError reports that a server, or the Transport's view of its
// limit, refused a request for now. CheckResponse returns one, and a
// Transport returns one (wrapped in *url.Error by http.Client) when the
// host's limit holds a request for longer than MaxWait or past the
// context's deadline before it could be sent. Use errors.As to get it.
type RateLimitError struct {
	// StatusCode is the response's status (429 or 503), or 0 when the
	// Transport did not send the request.
	StatusCode int
	// RetryAfter is the least time to wait before trying again, from the
	// moment the error was made; 0 when the server gave no hint.
	RetryAfter time.Duration
	// Limit holds the parsed rate-limit headers (zero when none, or when no
	// request was sent).
	Limit RateLimit
	// Host is the host the limit applies to.
	Host string
}

func (e *RateLimitError) Error() string {
	var b strings.Builder
	if e.StatusCode == 0 {
		fmt.Fprintf(&b, "sdk: %s is rate limited: request not sent", e.Host)
	} else {
		fmt.Fprintf(&b, "sdk: %s answered %d %s", e.Host, e.StatusCode, http.StatusText(e.StatusCode))
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, ", retry after %v", e.RetryAfter)
	}
	if e.Limit.Limit > 0 {
		fmt.Fprintf(&b, " (limit %d, remaining %d, reset %v)", e.Limit.Limit, e.Limit.Remaining, e.Limit.Reset)
	}
	return b.String()
}

// CheckResponse returns a *RateLimitError for a 429 Too Many Requests or
// a 503 Service Unavailable response, carrying when to retry (Retry-After,
// or the reset when no request remains) and the parsed limits; nil for
// any other response, nil included. It does not touch the body.
//
// It is for callers who prefer an error to inspecting status codes, and for
// the last response a Transport returns when its retries run out.
func CheckResponse(resp *http.Response) error {
	if resp == nil || (resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable) {
		return nil
	}
	in, _ := header.Parse(resp.Header, time.Now())
	e := &RateLimitError{
		StatusCode: resp.StatusCode,
		RetryAfter: in.Wait(),
		Limit:      fromInfo(in),
	}
	if resp.Request != nil && resp.Request.URL != nil {
		e.Host = resp.Request.URL.Host
	}
	return e
}
