package config

import (
	"unicode"
	"unicode/utf8"
)

// AppendFold appends to dst the case-folded form of clean, a path as
// CleanPath returns it, and returns the extended slice: the form rules with
// `case_sensitive: false` match and key on. Two paths have the same folded
// form when an upstream that routes as ASP.NET Core does (OrdinalIgnoreCase
// on the decoded path: each character upper-cased by Unicode's simple
// mapping) takes them for the same path:
//
//   - percent-encoded UTF-8 is decoded first, so "/log%C4%B1n" (a dotless
//     i, whose upper case is 'I') folds as "/LOGIN" does;
//   - every character is upper-cased with unicode.ToUpper (the simple
//     mapping; no one-to-many mappings such as "ß" to "SS");
//   - a non-ASCII result is written percent-encoded (upper-case hex), so
//     that the raw and the encoded spelling of a character fold alike;
//   - what is not valid UTF-8 stays as it is (an escape stays an escape,
//     as Kestrel's decoder leaves it), and so do the escapes of ASCII
//     characters CleanPath keeps encoded ("%3F"): none is a letter.
//
// Folding a folded path changes nothing (FuzzFold). It does not allocate
// when dst has room.
func AppendFold(dst []byte, clean string) []byte {
	for i := 0; i < len(clean); {
		c := clean[i]
		switch {
		case c == '%':
			r, n := decodeEscaped(clean[i:])
			if n == 0 {
				// Not a UTF-8 sequence of escapes: keep one escape as it
				// is (hex in upper case), or the '%' if it is none
				// (CleanPath never leaves one bare).
				if _, ok := escapeAt(clean, i); ok {
					dst = append(dst, '%', upper(clean[i+1]), upper(clean[i+2]))
					i += 3
				} else {
					dst = append(dst, '%')
					i++
				}
				continue
			}
			dst = appendUpperRune(dst, r)
			i += n
		case c < utf8.RuneSelf:
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			dst = append(dst, c)
			i++
		default:
			r, n := utf8.DecodeRuneInString(clean[i:])
			if r == utf8.RuneError && n <= 1 {
				dst = append(dst, c)
				i++
				continue
			}
			dst = appendUpperRune(dst, r)
			i += n
		}
	}
	return dst
}

// FoldPath returns AppendFold of clean as a new string (for configuration
// time and tests; the request path uses AppendFold with a reused buffer).
func FoldPath(clean string) string {
	return string(AppendFold(make([]byte, 0, len(clean)), clean))
}

// decodeEscaped decodes the escapes at the start of s ("%C4%B1...") as one
// UTF-8 encoded character other than ASCII, and returns it and the number
// of bytes of s its escapes take; n = 0 if they are not one (an ASCII
// escape, a bad escape, an invalid or cut sequence).
func decodeEscaped(s string) (r rune, n int) {
	var b [utf8.UTFMax]byte
	lead, ok := escapeAt(s, 0)
	if !ok || lead < utf8.RuneSelf {
		return 0, 0
	}
	size := 0
	switch {
	case lead&0xE0 == 0xC0:
		size = 2
	case lead&0xF0 == 0xE0:
		size = 3
	case lead&0xF8 == 0xF0:
		size = 4
	default:
		return 0, 0
	}
	b[0] = lead
	for k := 1; k < size; k++ {
		x, ok := escapeAt(s, 3*k)
		if !ok {
			return 0, 0
		}
		b[k] = x
	}
	r, got := utf8.DecodeRune(b[:size])
	if got != size {
		return 0, 0 // overlong, a surrogate, out of range, bad continuation
	}
	return r, 3 * size
}

// escapeAt returns the byte the escape "%XX" at s[i:] encodes.
func escapeAt(s string, i int) (byte, bool) {
	if i+2 >= len(s) || s[i] != '%' || !isHex(s[i+1]) || !isHex(s[i+2]) {
		return 0, false
	}
	return unhex(s[i+1])<<4 | unhex(s[i+2]), true
}

// appendUpperRune appends r upper-cased: an ASCII result as itself, any
// other percent-encoded.
func appendUpperRune(dst []byte, r rune) []byte {
	r = unicode.ToUpper(r)
	if r < utf8.RuneSelf {
		return append(dst, byte(r))
	}
	var b [utf8.UTFMax]byte
	n := utf8.EncodeRune(b[:], r)
	const hex = "0123456789ABCDEF"
	for _, x := range b[:n] {
		dst = append(dst, '%', hex[x>>4], hex[x&0xf])
	}
	return dst
}

// upperString is strings.ToUpper (Unicode's simple mapping per rune,
// invalid UTF-8 as U+FFFD) without linking strings.Map: methods are
// upper-cased with the unicode tables the path folding links anyway.
func upperString(s string) string {
	b := make([]byte, 0, len(s))
	for _, r := range s {
		if 'a' <= r && r <= 'z' {
			r -= 'a' - 'A'
		} else if r >= utf8.RuneSelf {
			r = unicode.ToUpper(r)
		}
		b = utf8.AppendRune(b, r)
	}
	return string(b)
}

// lowerASCII lower-cases ASCII letters: for header names, which
// validHeaderName has checked are ASCII.
func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
