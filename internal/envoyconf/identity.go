package envoyconf

// Who a rule keyed by client IP keys on, given the HTTP connection manager
// that hosts Sluice and Sluice's client_ip.xff_trusted_hops.
//
// Envoy 1.40 (verified end to end by e2e.TestClientIdentityMatrix): call the
// X-Forwarded-For header as it reaches Envoy XFF, and the peer the TCP
// connection comes from PEER.
//
//   - use_remote_address: true, xff_num_trusted_hops 0: source.address is
//     PEER. Envoy appends PEER to the header (its own local address when PEER
//     is a loopback address) unless skip_xff_append.
//   - use_remote_address: true, xff_num_trusted_hops h > 0: source.address
//     is the h-th entry from the right of XFF (PEER if there are fewer). Envoy
//     appends as above.
//   - use_remote_address: false (Envoy's default): source.address is the
//     (h+1)-th entry from the right of XFF (PEER if there are fewer); Envoy
//     appends nothing.
//
// Sluice's xff_trusted_hops N > 0 keys on the N-th entry from the right of
// the header as it reaches the filter, every entry counted, Envoy's own
// included; N = 0 keys on source.address.
//
// A proxy in front that appends to X-Forwarded-For (a load balancer, a CDN)
// writes one trustworthy entry: the address it was connected from. Behind p
// such proxies, the p rightmost entries of XFF are trustworthy and the p-th
// is the client; everything to their left is what the client wrote.

// Setting is what decides the client address of a request.
type Setting struct {
	UseRemoteAddress  bool   // the connection manager's use_remote_address
	SkipXFFAppend     bool   // the connection manager's skip_xff_append
	XFFNumTrustedHops uint32 // the connection manager's xff_num_trusted_hops
	SluiceHops        int    // Sluice's client_ip.xff_trusted_hops
}

// Appends reports whether Envoy appends an entry to X-Forwarded-For before
// the filter sees it.
func (s Setting) Appends() bool { return s.UseRemoteAddress && !s.SkipXFFAppend }

// ProxiesTrusted is the number of appending proxies in front of Envoy that
// the setting relies on: behind exactly that many, the key is the client's
// address; behind more, it is the address of a proxy (all clients behind it
// share one budget: held, but coarse); behind fewer, it is an address the
// client wrote, so a client that rotates X-Forwarded-For gets a new budget
// per request. 0 means no header is trusted: nothing a client sends changes
// its key.
func (s Setting) ProxiesTrusted() int {
	if s.SluiceHops > 0 {
		n := s.SluiceHops
		if s.Appends() {
			n-- // Envoy's own entry is the rightmost
		}
		return n
	}
	if s.UseRemoteAddress {
		return int(s.XFFNumTrustedHops)
	}
	return int(s.XFFNumTrustedHops) + 1
}
