package ipaddr

import (
	"net/netip"
	"testing"
)

// compare holds ParseAddr, ParsePrefix and every method to net/netip on s.
func compare(t *testing.T, s string) {
	t.Helper()
	a, ok := ParseAddr(s)
	na, err := netip.ParseAddr(s)
	if ok != (err == nil) {
		t.Fatalf("ParseAddr(%q) = %v, netip: %v", s, ok, err)
	}
	compareAddr(t, s, a, na)
	if ok {
		u, nu := a.Unmap(), na.Unmap()
		compareAddr(t, s+" unmapped", u, nu)
		z, nz := a.WithZone(""), na.WithZone("")
		compareAddr(t, s+" without zone", z, nz)
		for _, bits := range []int{-1, 0, 1, 7, 8, 9, 24, 31, 32, 33, 48, 63, 64, 65, 127, 128, 129} {
			p, pok := a.Prefix(bits)
			np, perr := na.Prefix(bits)
			if pok != (perr == nil) {
				t.Fatalf("%q.Prefix(%d) = %v, netip %v", s, bits, pok, perr)
			}
			comparePrefix(t, s, p, np)
			comparePrefix(t, s, PrefixFrom(a, bits), netip.PrefixFrom(na, bits))
			for _, other := range []string{"10.1.2.3", "::ffff:10.1.2.3", "2001:db8::1", "fe80::1%eth0", s} {
				oa, _ := ParseAddr(other)
				ona, _ := netip.ParseAddr(other)
				if got, want := p.Contains(oa), np.Contains(ona); got != want {
					t.Fatalf("%s contains %s: %v, netip %v", np, other, got, want)
				}
			}
		}
	}
	compare4Prefix(t, s)
	p, ok := ParsePrefix(s)
	np, err := netip.ParsePrefix(s)
	if ok != (err == nil) {
		t.Fatalf("ParsePrefix(%q) = %v, netip: %v", s, ok, err)
	}
	if ok {
		comparePrefix(t, s, p, np)
		comparePrefix(t, s+" masked", p.Masked(), np.Masked())
	}
}

// compare4Prefix holds ParseAddr4Prefix to netip.ParseAddr of the digits
// and dots that start s.
func compare4Prefix(t *testing.T, s string) {
	t.Helper()
	end := 0
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.') {
		end++
	}
	a, n, ok := ParseAddr4Prefix(s)
	na, err := netip.ParseAddr(s[:end])
	if ok != (err == nil) || ok && n != end {
		t.Fatalf("ParseAddr4Prefix(%q) = %v %d, netip of %q: %v", s, ok, n, s[:end], err)
	}
	if ok {
		compareAddr(t, s[:end], a, na)
	}
}

func compareAddr(t *testing.T, s string, a Addr, na netip.Addr) {
	t.Helper()
	if a.IsValid() != na.IsValid() || a.Is4() != na.Is4() || a.Is6() != na.Is6() || a.BitLen() != na.BitLen() ||
		a.As16() != na.As16() && na.IsValid() || a.Zone() != na.Zone() || a.String() != na.String() {
		t.Fatalf("%q: %v %v %v %x %q %q; netip %v %v %v %x %q %q", s, a.IsValid(), a.Is4(), a.BitLen(), a.As16(), a.Zone(), a.String(),
			na.IsValid(), na.Is4(), na.BitLen(), na.As16(), na.Zone(), na.String())
	}
}

func comparePrefix(t *testing.T, s string, p Prefix, np netip.Prefix) {
	t.Helper()
	if p.IsValid() != np.IsValid() || p.Bits() != np.Bits() || p.String() != np.String() {
		t.Fatalf("%q: prefix %v %d %q; netip %v %d %q", s, p.IsValid(), p.Bits(), p.String(), np.IsValid(), np.Bits(), np.String())
	}
	compareAddr(t, s+" prefix address", p.Addr(), np.Addr())
}

var cases = []string{
	"", "1.2.3.4", "0.0.0.0", "255.255.255.255", "256.1.1.1", "01.2.3.4", "1.2.3", "1.2.3.4.5", "1..2.3", "1.2.3.", ".1.2.3",
	"1.2.3.4%eth0", "1.2.3.4:80", "::", "::1", "1::", "2001:db8::1", "2001:DB8:0:0:1:0:0:1", "2001:db8:0:0:1::1", "1:2:3:4:5:6:7:8",
	"1:2:3:4:5:6:7:8:9", "1:2:3:4:5:6:7::", "::1:2:3:4:5:6:7", "1::2:3:4:5:6:7:8", "1:::2", "1::2::3", ":1::2", "1:2:", "12345::",
	"::ffff:1.2.3.4", "::ffff:01.2.3.4", "::1.2.3.4", "1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:1.2.3.4", "1:2:3:4:5:6:7:1.2.3.4",
	"::ffff:1.2.3.4%z", "fe80::1%eth0", "fe80::1%", "%eth0", "::%x", "0:0:0:0:0:0:0:0", "1:0:0:2:0:0:0:3", "1:0:0:0:2:0:0:3",
	"0:0:1:0:0:0:0:0", "::ffff:0:0", "::ffff:ffff:ffff", "::ffff:1.2.3.4/120", "::ffff:1.2.3.4/96", "1.2.3.4/32", "1.2.3.4/33",
	"1.2.3.4/0", "1.2.3.4/08", "1.2.3.4/+8", "1.2.3.4/", "1.2.3.4/-1", "10.0.0.0/8", "10.1.2.3/8", "2001:db8::/32", "2001:db8::/129",
	"fe80::1%eth0/64", "::/0", "/8", "1.2.3.4/8/8", "1.2.3.4/0008", "::1/128", "a.b.c.d", "::a.2.3.4", "g::1", "1:2:3:4:5:6:7:8%z",
	"10.0.1.23:0", "1.2.3.4:80:1", "1.2.3.4x", "1.2.3.04:1", "1.2.3.256:1", "1.2.3.4.:1", "9.9.9.9]",
}

func TestAgainstNetip(t *testing.T) {
	for _, s := range cases {
		compare(t, s)
	}
}

func FuzzAgainstNetip(f *testing.F) {
	for _, s := range cases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { compare(t, s) })
}
