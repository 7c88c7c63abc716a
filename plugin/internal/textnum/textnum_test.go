package textnum

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// pieces are what the random strings are made of: every white space rune,
// ASCII and not, their encodings cut short or with a byte changed,
// neighbours of the spaces, invalid bytes.
var pieces = []string{
	" ", "\t", "\n", "\v", "\f", "\r", "\x1c", "\x1f", "\x08", "\x0e", "a", "0", "\x00",
	"\u0085", "\u00a0", "\u1680", "\u2000", "\u2005", "\u200a", "\u200b", "\u2028", "\u2029", "\u202f",
	"\u205f", "\u3000", "\u3001", "\u1681", "\u00a1", "\u0084", "\u2027", "\u202e", "\u205e", "\u180e",
	"\xc2", "\xe2\x80", "\xe2", "\x80", "\x85", "\xa0", "\xe1\x9a", "\xe3\x80", "\xe2\x81",
	"\xf0\x9f\x98\x80", "\xf0\xe2\x80\x80", "\xff", "\xc0\xa0", "\xe0\x80\xa0", "é", "世",
}

func TestTrimSpaceIsStrings(t *testing.T) {
	check := func(s string) {
		t.Helper()
		if got, want := TrimSpace(s), strings.TrimSpace(s); got != want {
			t.Fatalf("TrimSpace(%q) = %q, strings.TrimSpace %q", s, got, want)
		}
	}
	for _, p := range pieces {
		for _, q := range pieces {
			check(p + q)
			check(p + "x" + q)
			check(q + p + q)
		}
	}
	for r := rune(0); r <= 0x3100; r++ { // every rune up to past U+3000, alone and around text
		s := string(r)
		check(s)
		check(s + "x" + s)
	}
	rng := rand.New(rand.NewPCG(7, 9))
	for range 300000 {
		var b strings.Builder
		for range rng.IntN(7) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		check(b.String())
	}
}

func TestAtoiIsStrconv(t *testing.T) {
	check := func(s string) {
		t.Helper()
		want, err := strconv.Atoi(s)
		got, ok := Atoi(s)
		if ok != (err == nil) || ok && got != want {
			t.Fatalf("Atoi(%q) = %d, %v; strconv.Atoi %d, %v", s, got, ok, want, err)
		}
	}
	for _, s := range []string{"", "+", "-", "0", "-0", "+0", "007", "12", "-12", "+12", " 1", "1 ", "1_000", "0x10", "1e3",
		"9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
		"18446744073709551615", "18446744073709551616", "99999999999999999999", "184467440737095516150",
		"00000000000000000000009223372036854775807", "--1", "+-1", "١"} {
		check(s)
	}
	rng := rand.New(rand.NewPCG(1, 3))
	digits := "0123456789"
	for range 300000 {
		var b strings.Builder
		switch rng.IntN(4) {
		case 0:
			b.WriteByte('-')
		case 1:
			b.WriteByte('+')
		}
		for range rng.IntN(24) {
			if rng.IntN(50) == 0 {
				b.WriteByte("x_ -+."[rng.IntN(6)])
			} else {
				b.WriteByte(digits[rng.IntN(10)])
			}
		}
		check(b.String())
	}
}
