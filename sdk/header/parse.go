package header

import (
	"math"
	"time"
)

// Header names that Parse reads besides those declared in header.go,
// lower-case like them.
const (
	// XUsed is GitHub's count of requests already made in the window.
	XUsed = "x-ratelimit-used"

	// The X-Rate-Limit-* family (Twitter/X and others). Same meaning as
	// X-RateLimit-*.
	XRLimit     = "x-rate-limit-limit"
	XRRemaining = "x-rate-limit-remaining"
	XRReset     = "x-rate-limit-reset"
	XRUsed      = "x-rate-limit-used"

	// One field per value, as drafts -00 to -06 of
	// draft-ietf-httpapi-ratelimit-headers defined them and many servers
	// still send.
	OldLimit     = "ratelimit-limit"
	OldRemaining = "ratelimit-remaining"
	OldReset     = "ratelimit-reset"

	// Date is the response's origination time, the server's "now".
	Date = "date"
)

// Canonical forms, so that http.Header.Values finds them without allocating.
const (
	canonRetryAfter   = "Retry-After"
	canonDate         = "Date"
	canonRateLimit    = "Ratelimit"
	canonPolicy       = "Ratelimit-Policy"
	canonXLimit       = "X-Ratelimit-Limit"
	canonXRemaining   = "X-Ratelimit-Remaining"
	canonXReset       = "X-Ratelimit-Reset"
	canonXUsed        = "X-Ratelimit-Used"
	canonXRLimit      = "X-Rate-Limit-Limit"
	canonXRRemaining  = "X-Rate-Limit-Remaining"
	canonXRReset      = "X-Rate-Limit-Reset"
	canonXRUsed       = "X-Rate-Limit-Used"
	canonOldLimit     = "Ratelimit-Limit"
	canonOldRemaining = "Ratelimit-Remaining"
	canonOldReset     = "Ratelimit-Reset"
)

// Epoch thresholds. A reset value is a duration in seconds unless it is so
// large that no server would mean it as one: at or above EpochSeconds
// (2001-09-09, 31 years as a duration) it is a Unix time in seconds, as
// GitHub sends, and at or above EpochMillis a Unix time in milliseconds.
const (
	EpochSeconds = 1_000_000_000
	EpochMillis  = 1_000_000_000_000
)

// maxSeconds is the largest number of whole seconds a time.Duration holds.
const maxSeconds = math.MaxInt64 / int64(time.Second)

// Getter is where Parse reads header fields. http.Header implements it, and
// the plugin can implement it over the proxy-wasm header map without this
// package importing net/http (which the wasm plugin must not link).
//
// Parse asks for names in canonical form ("X-Ratelimit-Limit"), which
// http.Header looks up without allocating; other implementations must match
// names case-insensitively, as HTTP does.
type Getter interface {
	Values(name string) []string
}

// Fields is a set of Info fields that a response actually carried. It tells
// "Remaining is 0" apart from "the server did not say".
type Fields uint8

const (
	HasLimit Fields = 1 << iota
	HasRemaining
	HasReset
	HasRetryAfter
	HasWindow
)

// Info is what a response says about the client's rate limit, with every
// duration measured from the moment the response was received.
type Info struct {
	// Limit is the quota: requests allowed per window.
	Limit int
	// Remaining is how many more requests the window admits.
	Remaining int
	// Reset is the time until the quota is restored.
	Reset time.Duration
	// RetryAfter is the Retry-After wait; the IETF draft gives it
	// precedence over every other field.
	RetryAfter time.Duration
	// Window is the policy's window (the draft's w parameter).
	Window time.Duration
	// Policy names the policy the other fields describe (draft fields only).
	Policy string
	// Unit is the policy's quota unit (the draft's qu parameter) when the
	// fields name one: "requests" (the default, also when empty),
	// "content-bytes" or "concurrent-requests". Limit and Remaining count
	// in it.
	Unit string
	// Has says which of the fields above the response carried; a field that
	// is not in Has is zero.
	Has Fields
}

// Exhausted reports whether the response said that no request remains in
// the current window.
func (in Info) Exhausted() bool { return in.Has&HasRemaining != 0 && in.Remaining == 0 }

// Wait is how long the server asks the client to hold its next request:
// Retry-After when present (it takes precedence), else the reset when the
// quota is exhausted, else 0.
func (in Info) Wait() time.Duration {
	if in.Has&HasRetryAfter != 0 {
		return in.RetryAfter
	}
	if in.Exhausted() && in.Has&HasReset != 0 {
		return in.Reset
	}
	return 0
}

// Parse reads every rate-limit header family a server may send and reports
// false when none carries usable information. now is when the response was
// received; values that are points in time (HTTP-dates, epoch resets) are
// turned into durations against the response's Date field when it is valid,
// so that a client whose clock is off by minutes still waits the right time,
// and against now otherwise.
//
// Families, in order of precedence when several carry the same value:
// Retry-After (delta-seconds or any HTTP-date form); the IETF draft's
// RateLimit and RateLimit-Policy structured fields; X-RateLimit-*;
// X-Rate-Limit-*; and the early drafts' RateLimit-Limit/-Remaining/-Reset.
// When the draft fields list several policies, Info describes the most
// constrained one (fewest remaining, then the latest reset). Malformed
// values and list items are ignored one by one, never the whole response.
// No duration is ever negative, and Parse never panics.
//
// Draft-11 reading: RateLimit's t is the effective window, the time within
// which no more than r requests are admitted (Info.Reset); the pending
// spellings a (for r) and w (for t, in RateLimit) are read too; qu is
// Info.Unit. A response with an Age above 0 was served from a cache: only
// its Retry-After is read.
func Parse(h Getter, now time.Time) (Info, bool) {
	c := serverClock{h: h, now: now}
	var in Info
	if v, ok := first(h, canonRetryAfter); ok {
		if d, ok := parseRetryAfter(v, &c); ok {
			in.RetryAfter = d
			in.Has |= HasRetryAfter
		}
	}
	if Cached(h) {
		// Served from a cache: the quota fields are the origin's answer to
		// whoever asked then (draft-11 asks clients to ignore them).
		// Retry-After is the response's own instruction, and kept.
		return in, in.Has != 0
	}
	parseDraft(h, &c, &in)
	// The other families only fill what is still missing: skip their
	// lookups once the draft fields said everything (as Sluice's do).
	const all = HasLimit | HasRemaining | HasReset
	if in.Has&all != all {
		parseLegacy(h, &c, &in, canonXLimit, canonXRemaining, canonXReset, canonXUsed)
	}
	if in.Has&all != all {
		parseLegacy(h, &c, &in, canonXRLimit, canonXRRemaining, canonXRReset, canonXRUsed)
	}
	if in.Has&all != all {
		parseLegacy(h, &c, &in, canonOldLimit, canonOldRemaining, canonOldReset, "")
	}
	return in, in.Has != 0 || in.Policy != ""
}

// serverClock resolves the server's "now" from the Date field on first use,
// so responses without point-in-time values never pay for parsing a date.
type serverClock struct {
	h      Getter
	now    time.Time
	server time.Time
	done   bool
}

func (c *serverClock) Now() time.Time {
	if !c.done {
		c.done = true
		c.server = c.now
		if v, ok := first(c.h, canonDate); ok {
			if t, ok := ParseHTTPDate(v); ok {
				c.server = t
			}
		}
	}
	return c.server
}

func first(h Getter, name string) (string, bool) {
	vs := h.Values(name)
	if len(vs) == 0 {
		return "", false
	}
	return vs[0], true
}

// ParseHTTPDate parses the three HTTP-date forms of RFC 9110 section 5.6.7
// (IMF-fixdate, RFC 850, asctime), exactly the layouts http.ParseTime
// accepts. It exists so that this package need not import net/http.
func ParseHTTPDate(s string) (time.Time, bool) {
	s = trimOWS(s)
	for _, layout := range [...]string{
		"Mon, 02 Jan 2006 15:04:05 GMT", // http.TimeFormat
		time.RFC850,
		time.ANSIC,
	} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// ParseRetryAfter parses a Retry-After value: delta-seconds (a decimal
// fraction is tolerated and kept) or an HTTP-date, which becomes the time
// from serverNow (the response's Date, or the receive time). A date in the
// past means 0.
func ParseRetryAfter(v string, serverNow time.Time) (time.Duration, bool) {
	c := serverClock{server: serverNow, done: true}
	return parseRetryAfter(v, &c)
}

func parseRetryAfter(v string, c *serverClock) (time.Duration, bool) {
	v = trimOWS(v)
	if v == "" {
		return 0, false
	}
	if isDigit(v[0]) {
		sec, nsec, ok := parseDecimal(v)
		if !ok {
			return 0, false
		}
		return seconds(sec, nsec), true
	}
	t, ok := ParseHTTPDate(v)
	if !ok {
		return 0, false
	}
	return until(t, c.Now()), true
}

// ParseReset parses a reset value: seconds until the quota is restored, or,
// when the number is at least EpochSeconds, a Unix time (in milliseconds
// from EpochMillis on) that becomes the time from serverNow. A decimal
// fraction is tolerated. A reset in the past means 0.
func ParseReset(v string, serverNow time.Time) (time.Duration, bool) {
	c := serverClock{server: serverNow, done: true}
	return parseReset(legacyValue(v), &c)
}

func parseReset(v string, c *serverClock) (time.Duration, bool) {
	sec, nsec, ok := parseDecimal(v)
	if !ok {
		return 0, false
	}
	return resetFrom(sec, nsec, c), true
}

// resetFrom applies the epoch rule to a non-negative number of seconds.
func resetFrom(sec, nsec int64, c *serverClock) time.Duration {
	switch {
	case sec >= EpochMillis:
		ms := sec
		return until(time.UnixMilli(ms), c.Now())
	case sec >= EpochSeconds:
		return until(time.Unix(sec, nsec), c.Now())
	}
	return seconds(sec, nsec)
}

// until is t - now, never negative (time.Time.Sub saturates, never wraps).
func until(t, now time.Time) time.Duration {
	if d := t.Sub(now); d > 0 {
		return d
	}
	return 0
}

// seconds converts a non-negative sec.nsec to a Duration, saturating.
func seconds(sec, nsec int64) time.Duration {
	if sec >= maxSeconds {
		return math.MaxInt64
	}
	return time.Duration(sec)*time.Second + time.Duration(nsec)
}

// parseDecimal parses DIGITS [ "." DIGITS ] into whole seconds (saturating)
// and nanoseconds (extra fraction digits are dropped, so the value is
// rounded up to the next nanosecond only if they are non-zero).
func parseDecimal(s string) (sec, nsec int64, ok bool) {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		sec = satMulAdd(sec, int64(s[i]-'0'))
		i++
	}
	if i == 0 {
		return 0, 0, false
	}
	if i < len(s) && s[i] == '.' {
		i++
		start := i
		scale := int64(100_000_000)
		extra := false
		for i < len(s) && isDigit(s[i]) {
			if scale > 0 {
				nsec += int64(s[i]-'0') * scale
				scale /= 10
			} else if s[i] != '0' {
				extra = true
			}
			i++
		}
		if i == start {
			return 0, 0, false
		}
		if extra {
			nsec++ // never shorter than asked
			if nsec == int64(time.Second) {
				nsec = 0
				sec = satAdd(sec, 1)
			}
		}
	}
	if i != len(s) {
		return 0, 0, false
	}
	return sec, nsec, true
}

// satMulAdd returns v*10+d, saturating at math.MaxInt64.
func satMulAdd(v, d int64) int64 {
	if v > (math.MaxInt64-d)/10 {
		return math.MaxInt64
	}
	return v*10 + d
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// parseCount parses a legacy count: digits, or, when negIsZero, an
// optional minus sign too, so that a negative remaining count (a server
// that overshot) reads as 0. A negative limit is malformed.
func parseCount(v string, negIsZero bool) (int, bool) {
	neg := false
	if negIsZero && v != "" && v[0] == '-' {
		neg = true
		v = v[1:]
	}
	if v == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		if !isDigit(v[i]) {
			return 0, false
		}
		n = satMulAdd(n, int64(v[i]-'0'))
	}
	if neg {
		return 0, true
	}
	return clampInt(n), true
}

func clampInt(n int64) int {
	if n > math.MaxInt {
		return math.MaxInt
	}
	if n < 0 {
		return 0
	}
	return int(n)
}

// legacyValue returns the first element of a legacy field, without any
// parameters or surrounding whitespace: servers following the older drafts
// send "100, 100;w=60" where the first number is the value.
func legacyValue(v string) string {
	for i := 0; i < len(v); i++ {
		if v[i] == ',' || v[i] == ';' {
			v = v[:i]
			break
		}
	}
	return trimOWS(v)
}

// parseLegacy fills the fields in that in does not have yet from one
// family of single-value fields. used may be "" when the family has none.
func parseLegacy(h Getter, c *serverClock, in *Info, limit, remaining, reset, used string) {
	lim, limOK := 0, false
	if v, ok := first(h, limit); ok {
		lim, limOK = parseCount(legacyValue(v), false)
	}
	if limOK && in.Has&HasLimit == 0 {
		in.Limit = lim
		in.Has |= HasLimit
	}
	if in.Has&HasRemaining == 0 {
		if v, ok := first(h, remaining); ok {
			if n, ok := parseCount(legacyValue(v), true); ok {
				in.Remaining = n
				in.Has |= HasRemaining
			}
		}
	}
	if in.Has&HasRemaining == 0 && limOK && used != "" {
		if v, ok := first(h, used); ok {
			if n, ok := parseCount(legacyValue(v), false); ok {
				in.Remaining = max(lim-n, 0)
				in.Has |= HasRemaining
			}
		}
	}
	if in.Has&HasReset == 0 {
		if v, ok := first(h, reset); ok {
			if d, ok := parseReset(legacyValue(v), c); ok {
				in.Reset = d
				in.Has |= HasReset
			}
		}
	}
}

// parseDraft reads the RateLimit and RateLimit-Policy structured fields,
// and the draft -07 dictionary form of RateLimit (limit=, remaining=,
// reset=).
func parseDraft(h Getter, c *serverClock, in *Info) {
	best, found := draftRateLimit(h)
	if found {
		in.Remaining = clampInt(best.Remaining)
		in.Has |= HasRemaining
		if best.Reset >= 0 {
			in.Reset = resetFrom(best.Reset, 0, c)
			in.Has |= HasReset
		}
		in.Policy, in.Unit = best.Name, best.Unit
		if best.Quota >= 0 { // the dictionary form carries its limit
			in.Limit = clampInt(best.Quota)
			in.Has |= HasLimit
			return
		}
	}

	// The policy: the one named by the chosen RateLimit item, or, when no
	// item was usable, the policy with the lowest rate.
	pol, ok := draftPolicy(h, best.Name, found)
	if !ok {
		return
	}
	in.Limit = clampInt(pol.Quota)
	in.Has |= HasLimit
	if pol.Window > 0 {
		in.Window = seconds(pol.Window, 0)
		in.Has |= HasWindow
	}
	if !found {
		in.Policy = pol.Name
	}
	if in.Unit == "" {
		in.Unit = pol.Unit
	}
}

// draftRateLimit returns the RateLimit item that Info describes: of the
// list items that carry r, in every RateLimit field line, the most
// constrained; when there is none, the draft -07 dictionary members
// gathered into one Item. found is false when neither gives a remaining.
func draftRateLimit(h Getter) (best Item, found bool) {
	var dict Item // draft -07: Quota, Remaining, Reset from the dictionary
	dict.Quota, dict.Remaining, dict.Reset = -1, -1, -1
	for _, v := range h.Values(canonRateLimit) {
		for pos := 0; pos < len(v); {
			it, next, ok := nextItem(v, pos)
			pos = next
			if !ok {
				continue
			}
			if it.Value >= 0 {
				setDictMember(&dict, it)
				continue
			}
			if it.Reset < 0 && it.Window >= 0 {
				it.Reset = it.Window // RateLimit's w: the pending spelling of t
			}
			if it.Remaining < 0 {
				continue // r (or a) is the one required parameter
			}
			if !found || moreConstrained(it, best) {
				best, found = it, true
			}
		}
	}
	if !found && dict.Remaining >= 0 {
		best, found = dict, true
	}
	return best, found
}

// setDictMember stores the value of a draft -07 dictionary member (limit=,
// remaining= or reset=) in the Item that gathers them; a later member
// overrides an earlier one, and other names are ignored.
func setDictMember(dict *Item, m Item) {
	switch m.Name {
	case "limit":
		dict.Quota = m.Value
	case "remaining":
		dict.Remaining = m.Value
	case "reset":
		dict.Reset = m.Value
	}
}

// moreConstrained reports whether RateLimit item a leaves the client less
// room than b: fewer requests remaining, or as many but a later reset.
func moreConstrained(a, b Item) bool {
	return a.Remaining < b.Remaining || (a.Remaining == b.Remaining && a.Reset > b.Reset)
}

// draftPolicy returns the RateLimit-Policy item that gives Info its limit
// and window: when named, the first one called name (the policy of the
// chosen RateLimit item), else the one with the lowest rate. Items
// without q, and dictionary members, are not policies.
func draftPolicy(h Getter, name string, named bool) (pol Item, havePol bool) {
	for _, v := range h.Values(canonPolicy) {
		for pos := 0; pos < len(v); {
			it, next, ok := nextItem(v, pos)
			pos = next
			if !ok || it.Quota < 0 || it.Value >= 0 {
				continue
			}
			if named {
				if it.Name == name && !havePol {
					pol, havePol = it, true
				}
				continue
			}
			if !havePol || slower(it, pol) {
				pol, havePol = it, true
			}
		}
	}
	return pol, havePol
}

// slower reports whether policy a admits fewer requests per second than b.
// A policy without a window counts as the slowest (the draft's default
// window is unbounded).
func slower(a, b Item) bool {
	if a.Window <= 0 || b.Window <= 0 {
		return a.Window <= 0 && b.Window > 0
	}
	// a.Quota/a.Window < b.Quota/b.Window, in float: both are at most 15
	// digits, too many for an exact int64 product.
	return float64(a.Quota)*float64(b.Window) < float64(b.Quota)*float64(a.Window)
}
