package config

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// wantFraction is what the parser did with strconv.ParseFloat: the float64
// when the literal's value is in [0, 1).
func wantFraction(n string) (float64, bool) {
	r, err := strconv.ParseFloat(n, 64)
	if err != nil || math.IsNaN(r) || r < 0 || r >= 1 {
		return 0, false
	}
	return r, true
}

func checkFraction(t *testing.T, n string) {
	t.Helper()
	got, ok := fraction(n)
	want, wok := wantFraction(n)
	if ok != wok || ok && math.Float64bits(got) != math.Float64bits(want) {
		t.Fatalf("fraction(%q) = %v (%#x), %v; ParseFloat: %v (%#x), %v", n, got, math.Float64bits(got), ok, want, math.Float64bits(want), wok)
	}
}

// TestFractionIsParseFloat holds the reserve's parser to strconv.ParseFloat
// bit for bit: chosen literals (halfway cases, subnormals, underflow, 1 and
// just below it, many digits), the shortest and the 17-, 20- and 25-digit
// forms of random float64s in [0, 1), and the literals halfway between two
// neighbouring float64s and just off it.
func TestFractionIsParseFloat(t *testing.T) {
	for _, n := range []string{
		"0", "-0", "0.0", "-0.0", "0e5", "0.25", "0.1", "0.2", "0.3", "0.5", "0.999999999999999999999", "1", "1.0",
		"0.99999999999999994448884876874217297882", "0.99999999999999997", "0.9999999999999999444888487687421729788184",
		"1e-1", "10e-2", "100E-3", "25e-2", "0.25e0", "0.025e+1", "-0.1", "-1e-400", "1e-400", "2.5e-324",
		"2.4703282292062327e-324", "2.4703282292062328e-324", "4.9406564584124654e-324", "2.2250738585072011e-308",
		"2.2250738585072014e-308", "2.225073858507201136057409796709131975934819546351645648e-308", "1e-323",
		"0.30000000000000004", "0.1000000000000000055511151231257827021181583404541015625", "0.100000000000000005551115123125782702118158340454101562",
		"0.100000000000000005551115123125782702118158340454101563", "1e1", "0.5e1", "12", "00.5", "0." + strings.Repeat("3", 800),
		"0." + strings.Repeat("0", 300) + "1", "0." + strings.Repeat("9", 500), "1e-1048576", "1e1048576", "0.1e-2000000",
	} {
		checkFraction(t, n)
	}
	rng := rand.New(rand.NewPCG(40, 1))
	for i := 0; i < 20000; i++ {
		f := rng.Float64()
		if i%4 == 1 {
			f = math.Ldexp(f, -rng.IntN(1074)) // down to the subnormals
		}
		for _, prec := range []int{-1, 17, 20, 25} {
			checkFraction(t, strconv.FormatFloat(f, 'g', prec, 64))
			checkFraction(t, strconv.FormatFloat(f, 'f', -1, 64))
		}
		// Halfway to the next float64 up, exactly and 1e-40 either side.
		next := math.Nextafter(f, 2)
		if next >= 1 {
			continue
		}
		half := halfway(f, next)
		checkFraction(t, half)
		checkFraction(t, half+"1")
		if i%10 == 0 {
			checkFraction(t, half+strings.Repeat("0", 40)+"1")
		}
	}
}

// halfway is the exact decimal literal of (a+b)/2 for float64s a < b in
// [0, 1): their exact binary fractions need at most 1075 decimal digits.
func halfway(a, b float64) string {
	x := strconv.FormatFloat(a, 'f', 1080, 64)
	y := strconv.FormatFloat(b, 'f', 1080, 64)
	// Sum the two exact expansions digit by digit, then halve.
	sum := make([]byte, len(x))
	carry := byte(0)
	for i := len(x) - 1; i >= 0; i-- {
		if x[i] == '.' {
			sum[i] = '.'
			continue
		}
		d := x[i] - '0' + y[i] - '0' + carry
		sum[i], carry = d%10+'0', d/10
	}
	// sum < 2 has the form d.ddd; halve it digit by digit.
	out := []byte("0.")
	rem := sum[0] - '0'
	for _, c := range sum[2:] {
		v := rem*10 + c - '0'
		out = append(out, v/2+'0')
		rem = v % 2
	}
	if rem != 0 {
		out = append(out, '5')
	}
	return strings.TrimRight(string(out), "0")
}
