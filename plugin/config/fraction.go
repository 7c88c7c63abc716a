package config

import (
	"math"
	"math/bits"
	"strings"

	"github.com/sluicehq/sluice/plugin/internal/textnum"
)

// fraction is the float64 nearest the JSON number literal n (rounded half
// to even, as strconv.ParseFloat rounds) when its value is in [0, 1); ok
// is false for a value of 1 or more, a negative one or a malformed
// literal. Class reserves are the configuration's only non-integer
// numbers, and strconv.ParseFloat's code and tables weigh about 25 KB of
// module, which every Envoy compiles and every VM's static data carries;
// this computes the same float64 on the literal's digits with a few words
// of integer arithmetic (TestFractionIsParseFloat compares the two).
func fraction(n string) (v float64, ok bool) {
	neg := strings.HasPrefix(n, "-")
	digits, exp, ok := decimalParts(strings.TrimPrefix(n, "-"))
	if !ok {
		return 0, false
	}
	switch {
	case digits == "": // zero
	case len(digits)+exp > 0: // at least 1 in magnitude
		return 0, false
	case len(digits)+exp >= -400: // else below half the smallest float64 (4.9e-324)
		v = nearest(digits, -exp)
	}
	if neg { // only a zero, -0 as ParseFloat gives it, is not negative
		return -v, v == 0
	}
	return v, v < 1 // 0.99999999999999999 rounds to 1
}

// decimalParts splits the literal n (no sign) into its significant digits,
// without leading or trailing zeros ("" for zero), and the power of ten
// they are multiplied by.
//
// Byte loops rather than strings.IndexAny, Cut, TrimLeft and TrimRight, and
// textnum.Atoi rather than strconv.Atoi: those reach the standard
// library's general code (Unicode cut sets, error values), kilobytes of
// module for this one use.
func decimalParts(n string) (digits string, exp int, ok bool) {
	for i := 0; i < len(n); i++ {
		if n[i] == 'e' || n[i] == 'E' {
			e, ok := textnum.Atoi(n[i+1:])
			if !ok {
				return "", 0, false
			}
			n, exp = n[:i], max(-1<<20, min(e, 1<<20)) // past these, the result is fixed
			break
		}
	}
	whole, frac := n, ""
	if i := strings.IndexByte(n, '.'); i >= 0 {
		whole, frac = n[:i], n[i+1:]
	}
	if whole == "" || !allDigits(whole) || !allDigits(frac) {
		return "", 0, false
	}
	digits = trimZeros(whole+frac, true)
	exp -= len(frac)
	trimmed := trimZeros(digits, false)
	return trimmed, exp + len(digits) - len(trimmed), true
}

// trimZeros is s without its leading zeros (lead) or its trailing ones.
func trimZeros(s string, lead bool) string {
	for lead && len(s) > 0 && s[0] == '0' {
		s = s[1:]
	}
	for !lead && len(s) > 0 && s[len(s)-1] == '0' {
		s = s[:len(s)-1]
	}
	return s
}

// nearest is the float64 nearest digits x 10^-k, a value below 1 (digits
// without leading zeros). It computes q = floor(digits x 2^s / 5^k), which
// has at least 66 bits, and rounds it: digits x 10^-k = q x 2^-(k+s), plus
// what the remainder adds below q's last bit.
func nearest(digits string, k int) float64 {
	var num nat
	for len(digits) > 0 {
		c := min(len(digits), 19)
		var chunk uint64
		for _, d := range []byte(digits[:c]) {
			chunk = chunk*10 + uint64(d-'0')
		}
		num = num.mulAdd(pow10u64(c), chunk)
		digits = digits[c:]
	}
	s := max(0, 66+3*k-num.bitLen()) // 3 > log2(5)
	num = num.shl(s)
	sticky := false
	for rest := k; rest > 0; rest -= 27 { // 5^27 < 2^64
		var r uint64
		num, r = num.div(pow5u64(min(rest, 27)))
		sticky = sticky || r != 0
	}
	l := num.bitLen()
	e2 := l - 1 - k - s // the value is in [2^e2, 2^(e2+1))
	p := 53             // bits kept: fewer for a subnormal result
	if e2 < -1022 {
		p = e2 + 1075
	}
	var m uint64
	for i := l - 1; i >= l-p && i >= 0; i-- {
		m = m<<1 | num.bit(i)
	}
	half := num.bit(l - p - 1)
	for i := l - p - 2; i >= 0 && !sticky; i-- {
		sticky = num.bit(i) != 0
	}
	if half == 1 && (sticky || m&1 == 1) {
		m++ // a carry into 2^p is a normal exponent's step, as below
	}
	if e2 < -1022 {
		return math.Float64frombits(m) // m x 2^-1074
	}
	// m holds the implicit bit (2^52): adding it steps the exponent field
	// to e2 + 1023, or one more when the rounding carried to 2^53.
	return math.Float64frombits(uint64(e2+1022)<<52 + m)
}

func allDigits(s string) bool {
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// nat is a natural number in 64-bit words, least significant first.
type nat []uint64

func (x nat) mulAdd(y, c uint64) nat {
	for i := range x {
		hi, lo := bits.Mul64(x[i], y)
		var carry uint64
		x[i], carry = bits.Add64(lo, c, 0)
		c = hi + carry
	}
	if c != 0 {
		x = append(x, c)
	}
	return x
}

func (x nat) shl(s int) nat {
	words, sh := s/64, uint(s%64)
	z := make(nat, len(x)+words+1)
	for i, w := range x {
		z[i+words] |= w << sh
		if sh != 0 {
			z[i+words+1] = w >> (64 - sh)
		}
	}
	return z.norm()
}

// div is x / d and its remainder (d > 0).
func (x nat) div(d uint64) (nat, uint64) {
	var r uint64
	for i := len(x) - 1; i >= 0; i-- {
		x[i], r = bits.Div64(r, x[i], d)
	}
	return x.norm(), r
}

func (x nat) norm() nat {
	for len(x) > 0 && x[len(x)-1] == 0 {
		x = x[:len(x)-1]
	}
	return x
}

func (x nat) bitLen() int {
	if len(x) == 0 {
		return 0
	}
	return (len(x)-1)*64 + bits.Len64(x[len(x)-1])
}

// bit is bit i of x (0 for i < 0).
func (x nat) bit(i int) uint64 {
	if i < 0 || i/64 >= len(x) {
		return 0
	}
	return x[i/64] >> uint(i%64) & 1
}

func pow10u64(n int) uint64 {
	p := uint64(1)
	for range n {
		p *= 10
	}
	return p
}

func pow5u64(n int) uint64 {
	p := uint64(1)
	for range n {
		p *= 5
	}
	return p
}
