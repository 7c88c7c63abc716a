package config

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestParseDurationIsTime holds parseDuration to time.ParseDuration: chosen
// strings (every unit, fractions, signs, overflow at the edges, malformed
// ones) and 200,000 random strings over their alphabet.
func TestParseDurationIsTime(t *testing.T) {
	check := func(s string) {
		t.Helper()
		got, ok := parseDuration(s)
		want, err := time.ParseDuration(s)
		if ok != (err == nil) || ok && got != want {
			t.Fatalf("parseDuration(%q) = %v, %v; time.ParseDuration: %v, %v", s, got, ok, want, err)
		}
	}
	for _, s := range []string{
		"", "0", "-0", "+0", "00", "1", "1s", "-1s", "+1s", "1.5s", ".5s", "5.s", ".s", "-.s", "1ns", "1us", "1µs", "1μs",
		"1ms", "1m", "1h", "1h30m", "1h30m10.5s", "1.0000000000000000000001h", "0.000000001s", "1.00000000000000000001ns",
		"9223372036854775807ns", "9223372036854775808ns", "-9223372036854775808ns", "-9223372036854775809ns",
		"2562047h47m16.854775807s", "2562047h47m16.854775808s", "-2562047h47m16.854775808s", "2562048h",
		"9223372036854775808ns1ns", "18446744073709551616ns", "1x", "1", "s", "1s2", "1.2.3s", "1e3s", "1 s", " 1s",
		"3.333333333333333333333333h", "0.9999999999999999999999999999999999s", "1.99999999999999999999999999999999999h",
		"100000000000000000000000000000h", "0.0000000000000000000000000000001h" + strings.Repeat("9", 40),
	} {
		check(s)
	}
	rng := rand.New(rand.NewPCG(40, 2))
	const alphabet = "0123456789.-+hmsnuµμx"
	units := []string{"ns", "us", "µs", "μs", "ms", "s", "m", "h", "", "x"}
	for range 100000 {
		var b strings.Builder
		for range 1 + rng.IntN(6) { // a random mix of characters
			b.WriteString(string([]rune(alphabet)[rng.IntN(len([]rune(alphabet)))]))
		}
		check(b.String())
		b.Reset()
		if rng.IntN(4) == 0 {
			b.WriteString("-")
		}
		for range 1 + rng.IntN(3) { // well-formed terms, some long
			b.WriteString(digits(rng, rng.IntN(22)))
			if rng.IntN(2) == 0 {
				b.WriteString("." + digits(rng, rng.IntN(25)))
			}
			b.WriteString(units[rng.IntN(len(units))])
		}
		check(b.String())
	}
}

func digits(rng *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('0' + rng.IntN(10))
	}
	return string(b)
}
