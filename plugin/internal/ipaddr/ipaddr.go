// Package ipaddr is the part of net/netip the plugin uses: IPv4 and IPv6
// addresses and prefixes, parsed and compared exactly as net/netip does.
//
// Why not net/netip: it keeps IPv6 zones as unique.Handle values, which
// links the unique and weak packages and a concurrent hash-trie map into
// the module; with netip's own code that is about 190 KB of module, some
// 3.5 MiB of Envoy's resident memory. The plugin needs addresses as keys
// (As16), one mask, prefix membership and strings for its logs. A
// differential fuzz test (FuzzAgainstNetip) holds every function here to
// net/netip on arbitrary input: X-Forwarded-For is client-controlled.
package ipaddr

import "strconv"

// Addr is an IPv4 or IPv6 address, or the zero (invalid) Addr. Addrs are
// comparable with ==, like netip.Addr.
type Addr struct {
	_    [0]func() // not comparable: no equality function in the module
	ip   [16]byte  // IPv4 a.b.c.d is held as ::ffff:a.b.c.d (As16)
	kind uint8     // 0: invalid, 4 or 6
	zone string    // IPv6 scope zone ("eth0" of fe80::1%eth0), or ""
}

// Prefix is an address and a number of leading bits, or the zero
// (invalid) Prefix.
type Prefix struct {
	_    [0]func() // not comparable: no equality function in the module
	addr Addr
	bits int16 // -1 when invalid
}

// AddrFrom4 is the IPv4 address of b.
func AddrFrom4(b [4]byte) Addr {
	a := Addr{kind: 4}
	a.ip[10], a.ip[11] = 0xff, 0xff
	copy(a.ip[12:], b[:])
	return a
}

// AddrFrom16 is the IPv6 address of b (an IPv4-mapped one stays IPv6).
func AddrFrom16(b [16]byte) Addr { return Addr{ip: b, kind: 6} }

// IsValid reports whether a is not the zero Addr.
func (a Addr) IsValid() bool { return a.kind != 0 }

// Is4 reports whether a is an IPv4 address (not IPv4-mapped IPv6).
func (a Addr) Is4() bool { return a.kind == 4 }

// Is6 reports whether a is an IPv6 address, IPv4-mapped ones included.
func (a Addr) Is6() bool { return a.kind == 6 }

// Zone is a's IPv6 zone, or "".
func (a Addr) Zone() string { return a.zone }

// BitLen is 32 for IPv4, 128 for IPv6 and 0 for the zero Addr.
//
// Not inlined: its callers (prefixes, an IPv6 client's group) are off an
// IPv4 client's request path, and each inlined copy is module size.
//
//go:noinline
func (a Addr) BitLen() int {
	switch a.kind {
	case 4:
		return 32
	case 6:
		return 128
	}
	return 0
}

// As16 is a in its 16-byte form (IPv4 as ::ffff:a.b.c.d; zero for the
// zero Addr). The zone is not part of it.
func (a Addr) As16() [16]byte { return a.ip }

// is4In6 reports whether a is an IPv6 address of the form ::ffff:a.b.c.d.
func (a Addr) is4In6() bool {
	if a.kind != 6 {
		return false
	}
	for _, c := range a.ip[:10] {
		if c != 0 {
			return false
		}
	}
	return a.ip[10] == 0xff && a.ip[11] == 0xff
}

// Unmap turns an IPv4-mapped IPv6 address into its IPv4 address (its zone
// dropped); any other address is returned as it is.
//
// Not inlined: its callers (configurations, an IPv6 client address) are
// off an IPv4 client's request path, and each inlined copy is module size.
//
//go:noinline
func (a Addr) Unmap() Addr {
	if !a.is4In6() {
		return a
	}
	return Addr{ip: a.ip, kind: 4}
}

// WithZone returns a with zone z; IPv4 and zero Addrs have no zone.
func (a Addr) WithZone(z string) Addr {
	if a.kind == 6 {
		a.zone = z
	}
	return a
}

// Prefix is the prefix of a's first bits leading bits, the other bits
// cleared (the zone dropped); false if bits is out of range. The zero Addr
// gives the zero Prefix.
func (a Addr) Prefix(bits int) (Prefix, bool) {
	if bits < 0 || bits > a.BitLen() && a.kind != 0 {
		return Prefix{bits: -1}, false
	}
	if a.kind == 0 {
		return Prefix{bits: -1}, true
	}
	start := 0
	if a.kind == 4 {
		start = 12
	}
	masked := a.ip
	for i := start; i < 16; i++ {
		keep := bits - 8*(i-start) // bits of this byte kept
		switch {
		case keep <= 0:
			masked[i] = 0
		case keep < 8:
			masked[i] &= ^byte(0xff >> keep)
		}
	}
	return Prefix{addr: Addr{ip: masked, kind: a.kind}, bits: int16(bits)}, true
}

// PrefixFrom is the prefix of a and bits, not masked; invalid if bits is
// out of range for a. The zone is dropped.
//
// Not inlined: its callers parse configurations and prefixes, off the
// request path, and each inlined copy is module size.
//
//go:noinline
func PrefixFrom(a Addr, bits int) Prefix {
	a.zone = ""
	if a.kind == 0 || bits < 0 || bits > a.BitLen() {
		return Prefix{addr: a, bits: -1}
	}
	return Prefix{addr: a, bits: int16(bits)}
}

// IsValid reports whether p has an address and a number of bits in range.
func (p Prefix) IsValid() bool { return p.addr.kind != 0 && p.bits >= 0 }

// Addr is p's address.
func (p Prefix) Addr() Addr { return p.addr }

// Bits is p's number of bits, -1 if p is invalid.
func (p Prefix) Bits() int {
	if !p.IsValid() {
		return -1
	}
	return int(p.bits)
}

// Masked is p with the bits after its prefix cleared; the zero Prefix if p
// is invalid.
func (p Prefix) Masked() Prefix {
	if !p.IsValid() {
		return Prefix{bits: -1}
	}
	m, _ := p.addr.Prefix(int(p.bits))
	return m
}

// Contains reports whether a is in p: same family (an IPv4 address is not
// in an IPv6 prefix, IPv4-mapped or not), no zone, same leading bits.
func (p Prefix) Contains(a Addr) bool {
	if !p.IsValid() || a.zone != "" || a.kind != p.addr.kind {
		return false
	}
	m, _ := a.Prefix(int(p.bits))
	pm, _ := p.addr.Prefix(int(p.bits))
	return m.addr.ip == pm.addr.ip
}

// ParseAddr parses an IPv4 address in dotted decimal (four fields of 0-255,
// no leading zeros) or an IPv6 address (RFC 4291 text form, with an
// optional embedded IPv4 address and an optional non-empty %zone).
func ParseAddr(s string) (Addr, bool) {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '.':
			var b [4]byte
			if !parse4(s, b[:]) {
				return Addr{}, false
			}
			return AddrFrom4(b), true
		case ':':
			return parse6(s)
		case '%':
			return Addr{}, false
		}
	}
	return Addr{}, false
}

// ParseAddr4Prefix parses the dotted-decimal IPv4 address that starts s
// and ends at its first byte that is neither a digit nor a dot (n, len(s)
// if none): ok when s[:n] is one, and then a is ParseAddr(s[:n]) (n is
// meaningless when not ok). It reads s once, for callers that find where
// an address ends (the port after it) by its end.
func ParseAddr4Prefix(s string) (a Addr, n int, ok bool) {
	// A turn per field, its one to three digits read without a loop: on
	// wasm a loop's every turn costs a pass through the function's
	// dispatch.
	var ip uint32 // the fields so far, a byte each
	for f := 0; f < 4; f++ {
		if f > 0 {
			if n >= len(s) || s[n] != '.' {
				return Addr{}, n, false
			}
			n++
		}
		if n >= len(s) || s[n]-'0' > 9 {
			return Addr{}, n, false // an empty field
		}
		v := uint32(s[n] - '0')
		n++
		if n < len(s) && s[n]-'0' <= 9 {
			if v == 0 {
				return Addr{}, n, false // a leading zero
			}
			v = v*10 + uint32(s[n]-'0')
			n++
			if n < len(s) && s[n]-'0' <= 9 {
				v = v*10 + uint32(s[n]-'0')
				n++
				if v > 255 {
					return Addr{}, n, false
				}
			}
		}
		ip = ip<<8 | v
	}
	if n < len(s) && (s[n]-'0' <= 9 || s[n] == '.') {
		return Addr{}, n, false // a fourth digit, or a fifth field
	}
	a = Addr{kind: 4}
	a.ip[10], a.ip[11] = 0xff, 0xff
	a.ip[12], a.ip[13], a.ip[14], a.ip[15] = byte(ip>>24), byte(ip>>16), byte(ip>>8), byte(ip)
	return a, n, true
}

// parse4 parses all of s as a dotted-decimal IPv4 address into out.
func parse4(s string, out []byte) bool {
	field, val, digits := 0, 0, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			if digits == 1 && val == 0 {
				return false // leading zero
			}
			val = val*10 + int(c-'0')
			digits++
			if val > 255 {
				return false
			}
		case c == '.':
			if digits == 0 || field == 3 {
				return false
			}
			out[field] = byte(val)
			field, val, digits = field+1, 0, 0
		default:
			return false
		}
	}
	if field != 3 || digits == 0 {
		return false
	}
	out[3] = byte(val)
	return true
}

func hexDigit(c byte) (int, bool) {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0'), true
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10, true
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10, true
	}
	return 0, false
}

// parse6 parses an IPv6 address: groups of one to four hex digits separated
// by colons, at most one "::" standing for one or more zero groups, the
// last 32 bits optionally in dotted decimal, then an optional %zone.
func parse6(s string) (Addr, bool) {
	s, zone, ok := splitZone(s)
	if !ok {
		return Addr{}, false
	}
	var ip [16]byte
	ellipsis := -1 // where "::" stands in ip
	if len(s) >= 2 && s[0] == ':' && s[1] == ':' {
		ellipsis = 0
		s = s[2:]
		if s == "" {
			return Addr{ip: ip, kind: 6, zone: zone}, true
		}
	}
	n, ellipsis, ok := parseGroups(s, &ip, ellipsis)
	if !ok || !expandEllipsis(&ip, n, ellipsis) {
		return Addr{}, false
	}
	return Addr{ip: ip, kind: 6, zone: zone}, true
}

// splitZone splits s at its first '%' into the address and the zone (""
// when s has no '%'); false if the '%' is not followed by a zone.
func splitZone(s string) (addr, zone string, ok bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == '%' {
			zone = s[i+1:]
			return s[:i], zone, zone != ""
		}
	}
	return s, "", true
}

// parseGroups parses all of s, what follows any leading "::", as groups
// separated by colons into ip, the last 32 bits possibly in dotted decimal.
// It returns how many bytes the groups filled and where "::" stands in ip:
// ellipsis as passed (0 after a leading "::", else -1), or where s has it.
// False if s is malformed, has a second "::", or holds more than 16 bytes.
func parseGroups(s string, ip *[16]byte, ellipsis int) (int, int, bool) {
	n := 0 // bytes filled
	for n < 16 {
		val, digits, ok := hexGroup(s)
		if !ok {
			return 0, 0, false
		}
		if digits < len(s) && s[digits] == '.' {
			// The group starts an embedded IPv4 address: the last 32
			// bits, right after "::" or after six groups.
			if ellipsis < 0 && n != 12 || n+4 > 16 {
				return 0, 0, false
			}
			if !parse4(s, ip[n:n+4]) {
				return 0, 0, false
			}
			return n + 4, ellipsis, true
		}
		ip[n], ip[n+1] = byte(val>>8), byte(val)
		n += 2
		s = s[digits:]
		if s == "" {
			break
		}
		if s[0] != ':' || len(s) == 1 {
			return 0, 0, false
		}
		s = s[1:]
		if s[0] == ':' {
			if ellipsis >= 0 {
				return 0, 0, false // a second "::"
			}
			ellipsis = n
			s = s[1:]
			if s == "" {
				break
			}
		}
	}
	return n, ellipsis, s == ""
}

// hexGroup parses the hex digits at the start of s as one IPv6 group and
// returns its value and how many digits it has; false for none or more
// than four.
func hexGroup(s string) (val, digits int, ok bool) {
	for digits < len(s) {
		d, ok := hexDigit(s[digits])
		if !ok {
			break
		}
		if digits == 4 {
			return 0, 0, false // more than 4 digits
		}
		val = val<<4 | d
		digits++
	}
	return val, digits, digits > 0
}

// expandEllipsis completes the n bytes that parseGroups filled into a full
// address: the bytes that followed "::" move to the end of ip, zeros in
// between. False if the groups do not make 16 bytes: fewer without "::",
// or all 16 with a "::", which must stand for at least one group.
func expandEllipsis(ip *[16]byte, n, ellipsis int) bool {
	if n >= 16 {
		return ellipsis < 0 // "::" must stand for at least one group
	}
	if ellipsis < 0 {
		return false
	}
	// Move what followed "::" to the end, zeros in between.
	tail := n - ellipsis
	copy(ip[16-tail:], ip[ellipsis:n])
	for i := ellipsis; i < 16-tail; i++ {
		ip[i] = 0
	}
	return true
}

// ParsePrefix parses "address/bits": an address as ParseAddr takes it but
// without a zone, and bits in decimal without sign or leading zero, at most
// 32 for IPv4 and 128 for IPv6. The address is not masked.
func ParsePrefix(s string) (Prefix, bool) {
	slash := -1
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			slash = i
			break
		}
	}
	if slash < 0 {
		return Prefix{bits: -1}, false
	}
	a, ok := ParseAddr(s[:slash])
	if !ok || a.zone != "" {
		return Prefix{bits: -1}, false
	}
	b := s[slash+1:]
	if b == "" || len(b) > 1 && (b[0] < '1' || b[0] > '9') || len(b) > 3 {
		return Prefix{bits: -1}, false
	}
	bits := 0
	for i := 0; i < len(b); i++ {
		if b[i] < '0' || b[i] > '9' {
			return Prefix{bits: -1}, false
		}
		bits = bits*10 + int(b[i]-'0')
	}
	if bits > a.BitLen() {
		return Prefix{bits: -1}, false
	}
	return PrefixFrom(a, bits), true
}

// String is a in its usual text form: dotted decimal for IPv4,
// "::ffff:a.b.c.d" for IPv4-mapped IPv6, RFC 5952 for other IPv6 (the
// longest run of two or more zero groups as "::", lower-case hex), then
// "%zone"; "invalid IP" for the zero Addr (as net/netip).
func (a Addr) String() string {
	switch {
	case a.kind == 0:
		return "invalid IP"
	case a.kind == 4:
		return string(append4(nil, a.ip[12:]))
	case a.is4In6():
		b := append4([]byte("::ffff:"), a.ip[12:])
		if a.zone != "" {
			b = append(append(b, '%'), a.zone...)
		}
		return string(b)
	}
	// The longest run of zero groups (the first of equal ones), if >= 2.
	best, bestLen := -1, 1
	for i := 0; i < 8; {
		j := i
		for j < 8 && a.ip[2*j] == 0 && a.ip[2*j+1] == 0 {
			j++
		}
		if j-i > bestLen {
			best, bestLen = i, j-i
		}
		if j == i {
			j++
		}
		i = j
	}
	var b []byte
	for i := 0; i < 8; i++ {
		if i == best {
			b = append(b, ':', ':')
			i += bestLen - 1
			continue
		}
		if i > 0 && i != best+bestLen {
			b = append(b, ':')
		}
		b = strconv.AppendUint(b, uint64(a.ip[2*i])<<8|uint64(a.ip[2*i+1]), 16)
	}
	if a.zone != "" {
		b = append(append(b, '%'), a.zone...)
	}
	return string(b)
}

func append4(b []byte, ip []byte) []byte {
	for i, c := range ip[:4] {
		if i > 0 {
			b = append(b, '.')
		}
		b = strconv.AppendUint(b, uint64(c), 10)
	}
	return b
}

// String is "address/bits", or "invalid Prefix".
func (p Prefix) String() string {
	if !p.IsValid() {
		return "invalid Prefix"
	}
	return p.addr.String() + "/" + strconv.Itoa(int(p.bits))
}
