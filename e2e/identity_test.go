package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/e2e/envoytest"
	"github.com/sluicehq/sluice/internal/envoyconf"
)

// TestClientIdentityMatrix proves, against the real Envoy, who a rule keyed
// by client IP limits in every combination of the connection manager's
// use_remote_address (true/false) and xff_num_trusted_hops (0/1/2), Sluice's
// client_ip.xff_trusted_hops (0/1/2) and 0, 1 or 2 proxies in front that
// append to X-Forwarded-For. The test client plays both the proxies (it
// sends the entries they would have appended) and an attacker behind them
// who prepends, repeats, floods and garbles entries, a fresh forged address
// on every request.
//
// For each combination envoyconf.Setting.ProxiesTrusted (what `sluice
// validate -envoy` reports) predicts the outcome, and the test checks it:
//   - behind fewer proxies than the setting trusts, the attacker gets more
//     than one budget: sluice validate warns about that setting;
//   - behind exactly as many, the attacker gets one budget and another
//     client behind the same proxies gets its own;
//   - behind more, the attacker gets at most one budget (shared with every
//     client behind the extra proxy).
func TestClientIdentityMatrix(t *testing.T) {
	wasm := sluiceWasm(t)
	const burst = 2
	seq := 0
	addr := func() string { // a fresh address, never used before in the test
		seq++
		return fmt.Sprintf("198.18.%d.%d", seq/250, seq%250+1)
	}
	forged := func() string {
		seq++
		return fmt.Sprintf("203.0.%d.%d", seq/250, seq%250+1)
	}
	type row struct {
		setting  envoyconf.Setting
		proxies  int
		attacker int // requests of the attacker admitted
		client2  int // requests of a second client admitted (-1: not measured)
	}
	var rows []row
	start := time.Now()
	// One Envoy: the connection manager and the plugin are reconfigured
	// through LDS for each setting (a listener update, tens of
	// milliseconds, instead of a start that compiles the plugin).
	e := envoytest.StartT(t, envoytest.Options{
		Concurrency:      1,
		DynamicListeners: true,
		Wasm:             &envoytest.Wasm{File: wasm, Config: identityConfig(0, burst)},
	})
	for _, ura := range []bool{true, false} {
		for h := 0; h <= 2; h++ {
			for s := 0; s <= 2; s++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				err := e.Reconfigure(ctx, func(o *envoytest.Options) {
					o.UseRemoteAddress = &ura
					o.XFFNumTrustedHops = h
					o.Wasm.Config = identityConfig(s, burst)
				})
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				set := envoyconf.Setting{UseRemoteAddress: ura, XFFNumTrustedHops: uint32(h), SluiceHops: s}
				for p := 0; p <= 2; p++ {
					r := row{setting: set, proxies: p, client2: -1}
					// The proxies' entries: the first proxy appends the
					// client's address, each next one the previous proxy's.
					trusted := func(client string) []string {
						var out []string
						if p > 0 {
							out = append(out, client)
						}
						for i := 1; i < p; i++ {
							out = append(out, addr())
						}
						return out
					}
					c := addr()
					chain := trusted(c)
					r.attacker = attack(t, e, chain, forged)
					if set.ProxiesTrusted() == p && p > 0 {
						r.client2 = admitted(t, e, [][]string{trusted(addr())}, burst+1)
					}
					rows = append(rows, r)
				}
			}
		}
	}
	t.Logf("%d combinations in %v", len(rows), time.Since(start).Round(time.Millisecond))
	t.Logf("use_remote_address xff_num_trusted_hops xff_trusted_hops proxies | trusted attacker client2 outcome")
	for _, r := range rows {
		k := r.setting.ProxiesTrusted()
		outcome := "held"
		switch {
		case r.proxies < k:
			outcome = "warned"
			if r.attacker <= burst {
				t.Errorf("%+v behind %d proxies: the attacker got %d admitted; the setting trusts %d proxies, so a rotating X-Forwarded-For should buy budgets (the model sluice validate uses is wrong)", r.setting, r.proxies, r.attacker, k)
			}
		case r.attacker > burst:
			t.Errorf("%+v behind %d proxies: the attacker got %d admitted, more than one budget (%d)", r.setting, r.proxies, r.attacker, burst)
		case r.proxies == k && r.client2 >= 0 && r.client2 != burst:
			t.Errorf("%+v behind %d proxies: another client got %d admitted, want its own budget (%d)", r.setting, r.proxies, r.client2, burst)
		}
		t.Logf("%-5v %d %d %d | %d %3d %2d %s", r.setting.UseRemoteAddress, r.setting.XFFNumTrustedHops, r.setting.SluiceHops, r.proxies, k, r.attacker, r.client2, outcome)
	}
}

// identityConfig keys one rule of the given burst (per hour) by client IP.
func identityConfig(hops, burst int) string {
	return fmt.Sprintf(`{"rules": [{"name": "ident", "limit": %d, "window": "1h"}], "client_ip": {"xff_trusted_hops": %d}}`, burst, hops)
}

// attack sends requests from one client behind the proxies whose entries are
// chain, each with a fresh forged address written in another way, and
// returns how many were admitted.
func attack(t *testing.T, e *envoytest.Envoy, chain []string, forged func() string) int {
	t.Helper()
	var reqs [][]string // header lines per request
	join := func(parts ...[]string) string {
		var all []string
		for _, p := range parts {
			all = append(all, p...)
		}
		return strings.Join(all, ", ")
	}
	for i := 0; i < 3; i++ {
		// Prepended: the client sends one forged entry, the proxies append.
		reqs = append(reqs, []string{join([]string{forged()}, chain)})
		// A forged chain that imitates proxies.
		reqs = append(reqs, []string{join([]string{forged(), forged(), forged()}, chain)})
		// Repeated header lines.
		// (A proxy adds its entry after every line, so only a client that
		// connects directly controls the last line.)
		reqs = append(reqs, []string{forged(), join([]string{forged()}, chain)})
		// Flooded: hundreds of entries.
		flood := make([]string, 300)
		for j := range flood {
			flood[j] = forged()
		}
		reqs = append(reqs, []string{join(flood, chain)})
		// Garbage next to a forged entry, and a forged entry with a port.
		reqs = append(reqs, []string{join([]string{forged(), "not-an-ip"}, chain)})
		reqs = append(reqs, []string{join([]string{forged() + ":4711"}, chain)})
		// Replaced: a forged entry where the proxies' entries would be
		// (possible only for a client that connects directly: proxies
		// always append theirs).
		if len(chain) == 0 {
			reqs = append(reqs, []string{forged() + ", " + forged()})
		}
	}
	return admitted(t, e, reqs, 0)
}

// admitted sends one request per element of reqs (its X-Forwarded-For
// header lines; an empty list sends none), or n copies of reqs[0] when n > 0,
// and counts the 200s.
func admitted(t *testing.T, e *envoytest.Envoy, reqs [][]string, n int) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if n > 0 {
		one := reqs[0]
		reqs = nil
		for i := 0; i < n; i++ {
			reqs = append(reqs, one)
		}
	}
	ok := 0
	for _, lines := range reqs {
		h := http.Header{}
		for _, l := range lines {
			if l != "" {
				h.Add("X-Forwarded-For", l)
			}
		}
		resp, _, err := e.Do(ctx, "GET", "/", h, nil)
		if err != nil {
			t.Fatal(err)
		}
		switch resp.StatusCode {
		case 200:
			ok++
		case 429:
		default:
			t.Fatalf("status %d for X-Forwarded-For %q", resp.StatusCode, lines)
		}
	}
	return ok
}
