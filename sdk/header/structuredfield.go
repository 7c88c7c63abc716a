package header

import "iter"

// A parser of the RFC 9651 structured field values that the draft's
// RateLimit and RateLimit-Policy fields are written in (see parseDraft).
// It reads every kind of bare item, so that a member it does not use is
// skipped rather than ending the field, and keeps what those fields carry:
// list members (and draft -07 dictionary members) naming a policy, with
// integer parameters.

// Item is one member of a RateLimit or RateLimit-Policy structured field
// list (RFC 9651), as draft-ietf-httpapi-ratelimit-headers defines them:
// a String (or, tolerated, a Token) naming the policy, with integer
// parameters. A parameter the member lacks is -1.
type Item struct {
	Name      string
	Quota     int64  // q: requests per window (RateLimit-Policy)
	Window    int64  // w: window in seconds (RateLimit-Policy)
	Remaining int64  // r (or a): remaining quota (RateLimit)
	Reset     int64  // t: seconds until the quota is restored (RateLimit)
	Unit      string // qu: the quota unit; "" when absent (requests)

	// Value is set by a dictionary member "name=<integer>" (draft -07's
	// "limit=100, remaining=50, reset=5"); -1 for a list item.
	Value int64
}

// Items yields the well-formed members of one structured field value in
// order and skips the malformed ones: a member whose q, w, r or t is not a
// non-negative Integer, a bare item that is not a String or Token, an inner
// list, or a syntax error (up to the next top-level comma).
func Items(field string) iter.Seq[Item] {
	return func(yield func(Item) bool) {
		for pos := 0; pos < len(field); {
			it, next, ok := nextItem(field, pos)
			pos = next
			if ok && !yield(it) {
				return
			}
		}
	}
}

// nextItem parses the list member that starts at or after pos and returns
// the position after its separating comma. ok is false for a malformed or
// empty member, which the caller skips.
func nextItem(s string, pos int) (it Item, next int, ok bool) {
	it = Item{Quota: -1, Window: -1, Remaining: -1, Reset: -1, Value: -1}
	p := parser{s: s, i: pos}
	p.skipOWS()
	if p.done() {
		return it, len(s), false
	}
	if !p.member(&it) {
		return it, skipMember(s, p.i), false
	}
	p.skipOWS()
	if p.done() {
		return it, len(s), true
	}
	if s[p.i] != ',' {
		return it, skipMember(s, p.i), false
	}
	return it, p.i + 1, true
}

// skipMember returns the position after the next comma that is outside a
// String, or len(s).
func skipMember(s string, i int) int {
	inStr := false
	for ; i < len(s); i++ {
		switch c := s[i]; {
		case inStr && c == '\\':
			i++
		case c == '"':
			inStr = !inStr
		case !inStr && c == ',':
			return i + 1
		}
	}
	return len(s)
}

type parser struct {
	s       string
	i       int
	lastStr string // the String or Token bareItem read last
}

func (p *parser) done() bool { return p.i >= len(p.s) }

func (p *parser) skipOWS() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *parser) skipSP() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

// member parses a String or Token, an optional "=" bare item (dictionary
// member), and parameters.
func (p *parser) member(it *Item) bool {
	if !p.memberName(it) {
		return false
	}
	for !p.done() && p.s[p.i] == ';' {
		p.i++
		p.skipSP()
		if !p.param(it) {
			return false
		}
	}
	return true
}

// memberName parses the bare item that starts a member: a String or Token
// naming the policy, and after a Token an optional "=" bare item, which
// makes the member a dictionary member whose value is kept in Value when
// it is a non-negative Integer.
func (p *parser) memberName(it *Item) bool {
	if p.done() {
		return false
	}
	switch c := p.s[p.i]; {
	case c == '"':
		name, ok := p.str()
		if !ok {
			return false
		}
		it.Name = name
	case isAlpha(c) || c == '*':
		it.Name = p.token()
		if !p.done() && p.s[p.i] == '=' {
			p.i++
			k, n, ok := p.bareItem()
			if !ok {
				return false
			}
			if k == kindInt && n >= 0 {
				it.Value = n
			}
		}
	default:
		return false
	}
	return true
}

// param parses one parameter, its key and optional "=" bare item (a key
// alone is Boolean true), and stores the ones Item carries. A q, w, r, a
// or t that is not a non-negative Integer makes the whole member malformed;
// other keys need only be well-formed.
func (p *parser) param(it *Item) bool {
	key, ok := p.key()
	if !ok {
		return false
	}
	kind, n := kindBool, int64(1)
	if !p.done() && p.s[p.i] == '=' {
		p.i++
		if kind, n, ok = p.bareItem(); !ok {
			return false
		}
	}
	if key == "qu" && kind == kindString {
		it.Unit = p.lastStr
		return true
	}
	var dst *int64
	switch key {
	case "q":
		dst = &it.Quota
	case "w":
		dst = &it.Window
	case "r", "a": // a: the pending spelling of r
		dst = &it.Remaining
	case "t":
		dst = &it.Reset
	default:
		return true // pk, c and extensions: valid, not needed
	}
	if kind != kindInt || n < 0 {
		return false
	}
	*dst = n
	return true
}

const (
	kindInt = iota
	kindOther
	kindBool
	kindString // a String or a Token, in parser.lastStr
)

// bareItem parses any RFC 9651 bare item; only Integers report their value.
func (p *parser) bareItem() (kind int, n int64, ok bool) {
	if p.done() {
		return 0, 0, false
	}
	switch c := p.s[p.i]; {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		s, ok := p.str()
		p.lastStr = s
		return kindString, 0, ok
	case isAlpha(c) || c == '*':
		p.lastStr = p.token()
		return kindString, 0, true
	case c == ':':
		p.i++
		for !p.done() && isBase64(p.s[p.i]) {
			p.i++
		}
		if p.done() || p.s[p.i] != ':' {
			return 0, 0, false
		}
		p.i++
		return kindOther, 0, true
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return kindBool, 0, true
		}
		return 0, 0, false
	case c == '@':
		p.i++
		k, _, ok := p.number()
		return kindOther, 0, ok && k == kindInt
	case c == '%':
		return kindOther, 0, p.displayString()
	}
	return 0, 0, false
}

// number parses an Integer (at most 15 digits) or a Decimal (at most 12
// integer and 3 fraction digits).
func (p *parser) number() (kind int, n int64, ok bool) {
	if p.done() {
		return 0, 0, false
	}
	neg := false
	if p.s[p.i] == '-' {
		neg = true
		p.i++
	}
	start := p.i
	for !p.done() && isDigit(p.s[p.i]) {
		n = n*10 + int64(p.s[p.i]-'0')
		p.i++
		if p.i-start > 15 {
			return 0, 0, false
		}
	}
	digits := p.i - start
	if digits == 0 {
		return 0, 0, false
	}
	if neg {
		n = -n
	}
	if p.done() || p.s[p.i] != '.' {
		return kindInt, n, true
	}
	if digits > 12 {
		return 0, 0, false
	}
	p.i++
	fstart := p.i
	for !p.done() && isDigit(p.s[p.i]) {
		p.i++
	}
	if f := p.i - fstart; f < 1 || f > 3 {
		return 0, 0, false
	}
	return kindOther, 0, true
}

// str parses an sf-string and returns its content, unescaped. Only a
// string with escapes allocates.
func (p *parser) str() (string, bool) {
	p.i++ // opening quote
	start := p.i
	escaped := false
	for !p.done() {
		c := p.s[p.i]
		switch {
		case c == '\\':
			if p.i+1 >= len(p.s) || (p.s[p.i+1] != '"' && p.s[p.i+1] != '\\') {
				return "", false
			}
			escaped = true
			p.i += 2
		case c == '"':
			raw := p.s[start:p.i]
			p.i++
			if escaped {
				return unescape(raw), true
			}
			return raw, true
		case c < 0x20 || c > 0x7e:
			return "", false
		default:
			p.i++
		}
	}
	return "", false
}

func unescape(raw string) string {
	b := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		if raw[i] == '\\' {
			i++
		}
		b = append(b, raw[i])
	}
	return string(b)
}

// displayString parses %"..." with lower-case %xx escapes.
func (p *parser) displayString() bool {
	p.i++
	if p.done() || p.s[p.i] != '"' {
		return false
	}
	p.i++
	for !p.done() {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return true
		case c == '%':
			if p.i+2 >= len(p.s) || !isLowerHex(p.s[p.i+1]) || !isLowerHex(p.s[p.i+2]) {
				return false
			}
			p.i += 3
		case c < 0x20 || c > 0x7e:
			return false
		default:
			p.i++
		}
	}
	return false
}

func (p *parser) token() string {
	start := p.i
	p.i++
	for !p.done() && isTokenChar(p.s[p.i]) {
		p.i++
	}
	return p.s[start:p.i]
}

func (p *parser) key() (string, bool) {
	if p.done() {
		return "", false
	}
	if c := p.s[p.i]; !(c >= 'a' && c <= 'z') && c != '*' {
		return "", false
	}
	start := p.i
	p.i++
	for !p.done() {
		c := p.s[p.i]
		if !(c >= 'a' && c <= 'z') && !isDigit(c) && c != '_' && c != '-' && c != '.' && c != '*' {
			break
		}
		p.i++
	}
	return p.s[start:p.i], true
}

func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

func isDigit(c byte) bool    { return c >= '0' && c <= '9' }
func isAlpha(c byte) bool    { return c|0x20 >= 'a' && c|0x20 <= 'z' }
func isLowerHex(c byte) bool { return isDigit(c) || (c >= 'a' && c <= 'f') }

func isBase64(c byte) bool {
	return isAlpha(c) || isDigit(c) || c == '+' || c == '/' || c == '='
}

// isTokenChar reports tchar / ":" / "/" (RFC 9651 sf-token).
func isTokenChar(c byte) bool {
	if isAlpha(c) || isDigit(c) {
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~', ':', '/':
		return true
	}
	return false
}
