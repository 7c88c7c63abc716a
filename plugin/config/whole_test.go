package config

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// wholeByFloat is how integer judged a literal with strconv.ParseFloat: the
// literal whole, the float64 whole and within 2^53.
func wholeByFloat(n string) (int64, bool) {
	f, err := strconv.ParseFloat(n, 64)
	mant, exp := n, 0
	if i := strings.IndexAny(n, "eE"); i >= 0 {
		e, aerr := strconv.Atoi(n[i+1:])
		if aerr != nil {
			return 0, false
		}
		mant, exp = n[:i], e
	}
	whole, frac, _ := strings.Cut(strings.TrimPrefix(mant, "-"), ".")
	digits := strings.TrimRight(whole+frac, "0")
	zeros := len(whole) + len(frac) - len(digits)
	literal := strings.Trim(digits, "0") == "" || exp-len(frac)+zeros >= 0
	if err != nil || !literal || f != float64(int64(f)) || f > 1<<53 || f < -(1<<53) {
		return 0, false
	}
	return int64(f), true
}

// wholeValue computes on the literal's digits what ParseFloat decided, for
// every literal a float64 holds exactly, and refuses extreme exponents
// rather than looping on them.
func TestWholeValue(t *testing.T) {
	lits := []string{"0", "-0", "0.0", "0e5", "0e-99999999999", "0.000e-9223372036854775808", "10.0", "4.29e2", "100e-2", "1.5E1",
		"1000e-4", "1.00000000000000001", "0.99999999999999999", "1e21", "1e-7", "0.1", "1.5", "9007199254740992.0",
		"-9007199254740992.0", "9007199254740994.0", "1e15", "9e15", "1e16", "1e400", "1e-400", "1.5e-9223372036854775808",
		"1e9223372036854775807", "123456789012345e1", "-12.50e1", "00012.000e2"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var b strings.Builder
		if r.IntN(3) == 0 {
			b.WriteByte('-')
		}
		b.WriteString(strconv.Itoa(r.IntN(100000)))
		if r.IntN(2) == 0 {
			b.WriteString("." + strings.Repeat("0", r.IntN(3)) + strconv.Itoa(r.IntN(1000)))
		}
		if r.IntN(2) == 0 {
			b.WriteString("e" + strconv.Itoa(r.IntN(30)-12))
		}
		lits = append(lits, b.String())
	}
	// The exponent's arithmetic wrapped around in the old judgment.
	if _, ok := wholeValue("1.5e-9223372036854775808"); ok {
		t.Error("1.5e-9223372036854775808 judged whole")
	}
	for _, n := range lits {
		if n == "1.5e-9223372036854775808" {
			continue
		}
		got, gok := wholeValue(n)
		want, wok := wholeByFloat(n)
		if got != want || gok != wok {
			t.Errorf("wholeValue(%s) = %d, %v; ParseFloat judged %d, %v", n, got, gok, want, wok)
		}
	}
}
