package header

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// The body of a rejection: an RFC 9457 problem document of the type the
// rate-limit draft (draft-ietf-httpapi-ratelimit-headers) registers for a
// refused request, or the short text body some deployments prefer.
const (
	ContentType = "content-type"

	ProblemContentType = "application/problem+json"
	TextContentType    = "text/plain; charset=utf-8"

	// QuotaExceeded is the problem type of a request refused because a
	// quota policy is exhausted; its "violated-policies" member lists the
	// policies by the names of RateLimit-Policy.
	QuotaExceeded      = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	QuotaExceededTitle = "Request cannot be satisfied as assigned quota has been exceeded"

	// ViolatedPolicies and RetryAfterMember are the problem document's
	// extension members (the second is Sluice's: the Retry-After header's
	// seconds, for a client that only keeps the body).
	ViolatedPolicies = "violated-policies"
	RetryAfterMember = "retry-after"

	// TextBody is the rejection body of `"body": "text"`.
	TextBody = "Too Many Requests: rate limit exceeded, retry after the time in Retry-After.\n"

	// UnitConcurrentRequests is the quota unit (the policy's qu parameter)
	// of a limit on requests in flight rather than requests per window.
	UnitConcurrentRequests = "concurrent-requests"
)

// AppendQuotaUnit appends a RateLimit-Policy item's qu parameter:
// ;qu="<unit>". The default unit, requests, is never written.
func AppendQuotaUnit(dst []byte, unit string) []byte {
	dst = append(dst, ";qu="...)
	return appendName(dst, unit)
}

// AppendRateLimitRefused appends the RateLimit item of a refused request:
// "<name>";r=0;t=<Retry-After seconds>. The draft has Retry-After never
// earlier than the end of the effective window t, and a client lets
// Retry-After win: the two say the same number, so no client waits less
// than it must, or more.
func AppendRateLimitRefused(dst []byte, name string, retryAfter time.Duration) []byte {
	dst = appendName(dst, name)
	dst = append(dst, ";r=0;t="...)
	return strconv.AppendInt(dst, RetryAfterSeconds(retryAfter), 10)
}

// AppendProblem appends the problem+json body of a rejection with status:
// the quota-exceeded type, its title, the status, a detail sentence, the
// violated policies (rule names, in order) and the Retry-After seconds.
// Built by hand: the plugin links no encoding/json. Names are escaped as
// JSON strings whatever they contain.
func AppendProblem(dst []byte, status int, policies []string, retryAfter time.Duration) []byte {
	secs := RetryAfterSeconds(retryAfter)
	dst = append(dst, `{"type":"`+QuotaExceeded+`","title":"`+QuotaExceededTitle+`","status":`...)
	dst = strconv.AppendInt(dst, int64(status), 10)
	dst = append(dst, `,"detail":"Too many requests; retry after `...)
	dst = strconv.AppendInt(dst, secs, 10)
	if secs == 1 {
		dst = append(dst, ` second."`...)
	} else {
		dst = append(dst, ` seconds."`...)
	}
	dst = append(dst, `,"`+ViolatedPolicies+`":[`...)
	for i, p := range policies {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendJSONString(dst, p)
	}
	dst = append(dst, `],"`+RetryAfterMember+`":`...)
	dst = strconv.AppendInt(dst, secs, 10)
	return append(dst, "}\n"...)
}

const hexDigits = "0123456789abcdef"

// AppendJSONString appends s as a JSON string: quotes, backslashes and
// control characters escaped, invalid UTF-8 replaced by U+FFFD, so that
// the document stays valid JSON whatever s holds.
func AppendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c < 0x20 || c == 0x7f:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			dst = append(dst, `\ufffd`...)
		} else if r == '\u2028' || r == '\u2029' {
			// Valid JSON, but not valid JavaScript in older parsers.
			dst = append(dst, `\u202`...)
			dst = append(dst, hexDigits[r&0xf])
		} else {
			dst = append(dst, s[i:i+n]...)
		}
		i += n
	}
	return append(dst, '"')
}
