package config

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestFoldPath(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"/login", "/LOGIN"},
		{"/LOGIN", "/LOGIN"},
		{"/lOgIn/x", "/LOGIN/X"},
		{"/log%C4%B1n", "/LOGIN"},          // dotless i: ToUpper is 'I'
		{"/log\u0131n", "/LOGIN"},          // the same, raw
		{"/%C5%BFale", "/SALE"},            // long s
		{"/caf%C3%A9", "/CAF%C3%89"},       // é → É, encoded
		{"/caf\u00e9", "/CAF%C3%89"},       // raw é folds as its escape does
		{"/caf%C3%89", "/CAF%C3%89"},       // already upper
		{"/stra%C3%9Fe", "/STRA%C3%9FE"},   // ß has no simple upper-case mapping
		{"/a%3Fb", "/A%3FB"},               // an ASCII escape stays
		{"/%C4", "/%C4"},                   // cut sequence
		{"/%C4a", "/%C4A"},                 // bad continuation: the lead stays an escape
		{"/%C0%AF", "/%C0%AF"},             // overlong
		{"/%ED%A0%80", "/%ED%A0%80"},       // surrogate
		{"/%F0%9D%90%9A", "/%F0%9D%90%9A"}, // U+1D41A (no upper case)
		{"/%F0%90%90%A8", "/%F0%90%90%80"}, // Deseret: U+10428 → U+10400
		{"/k\u212a", "/K%E2%84%AA"},        // Kelvin sign upper-cases to itself
		{"/x\xffy", "/X\xffY"},             // invalid raw byte stays
		{"", ""},
	} {
		if got := FoldPath(c.in); got != c.want {
			t.Errorf("FoldPath(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestFoldSpellings: every spelling an upstream routing as ASP.NET Core
// takes for /login folds, after CleanPath, to the folded /login.
func TestFoldSpellings(t *testing.T) {
	want := FoldPath("/login")
	for _, p := range []string{"/login", "/LOGIN", "/Login", "/%4Cogin", "//LOGIN", "/log%C4%B1n", "/log%c4%b1n", "/./LoGiN", "/x/../login;a"} {
		var buf []byte
		if got := FoldPath(CleanPath(&buf, p)); got != want {
			t.Errorf("%q folds to %q, want %q", p, got, want)
		}
	}
	var buf []byte
	if got := FoldPath(CleanPath(&buf, "/lOgIn/x")); !strings.HasPrefix(got, want+"/") {
		t.Errorf("/lOgIn/x folds to %q", got)
	}
}

func TestAppendFoldNoAlloc(t *testing.T) {
	buf := make([]byte, 0, 64)
	n := testing.AllocsPerRun(100, func() { buf = AppendFold(buf[:0], "/api/v1/Caf%C3%A9/log%C4%B1n") })
	if n != 0 {
		t.Errorf("AppendFold allocates %v times", n)
	}
}

func TestMatchIgnoreCase(t *testing.T) {
	var m Match
	m.PathPrefix = "/Login"
	m.SetCaseSensitive(false)
	for _, p := range []string{"/login", "/LOGIN/x", "/log\u0131n"} {
		if !m.Applies(p, "GET") {
			t.Errorf("%q does not match a case-insensitive /Login prefix", p)
		}
	}
	if m.Applies("/logout", "GET") {
		t.Error("/logout matches /Login")
	}
	cs := Match{PathExact: "/login"}
	if cs.Applies("/LOGIN", "GET") || !cs.Applies("/login", "GET") {
		t.Error("case-sensitive exact match wrong")
	}
	r := Match{Routes: []string{"a", "b"}}
	if !r.AppliesTo(&Target{Route: "b"}) || r.AppliesTo(&Target{Route: "c"}) || r.AppliesTo(&Target{}) {
		t.Error("route match wrong")
	}
}

// refFold is a second, plainer reading of the folding rule: split the
// path into runs of escapes and of other bytes, decode each run of escapes
// to bytes, then walk both kinds as UTF-8, upper-casing every valid
// character and writing non-ASCII results as escapes; bytes that are not
// valid UTF-8 stay as they were written.
func refFold(s string) string {
	var out strings.Builder
	enc := func(r rune) {
		r = unicode.ToUpper(r)
		if r < 0x80 {
			out.WriteRune(r)
			return
		}
		for _, b := range []byte(string(r)) {
			out.WriteString("%" + strings.ToUpper(string("0123456789abcdef"[b>>4])+string("0123456789abcdef"[b&15])))
		}
	}
	for len(s) > 0 {
		if s[0] == '%' {
			var raw []byte
			var spell []string
			for len(s) >= 3 && s[0] == '%' && isHex(s[1]) && isHex(s[2]) {
				raw = append(raw, unhex(s[1])<<4|unhex(s[2]))
				spell = append(spell, strings.ToUpper(s[:3]))
				s = s[3:]
			}
			if len(raw) == 0 {
				out.WriteByte('%')
				s = s[1:]
				continue
			}
			for i := 0; i < len(raw); {
				r, n := utf8.DecodeRune(raw[i:])
				if raw[i] < 0x80 || r == utf8.RuneError && n <= 1 {
					out.WriteString(spell[i])
					i++
					continue
				}
				enc(r)
				i += n
			}
			continue
		}
		r, n := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && n <= 1 {
			out.WriteByte(s[0])
		} else {
			enc(r)
		}
		s = s[n:]
	}
	return out.String()
}

func FuzzFold(f *testing.F) {
	for _, s := range []string{"/login", "/log%C4%B1n", "/caf\u00e9/%C3%A9%", "/%C4%41", "/%F0%90%90%A8x", "/a%3f\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var buf []byte
		clean := CleanPath(&buf, in)
		got := FoldPath(clean)
		if again := FoldPath(got); again != got {
			t.Fatalf("not idempotent: %q -> %q -> %q", clean, got, again)
		}
		if want := refFold(clean); got != want {
			t.Fatalf("FoldPath(%q) = %q, the plain reading gives %q", clean, got, want)
		}
		for i := 0; i < len(got); i++ {
			if 'a' <= got[i] && got[i] <= 'z' {
				t.Fatalf("FoldPath(%q) = %q has a lower-case letter", clean, got)
			}
		}
		// Changing the case of ASCII letters outside escapes does not
		// change the folded form.
		var b strings.Builder
		for i := 0; i < len(clean); i++ {
			c := clean[i]
			if c == '%' && i+2 < len(clean) {
				b.WriteString(clean[i : i+3])
				i += 2
				continue
			}
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			} else if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			b.WriteByte(c)
		}
		if sw := FoldPath(b.String()); sw != got {
			t.Fatalf("%q folds to %q but %q to %q", clean, got, b.String(), sw)
		}
	})
}

// TestUpperStringIsToUpper compares upperString with strings.ToUpper,
// invalid UTF-8 and the runes whose upper case is longer included.
func TestUpperStringIsToUpper(t *testing.T) {
	cases := []string{"", "get", "Post", "pURGE", "méthode", "poſt", "ǆ", "ﬀ", "ß", "ı", "\xff\xfeget", "a\xc3", "ⓐⓑ", "ꞔ", "\U0001e922"}
	for r := rune(0); r < 0x20000; r += 7 {
		cases = append(cases, "x"+string(r)+"y")
	}
	for _, s := range cases {
		if got, want := upperString(s), strings.ToUpper(s); got != want {
			t.Errorf("upperString(%q) = %q, strings.ToUpper %q", s, got, want)
		}
	}
	for _, s := range []string{"X-Cost", "x-cost", "Content-TYPE", "a1~!#$%&'*+-.^_`|"} {
		if got, want := lowerASCII(s), strings.ToLower(s); got != want {
			t.Errorf("lowerASCII(%q) = %q, strings.ToLower %q", s, got, want)
		}
	}
}
