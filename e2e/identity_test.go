package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoyconf"
	"github.com/sluicehq/sluice/internal/envoytest"
	"github.com/sluicehq/sluice/plugin/config"
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
		attacker int  // requests of the attacker admitted
		client2  int  // requests of a second client admitted (-1: not measured)
		warned   bool // sluice validate -envoy -proxies <proxies> warns
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
				// What sluice validate -envoy says of the LDS file this Envoy
				// runs, for each number of proxies in front.
				filter := readSluiceFilter(t, filepath.Join(e.Dir(), "lds.yaml"))
				if got, _ := filter.SettingOf(s); got != set {
					t.Fatalf("envoyconf reads the setting %+v from the LDS file, want %+v", got, set)
				}
				for p := 0; p <= 2; p++ {
					r := row{setting: set, proxies: p, client2: -1}
					for _, f := range envoyconf.Judge(filter, s, true, p) {
						r.warned = r.warned || f.Warning
					}
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
		if r.warned != (r.attacker > burst) {
			t.Errorf("%+v behind %d proxies: the attacker got %d admitted (one budget is %d), and sluice validate -proxies %d warned: %v", r.setting, r.proxies, r.attacker, burst, r.proxies, r.warned)
		}
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

// readSluiceFilter reads an Envoy file as sluice validate -envoy does and
// returns its one wasm filter.
func readSluiceFilter(t *testing.T, file string) envoyconf.Filter {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	f, err := envoyconf.Read(src)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if len(f.Filters) != 1 || f.Filters[0].Err != nil || f.Filters[0].Listener != envoytest.ListenerName {
		t.Fatalf("%s: want one readable wasm filter in listener %s, got %+v", file, envoytest.ListenerName, f.Filters)
	}
	return f.Filters[0]
}

// Every configuration form the harness renders for the tests (bootstrap
// with a static listener, bootstrap with file-based LDS, the LDS document;
// wasm, local_ratelimit, Struct configuration) is read by envoyconf as
// Envoy's own types, the way sluice validate -envoy reads it.
func TestHarnessConfigsReadAsEnvoy(t *testing.T) {
	wasm := &envoytest.Wasm{File: "/x/sluice.wasm", Config: identityConfig(0, 2)}
	structCfg := &envoytest.Wasm{File: "/x/sluice.wasm", Config: identityConfig(1, 2), ConfigAsStruct: true, FailurePolicy: "FAIL_OPEN", Env: map[string]string{"A": "b"}}
	for i, o := range []envoytest.Options{
		{Wasm: wasm},
		{Wasm: structCfg, XFFNumTrustedHops: 1},
		{LocalRateLimit: &envoytest.LocalRateLimit{MaxTokens: 5, PerClientIP: true, Headers: true}},
		{Wasm: wasm, DynamicListeners: true, Clusters: map[string]string{"ratelimit": "127.0.0.1:8081"}},
	} {
		boot, err := envoytest.RenderBootstrap(o, "127.0.0.1:9", 10000)
		if err != nil {
			t.Fatal(err)
		}
		docs := []string{boot}
		if o.DynamicListeners {
			lds, err := envoytest.RenderLDS(o, 10000, "1")
			if err != nil {
				t.Fatal(err)
			}
			docs = append(docs, lds)
		}
		for _, d := range docs {
			f, err := envoyconf.Read([]byte(d))
			if err != nil {
				t.Errorf("options %d: %v\n%s", i, err, d)
				continue
			}
			for _, w := range f.Filters {
				if w.Err != nil {
					t.Errorf("options %d: %v", i, w.Err)
				}
				if _, err := config.Parse(w.Config); err != nil {
					t.Errorf("options %d: %v", i, err)
				}
			}
		}
	}
}
