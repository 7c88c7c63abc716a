// Package textnum is strings.TrimSpace and strconv.Atoi for the plugin,
// each exactly the standard library's result on every input.
//
// Why: strings.TrimSpace and bytes.TrimSpace reach the standard library's
// generic trimming (TrimFunc, its index functions, utf8.DecodeLastRune),
// and strconv.Atoi and ParseInt its error type and messages: about 20 KB
// of wasm code together, which Envoy's V8 keeps in every Envoy, for a few
// calls on configuration values, X-Forwarded-For entries and a
// grpc-status. TestTrimSpaceIsStrings and TestAtoiIsStrconv hold them to
// the standard library on chosen and random inputs.
package textnum

// TrimSpace returns s without its leading and trailing white space, as
// Unicode defines it (unicode.IsSpace): strings.TrimSpace(s).
//
// Not inlined: a copy at each call site costs more wasm code than the
// call (docs/design/memory.md, "Inlining"); not on a request's path
// without a cost or a concurrency rule.
//
//go:noinline
func TrimSpace(s string) string {
	i, j := SpaceBounds(s)
	return s[i:j]
}

// SpaceBounds returns where s without its leading and trailing white space
// begins and ends: TrimSpace(s) is s[i:j] (i == j when s is all space).
func SpaceBounds(s string) (i, j int) {
	for i < len(s) {
		n := spaceAt(s[i:])
		if n == 0 {
			break
		}
		i += n
	}
	j = len(s)
	for j > i {
		n := spaceBefore(s[i:j])
		if n == 0 {
			break
		}
		j -= n
	}
	return i, j
}

// spaceAt is the length of the white space rune s begins with, 0 if none.
// A rune decodes as a space only from its one valid UTF-8 encoding, so the
// bytes are compared with those of the Unicode spaces.
func spaceAt(s string) int {
	if len(s) == 0 {
		return 0
	}
	switch c := s[0]; {
	case c == ' ' || c >= '\t' && c <= '\r':
		return 1
	case c == 0xC2 && len(s) >= 2 && (s[1] == 0x85 || s[1] == 0xA0): // U+0085, U+00A0
		return 2
	case c >= 0xE1 && c <= 0xE3 && len(s) >= 3 && wide(c, s[1], s[2]):
		return 3
	}
	return 0
}

// spaceBefore is the length of the white space rune s ends with, 0 if none.
func spaceBefore(s string) int {
	n := len(s)
	switch {
	case n >= 1 && spaceAt(s[n-1:]) == 1:
		return 1
	case n >= 2 && spaceAt(s[n-2:]) == 2:
		return 2
	case n >= 3 && spaceAt(s[n-3:]) == 3:
		return 3
	}
	return 0
}

// wide reports whether the three bytes encode a white space rune beyond
// Latin-1: U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000.
func wide(a, b, c byte) bool {
	switch {
	case a == 0xE1:
		return b == 0x9A && c == 0x80
	case a == 0xE3:
		return b == 0x80 && c == 0x80
	case b == 0x80: // a == 0xE2
		return c >= 0x80 && c <= 0x8A || c == 0xA8 || c == 0xA9 || c == 0xAF
	}
	return b == 0x81 && c == 0x9F
}

// Atoi is strconv.Atoi on a 64-bit int: an optional sign and at least one
// decimal digit, in int64's range; ok is false where Atoi fails.
func Atoi(s string) (n int, ok bool) {
	neg := false
	if len(s) > 0 && (s[0] == '-' || s[0] == '+') {
		neg, s = s[0] == '-', s[1:]
	}
	if len(s) == 0 {
		return 0, false
	}
	var u uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' || u > (1<<64-1)/10 {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
		if u < uint64(c-'0') { // wrapped
			return 0, false
		}
	}
	switch {
	case !neg && u <= 1<<63-1:
		return int(u), true
	case neg && u <= 1<<63:
		return int(-u), true
	}
	return 0, false
}
