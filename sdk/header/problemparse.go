package header

import (
	"strings"
	"time"
	"unicode/utf8"
)

// The reading side of draft-ietf-httpapi-ratelimit-headers-11 beyond the
// fields themselves: the problem document of a refusal, and whether a
// response's fields are fresh. Hand-written like the rest of the package:
// the plugin, which links it, must not link encoding/json.

// Age is the field a cache adds to a response it serves (RFC 9111).
const Age = "age"

const canonAge = "Age"

// Problem is what an application/problem+json body (RFC 9457) says about a
// refusal, as the rate-limit draft defines it.
type Problem struct {
	// Type is the problem type URI, e.g. QuotaExceeded.
	Type string
	// Status is the status member; 0 when absent or not an integer.
	Status int
	// ViolatedPolicies names the policies that refused the request, by
	// their RateLimit-Policy names: the ones a client should hold.
	ViolatedPolicies []string
	// RetryAfter is the retry-after member (Sluice writes the Retry-After
	// seconds there too); HasRetryAfter says whether it was present.
	RetryAfter    time.Duration
	HasRetryAfter bool
}

// maxProblemPolicies bounds ViolatedPolicies, whatever the body holds.
const maxProblemPolicies = 16

// maxProblemDepth bounds the nesting of the values the parser skips.
const maxProblemDepth = 32

// IsProblem reports whether a Content-Type value is application/problem+json
// (parameters and case ignored).
func IsProblem(contentType string) bool {
	if i := strings.IndexByte(contentType, ';'); i >= 0 {
		contentType = contentType[:i]
	}
	return strings.EqualFold(trimOWS(contentType), ProblemContentType)
}

// ParseProblem reads a problem document: a JSON object whose type, status,
// violated-policies (an array of strings; other elements are skipped) and
// retry-after (a non-negative number of seconds) members it keeps, and
// whose other members it skips. It reports false for anything that is not
// a well-formed JSON object (trailing whitespace allowed). It never
// panics, and its work is linear in len(b).
func ParseProblem(b []byte) (Problem, bool) {
	p := jsonScanner{b: b}
	var pr Problem
	p.ws()
	if !p.eat('{') {
		return Problem{}, false
	}
	p.ws()
	if p.eat('}') {
		return pr, p.end()
	}
	for {
		p.ws()
		key, ok := p.str()
		if !ok {
			return Problem{}, false
		}
		p.ws()
		if !p.eat(':') {
			return Problem{}, false
		}
		p.ws()
		if !p.member(key, &pr) {
			return Problem{}, false
		}
		p.ws()
		if p.eat(',') {
			continue
		}
		if p.eat('}') {
			return pr, p.end()
		}
		return Problem{}, false
	}
}

// member reads the value of the member named key into pr when it is one
// the draft defines with the expected type, and skips it otherwise.
func (p *jsonScanner) member(key string, pr *Problem) bool {
	switch key { // a repeated member: the last one counts, as in encoding/json
	case "type":
		pr.Type = ""
	case "status":
		pr.Status = 0
	case ViolatedPolicies:
		pr.ViolatedPolicies = pr.ViolatedPolicies[:0]
	case RetryAfterMember:
		pr.RetryAfter, pr.HasRetryAfter = 0, false
	}
	switch key {
	case "type":
		if p.peek() == '"' {
			s, ok := p.str()
			pr.Type = s
			return ok
		}
	case "status":
		if n, ok, isNum := p.integer(); isNum {
			if ok && n >= 100 && n <= 999 {
				pr.Status = int(n)
			}
			return true
		}
	case ViolatedPolicies:
		if p.peek() == '[' {
			return p.policies(pr)
		}
	case RetryAfterMember:
		if c := p.peek(); c >= '0' && c <= '9' {
			start := p.i
			if !p.number() {
				return false
			}
			if sec, nsec, ok := parseDecimal(string(p.b[start:p.i])); ok {
				pr.RetryAfter, pr.HasRetryAfter = seconds(sec, nsec), true
			}
			return true
		}
	}
	return p.skip(0)
}

// policies reads the violated-policies array.
func (p *jsonScanner) policies(pr *Problem) bool {
	p.i++ // '['
	p.ws()
	if p.eat(']') {
		return true
	}
	for {
		p.ws()
		if p.peek() == '"' {
			s, ok := p.str()
			if !ok {
				return false
			}
			if s != "" && len(pr.ViolatedPolicies) < maxProblemPolicies {
				pr.ViolatedPolicies = append(pr.ViolatedPolicies, s)
			}
		} else if !p.skip(1) {
			return false
		}
		p.ws()
		if p.eat(',') {
			continue
		}
		return p.eat(']')
	}
}

// jsonScanner reads RFC 8259 JSON from b at i.
type jsonScanner struct {
	b []byte
	i int
}

func (p *jsonScanner) peek() byte {
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

func (p *jsonScanner) eat(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *jsonScanner) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// end reports whether only whitespace is left.
func (p *jsonScanner) end() bool {
	p.ws()
	return p.i == len(p.b)
}

// skip skips one value of any type, nested at most maxProblemDepth deep.
func (p *jsonScanner) skip(depth int) bool {
	if depth > maxProblemDepth {
		return false
	}
	switch c := p.peek(); {
	case c == '"':
		_, ok := p.str()
		return ok
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == '{' || c == '[':
		return p.container(depth)
	}
	for _, lit := range [...]string{"true", "false", "null"} {
		if len(p.b)-p.i >= len(lit) && string(p.b[p.i:p.i+len(lit)]) == lit {
			p.i += len(lit)
			return true
		}
	}
	return false
}

// container skips an object or an array.
func (p *jsonScanner) container(depth int) bool {
	closer := byte(']')
	if p.b[p.i] == '{' {
		closer = '}'
	}
	p.i++
	p.ws()
	if p.eat(closer) {
		return true
	}
	for {
		p.ws()
		if closer == '}' {
			if _, ok := p.str(); !ok {
				return false
			}
			p.ws()
			if !p.eat(':') {
				return false
			}
			p.ws()
		}
		if !p.skip(depth + 1) {
			return false
		}
		p.ws()
		if p.eat(',') {
			continue
		}
		return p.eat(closer)
	}
}

// number skips a JSON number.
func (p *jsonScanner) number() bool {
	p.eat('-')
	switch c := p.peek(); {
	case c == '0':
		p.i++
	case c >= '1' && c <= '9':
		p.digits()
	default:
		return false
	}
	if p.eat('.') && !p.digits() {
		return false
	}
	if c := p.peek(); c == 'e' || c == 'E' {
		p.i++
		if c := p.peek(); c == '+' || c == '-' {
			p.i++
		}
		if !p.digits() {
			return false
		}
	}
	return true
}

func (p *jsonScanner) digits() bool {
	start := p.i
	for p.i < len(p.b) && isDigit(p.b[p.i]) {
		p.i++
	}
	return p.i > start
}

// integer reads a number; isNum says one was there (and consumed, valid or
// not as JSON: ok false then), and ok that it is a plain integer that fits.
func (p *jsonScanner) integer() (n int64, ok, isNum bool) {
	c := p.peek()
	if c != '-' && !isDigit(c) {
		return 0, false, false
	}
	start := p.i
	if !p.number() {
		return 0, false, true
	}
	v, fits := parseCount(string(p.b[start:p.i]), false)
	return int64(v), fits && p.i-start <= 15, true
}

// str reads a JSON string and returns it unescaped; a string with a
// control character, a bad escape or invalid UTF-8 is malformed. Only a
// string with escapes is copied.
func (p *jsonScanner) str() (string, bool) {
	if !p.eat('"') {
		return "", false
	}
	start := p.i
	for p.i < len(p.b) {
		switch c := p.b[p.i]; {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			if !utf8.Valid(s) {
				return "", false
			}
			return string(s), true
		case c == '\\':
			p.i = start
			return p.escaped()
		case c < 0x20:
			return "", false
		default:
			p.i++
		}
	}
	return "", false
}

// escaped reads the rest of a string that holds escapes, from p.i just
// after its opening quote.
func (p *jsonScanner) escaped() (string, bool) {
	var out []byte
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			if !utf8.Valid(out) {
				return "", false
			}
			return string(out), true
		case c < 0x20:
			return "", false
		case c != '\\':
			out = append(out, c)
			p.i++
			continue
		}
		if p.i+1 >= len(p.b) {
			return "", false
		}
		e := p.b[p.i+1]
		p.i += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", false
			}
			if r >= 0xd800 && r < 0xdc00 { // a surrogate pair's first half
				if lo, ok := p.lowSurrogate(); ok {
					r = 0x10000 + (r-0xd800)<<10 + (lo - 0xdc00)
				} else {
					r = utf8.RuneError
				}
			} else if r >= 0xdc00 && r < 0xe000 {
				r = utf8.RuneError
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", false
		}
	}
	return "", false
}

func (p *jsonScanner) hex4() (rune, bool) {
	if len(p.b)-p.i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p.b[p.i : p.i+4] {
		switch {
		case isDigit(c):
			r = r<<4 | rune(c-'0')
		case c|0x20 >= 'a' && c|0x20 <= 'f':
			r = r<<4 | rune(c|0x20-'a'+10)
		default:
			return 0, false
		}
	}
	p.i += 4
	return r, true
}

// lowSurrogate reads a \uDC00-\uDFFF escape that completes a pair, if one
// follows.
func (p *jsonScanner) lowSurrogate() (rune, bool) {
	if len(p.b)-p.i < 6 || p.b[p.i] != '\\' || p.b[p.i+1] != 'u' {
		return 0, false
	}
	save := p.i
	p.i += 2
	if lo, ok := p.hex4(); ok && lo >= 0xdc00 && lo < 0xe000 {
		return lo, true
	}
	p.i = save
	return 0, false
}

// Cached reports whether the response was served from a cache: it carries
// an Age field above 0 (RFC 9111). The rate-limit draft asks clients to
// ignore a cached response's rate-limit fields: they describe the quota as
// it was when the origin answered, for whichever client asked then.
func Cached(h Getter) bool {
	v, ok := first(h, canonAge)
	if !ok {
		return false
	}
	n, ok := parseCount(trimOWS(v), false)
	return ok && n > 0
}
