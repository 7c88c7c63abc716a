package envoyconf

import (
	"fmt"
	"strconv"
)

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

// SettingOf returns the setting of the connection manager hosting f with
// Sluice's xff_trusted_hops; false if f is not in a connection manager.
func (f Filter) SettingOf(sluiceHops int) (Setting, bool) {
	if f.HCM == nil {
		return Setting{}, false
	}
	return Setting{
		UseRemoteAddress:  f.HCM.GetUseRemoteAddress().GetValue(),
		SkipXFFAppend:     f.HCM.GetSkipXffAppend(),
		XFFNumTrustedHops: f.HCM.GetXffNumTrustedHops(),
		SluiceHops:        sluiceHops,
	}, true
}

// Finding is what Judge says about a filter's client addresses.
type Finding struct {
	Warning bool   // clients can (or, with unknown proxies, may) choose their address
	Text    string // names the listener, the setting and the fix
}

// Judge says whether clients can choose the address that keys a Sluice
// filter's rules (keyed: some rule is keyed by client address, or falls
// back to it, or exempt ranges are set). proxies is the number of proxies in
// front of Envoy that append to X-Forwarded-For, or -1 if unknown.
func Judge(f Filter, sluiceHops int, keyed bool, proxies int) []Finding {
	if !keyed {
		return nil
	}
	where := "listener " + quote(f.Listener)
	if f.Listener == "" {
		where = "the wasm filter at " + f.Path
	}
	s, ok := f.SettingOf(sluiceHops)
	if !ok {
		return []Finding{{Warning: true, Text: where + ": not inside an HTTP connection manager, so sluice validate cannot tell where client addresses come from"}}
	}
	if n := len(f.HCM.GetOriginalIpDetectionExtensions()); n > 0 {
		return []Finding{{Warning: true, Text: fmt.Sprintf("%s: the connection manager sets source.address with %d original_ip_detection_extensions, which sluice validate does not model: make sure clients cannot choose that address", where, n)}}
	}
	k := s.ProxiesTrusted()
	set := fmt.Sprintf("use_remote_address %v, xff_num_trusted_hops %d", s.UseRemoteAddress, s.XFFNumTrustedHops)
	if s.SkipXFFAppend {
		set += ", skip_xff_append"
	}
	set += fmt.Sprintf(", Sluice client_ip.xff_trusted_hops %d", s.SluiceHops)
	fix := func(p int) string {
		if p < 0 {
			return "set the connection manager's use_remote_address: true and xff_num_trusted_hops to the number of proxies in front of Envoy that append to X-Forwarded-For (0 if clients connect directly), and Sluice's client_ip.xff_trusted_hops to 0"
		}
		return fmt.Sprintf("set the connection manager's use_remote_address: true and xff_num_trusted_hops: %d, and Sluice's client_ip.xff_trusted_hops to 0", p)
	}
	switch {
	case k == 0:
		return nil
	case proxies < 0:
		return []Finding{{Warning: true, Text: fmt.Sprintf(
			"%s (%s): rules keyed by client IP key on %s, the client's own address only behind exactly %s (that append to X-Forwarded-For); behind fewer, a client chooses its address, and a new budget per request, by writing X-Forwarded-For. Fix: %s; or, if exactly that many always stand in front, say so with -proxies %d",
			where, set, s.keyText(), plural(k, "proxy", "proxies"), fix(-1), k)}}
	case proxies < k:
		return []Finding{{Warning: true, Text: fmt.Sprintf(
			"%s (%s): rules keyed by client IP key on %s, which behind %s (that append to X-Forwarded-For) is written by the client: a client chooses its address, and a new budget per request. Fix: %s",
			where, set, s.keyText(), plural(proxies, "proxy", "proxies"), fix(proxies))}}
	case proxies > k:
		return []Finding{{Text: fmt.Sprintf(
			"%s (%s): behind %s, rules keyed by client IP key on %s, a proxy's address: every client behind it shares one budget. Fix: %s",
			where, set, plural(proxies, "proxy", "proxies"), s.keyText(), fix(proxies))}}
	}
	return nil
}

// keyText says which address the key is.
func (s Setting) keyText() string {
	if s.SluiceHops > 0 {
		own := ""
		if s.Appends() {
			own = ", Envoy's own entry counted"
		}
		return fmt.Sprintf("X-Forwarded-For entry %d from the right as the filter sees it%s", s.SluiceHops, own)
	}
	if s.UseRemoteAddress && s.XFFNumTrustedHops == 0 {
		return "the peer"
	}
	n := s.XFFNumTrustedHops
	if !s.UseRemoteAddress {
		n++
	}
	return fmt.Sprintf("source.address, which Envoy takes from X-Forwarded-For entry %d from the right", n)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func quote(s string) string { return strconv.Quote(s) }
