package engine

import (
	"strings"

	"github.com/sluicehq/sluice/plugin/internal/ipaddr"
	"github.com/sluicehq/sluice/plugin/internal/textnum"
)

// ParseHostPort extracts the IP of an Envoy address property
// ("1.2.3.4:5678", "[2001:db8::1]:5678", or a bare IP). It reports false for
// anything else (a pipe address, garbage). The Addr shares no memory with s.
func ParseHostPort(s string) (ipaddr.Addr, bool) {
	if s == "" || len(s) > 64 {
		return ipaddr.Addr{}, false
	}
	// Most addresses are IPv4 with a port: read in one pass, with the
	// result of the general path below (the host before the one colon).
	if a, n, ok := ipaddr.ParseAddr4Prefix(s); ok && (n == len(s) || s[n] == ':' && noColon(s[n+1:])) {
		return a, true
	}
	return parseHostPort(s)
}

// noColon reports whether s has no colon. A port is a few bytes: a loop
// here costs less than strings.IndexByte's two calls on wasm.
func noColon(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == ':' {
			return false
		}
	}
	return true
}

// parseHostPort is ParseHostPort for any address (s not empty, at most 64
// bytes).
func parseHostPort(s string) (ipaddr.Addr, bool) {
	host := s
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return ipaddr.Addr{}, false
		}
		host = s[1:end]
	} else if i := strings.LastIndexByte(s, ':'); i >= 0 && strings.IndexByte(s, ':') == i {
		host = s[:i] // exactly one colon: IPv4 with port
	}
	a, ok := ipaddr.ParseAddr(host)
	if !ok {
		return ipaddr.Addr{}, false
	}
	if z := a.Zone(); z != "" {
		// The zone is a view of s, which in the plugin is a buffer reused
		// by the next request's address (SourceAddress): the client, kept
		// for log lines, gets its own copy.
		a = a.WithZone(strings.Clone(z))
	}
	return a.Unmap(), true
}

// XFFFromRight returns the n-th address (1-based) from the right of an
// X-Forwarded-For value, scanning at most the last n entries so that a
// header with thousands of entries costs no more than a short one. It
// reports false when the header has fewer than n entries or the entry is not
// an IP address: then the request did not come through the trusted proxies
// and the connection's address must be used instead.
func XFFFromRight(xff string, n int) (ipaddr.Addr, bool) {
	if n <= 0 {
		return ipaddr.Addr{}, false
	}
	end := len(xff)
	for i := 1; ; i++ {
		start := strings.LastIndexByte(xff[:end], ',') + 1
		if i == n {
			entry := textnum.TrimSpace(xff[start:end])
			if a, ok := ParseHostPort(entry); ok {
				return a, true
			}
			return ipaddr.Addr{}, false
		}
		if start == 0 {
			return ipaddr.Addr{}, false
		}
		end = start - 1
	}
}

// GroupAddr maps an address to the identity a client is limited under:
// IPv4 addresses as they are, IPv6 addresses by their first prefix bits (a
// single host usually owns a whole /64, so per-address limits would be
// trivially evaded).
func GroupAddr(a ipaddr.Addr, ipv6Prefix int) ipaddr.Addr {
	if a.Is4() || ipv6Prefix >= 128 {
		return a
	}
	p, ok := a.WithZone("").Prefix(ipv6Prefix)
	if !ok {
		return a
	}
	return p.Addr()
}
