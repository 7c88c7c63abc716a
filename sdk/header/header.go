// Package header is the rate-limit header protocol shared by the Sluice plugin,
// which writes it, and the SDK, which reads it. Keeping both directions in one
// package means the two halves can never disagree about a name or a unit.
//
// The plugin formats headers on its per-request hot path, so the Append
// functions write into a caller-owned buffer and allocate nothing.
package header

import (
	"strconv"
	"time"
)

// Header names, lower-case as HTTP/2 and Envoy carry them.
const (
	RetryAfter = "retry-after"

	// Legacy (draft-polli-ratelimit-headers-00, GitHub, Envoy local_ratelimit).
	XLimit     = "x-ratelimit-limit"
	XRemaining = "x-ratelimit-remaining"
	XReset     = "x-ratelimit-reset"

	// IETF draft-ietf-httpapi-ratelimit-headers (structured fields).
	Policy    = "ratelimit-policy"
	RateLimit = "ratelimit"

	// Shadow marks a response that a shadow rule would have rejected.
	Shadow = "x-ratelimit-shadow"

	// GRPCRetryPushback is gRPC's server pushback (gRFC A6): in the
	// trailers of a failed call (a refused call's trailers-only response
	// carries it with its headers), the milliseconds a client's retry
	// policy waits before the next attempt, instead of its own backoff.
	GRPCRetryPushback = "grpc-retry-pushback-ms"
)

// Mode selects which header families a response carries.
type Mode uint8

const (
	Both   Mode = iota // legacy and draft (the default)
	Legacy             // X-RateLimit-*
	Draft              // RateLimit and RateLimit-Policy
	None               // no limit headers (Retry-After is still sent on rejection)
)

// ParseMode maps a configuration string to a Mode.
func ParseMode(s string) (Mode, bool) {
	switch s {
	case "", "both":
		return Both, true
	case "legacy":
		return Legacy, true
	case "draft":
		return Draft, true
	case "none":
		return None, true
	}
	return Both, false
}

// Legacy reports whether m includes the X-RateLimit-* family.
func (m Mode) Legacy() bool { return m == Both || m == Legacy }

// Draft reports whether m includes the RateLimit/RateLimit-Policy family.
func (m Mode) Draft() bool { return m == Both || m == Draft }

// nsPerSecond is a variable, not a constant: on wasm a 64-bit division by
// a constant becomes a multiply-high, emulated with several 64-bit
// multiplies, and one by a variable a single division (the plugin computes
// these on every response it writes headers for).
var nsPerSecond = uint64(time.Second)

// CeilSeconds returns d in whole seconds, rounded up; 0 for d <= 0.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((uint64(d) + nsPerSecond - 1) / nsPerSecond)
}

// RetryAfterSeconds is the Retry-After value for a wait of d: whole seconds,
// rounded up, at least 1 (a client told "0" would retry at once and be
// rejected again).
func RetryAfterSeconds(d time.Duration) int64 {
	return max(CeilSeconds(d), 1)
}

// AppendRetryAfter appends the Retry-After value for a wait of d.
func AppendRetryAfter(dst []byte, d time.Duration) []byte {
	return strconv.AppendInt(dst, RetryAfterSeconds(d), 10)
}

// AppendPushback appends the grpc-retry-pushback-ms value for a wait of d:
// whole milliseconds, rounded up, at least 1000, as Retry-After is at
// least 1 s (a concurrency rule's wait estimate can be under a
// millisecond, and a client told that would retry at once and be refused
// again). gRPC's unit is finer than Retry-After's: over a second, the
// value is the wait itself, not Retry-After in milliseconds.
func AppendPushback(dst []byte, d time.Duration) []byte {
	ms := max(int64((d+time.Millisecond-1)/time.Millisecond), 1000)
	return strconv.AppendInt(dst, ms, 10)
}

// equalFoldLower is strings.EqualFold(s, lower) for lower in ASCII lower
// case without k or s, the letters that fold to runes outside ASCII: the
// plugin, which links this package, then links no Unicode folding tables.
func equalFoldLower(s, lower string) bool {
	if len(s) != len(lower) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// IsGRPC reports whether a request's content-type is gRPC's
// (application/grpc, with any +format or ;parameters).
func IsGRPC(contentType string) bool {
	const g = "application/grpc"
	if len(contentType) < len(g) || !equalFoldLower(contentType[:len(g)], g) {
		return false
	}
	rest := contentType[len(g):]
	return rest == "" || rest[0] == '+' || rest[0] == ';'
}

// AppendSeconds appends d as whole seconds rounded up (X-RateLimit-Reset).
func AppendSeconds(dst []byte, d time.Duration) []byte {
	return strconv.AppendInt(dst, CeilSeconds(d), 10)
}

// AppendPolicy appends a RateLimit-Policy item: "<name>";q=<limit>;w=<window seconds>.
// A sub-second window is reported as w=1, the smallest the field can say.
// A window <= 0 (a concurrency limit: q requests in flight, no window)
// omits w, which the draft makes optional.
func AppendPolicy(dst []byte, name string, limit int64, window time.Duration) []byte {
	dst = appendName(dst, name)
	dst = append(dst, ";q="...)
	dst = strconv.AppendInt(dst, limit, 10)
	if window <= 0 {
		return dst
	}
	dst = append(dst, ";w="...)
	w := CeilSeconds(window)
	if w < 1 {
		w = 1
	}
	return strconv.AppendInt(dst, w, 10)
}

// AppendRateLimit appends a RateLimit item: "<name>";r=<remaining>;t=<seconds>.
func AppendRateLimit(dst []byte, name string, remaining int64, reset time.Duration) []byte {
	dst = appendName(dst, name)
	dst = append(dst, ";r="...)
	if remaining < 0 {
		remaining = 0
	}
	dst = strconv.AppendInt(dst, remaining, 10)
	dst = append(dst, ";t="...)
	return strconv.AppendInt(dst, CeilSeconds(reset), 10)
}

// appendName appends a structured-field string. Rule names are validated to
// [a-z0-9_-]+, so no escaping is needed.
//
// Not inlined: its five callers build headers and bodies that the plugin
// keeps while they say the same, and a copy at each costs more wasm code
// (2.1 KB of the plugin's module) than the call.
//
//go:noinline
func appendName(dst []byte, name string) []byte {
	dst = append(dst, '"')
	dst = append(dst, name...)
	return append(dst, '"')
}

// AppendShadow appends the X-RateLimit-Shadow value for a request that shadow
// rule name would have rejected: "<name>";retry-after=<seconds>.
func AppendShadow(dst []byte, name string, retryAfter time.Duration) []byte {
	dst = appendName(dst, name)
	dst = append(dst, ";retry-after="...)
	return strconv.AppendInt(dst, RetryAfterSeconds(retryAfter), 10)
}
