package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
	"github.com/sluicehq/sluice/internal/wasmlayout"
)

// The Envoy section: the same closed-loop load through Envoys that differ
// only in their HTTP filter (none, native local_ratelimit, Sluice), in two
// scenarios (limits high enough that every request is admitted, so the cost
// of deciding is measured; limits low enough that most requests are
// rejected). Two more Envoys split Sluice's admit cost: one runs the no-op Go
// proxy-wasm filter (tools/bench/testdata/noop), the price of any Go filter in
// Envoy's V8, and one runs Sluice without response headers. All Envoys run at
// once and are measured in interleaved rounds, so slow drifts of a shared
// machine hit every scenario alike.

const (
	admitLimit  = 1000000000 // per client per second: never reached
	rejectLimit = 10         // per client per second, burst 10
)

type envoyScenario struct {
	key, filter, scenario string
	opts                  envoytest.Options
	e                     *envoytest.Envoy
	runs                  []runStats
}

type runStats struct {
	rps                float64
	p50, p90, p99, max time.Duration
	requests, ok, r429 int64
	errors             int64
	envoyCPU, selfCPU  time.Duration
	elapsed            time.Duration
}

// sluiceConfig is the rule the Envoy section gives Sluice. The client is
// Envoy's source.address, which Envoy derives from X-Forwarded-For
// (xff_num_trusted_hops: 1), as the native filter's remote_address
// descriptor does; the plugin's own client_ip.xff_trusted_hops is left at 0
// (Envoy has appended the connection's address to X-Forwarded-For by the
// time the plugin reads it).
func sluiceConfig(limit int) string { return sluiceConfigHeaders(limit, "legacy") }

// sluiceConfigHeaders is sluiceConfig with another headers mode.
func sluiceConfigHeaders(limit int, headers string) string {
	return fmt.Sprintf(`{"rules":[{"name":"bench","limit":%d,"window":"1s","burst":%d}],"headers":%q}`, limit, limit, headers)
}

// buildGoWasm builds a Go proxy-wasm filter (pkg, relative to the repo
// root) as Go builds it, with make build's flags and its placement of the
// static data past the Go runtime's arena gap (internal/wasmlayout), so
// that compared modules differ in their code, not in where their data ends.
func buildGoWasm(ctx context.Context, pkg, out string) error {
	return linkGoWasm(ctx, pkg, out, "")
}

// buildGoWasmSlim builds pkg as make build builds the plugin: linked with
// the runtime overlay, then `make wasm-slim` (no findfunctab, binaryen's
// -Oz), so that a row of the memory section shows what the build alone
// saves a filter.
func buildGoWasmSlim(ctx context.Context, root, pkg, out string) error {
	ov, err := runtimeOverlay(ctx, filepath.Join(filepath.Dir(out), "overlay"), nil)
	if err != nil {
		return err
	}
	if err := linkGoWasm(ctx, pkg, out, ov); err != nil {
		return err
	}
	slim := exec.CommandContext(ctx, "make", "-s", "wasm-slim", "FILE="+out)
	slim.Dir = root
	if b, err := slim.CombinedOutput(); err != nil {
		return fmt.Errorf("make wasm-slim: %v: %s", err, b)
	}
	return nil
}

// runtimeOverlay writes make build's runtime overlay (internal/wasmlayout)
// for the toolchain in use into dir, with extra files replaced as well,
// and returns the overlay file's path for go build -overlay.
func runtimeOverlay(ctx context.Context, dir string, extra map[string]string) (string, error) {
	goroot, err := exec.CommandContext(ctx, "go", "env", "GOROOT").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOROOT: %v", err)
	}
	return wasmlayout.WriteOverlay(strings.TrimSpace(string(goroot)), dir, extra)
}

// linkGoWasm links pkg into out with -overlay ov (none when empty), again
// with its data moved when the runtime would clear an arena gap.
func linkGoWasm(ctx context.Context, pkg, out, ov string) error {
	ldflags := "-s -w"
	for range 2 {
		args := []string{"build", "-trimpath", "-ldflags=" + ldflags, "-buildmode=c-shared", "-o", out}
		if ov != "" {
			args = append(args, "-overlay", ov)
		}
		cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared %s: %v: %s", pkg, err, buf.String())
		}
		mod, err := os.ReadFile(out)
		if err != nil {
			return err
		}
		l, err := wasmlayout.Read(mod)
		if err != nil {
			return fmt.Errorf("%s: %w", pkg, err)
		}
		if wasmlayout.ArenaGap(l.End) == 0 {
			return nil
		}
		ldflags = fmt.Sprintf("-s -w -D %#x", l.DataAddr())
	}
	return fmt.Errorf("%s: relinked with %s, the arena gap remains", pkg, ldflags)
}

// buildNoopWasm builds the no-op Go filter.
func buildNoopWasm(ctx context.Context, out string) error {
	return buildGoWasm(ctx, "./tools/bench/testdata/noop", out)
}

// noopBench is what the sections comparing filters in Envoy share: the
// upstream, a temporary directory and the no-op Go filter built in it.
type noopBench struct {
	up   *leanUpstream
	tmp  string
	noop string // the no-op Go filter's module
}

// startNoopBench starts the upstream and builds the no-op Go filter into a
// new temporary directory named for section; close releases both.
func startNoopBench(ctx context.Context, section string) (*noopBench, error) {
	up, err := startUpstream()
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "sluice-bench-"+section+"-")
	if err != nil {
		up.Close()
		return nil, err
	}
	b := &noopBench{up: up, tmp: tmp, noop: filepath.Join(tmp, "noop.wasm")}
	progress("%s: building the no-op Go filter", section)
	if err := buildNoopWasm(ctx, b.noop); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

func (b *noopBench) close() {
	b.up.Close()
	os.RemoveAll(b.tmp)
}

func envoySection(ctx context.Context, o options) (string, error) {
	up, err := startUpstream()
	if err != nil {
		return "", err
	}
	defer up.Close()
	wasm, _ := filepath.Abs("build/sluice.wasm")
	tmp, err := os.MkdirTemp("", "sluice-bench-envoy-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	noop := filepath.Join(tmp, "noop.wasm")
	progress("envoy: building the no-op Go filter")
	noopErr := buildNoopWasm(ctx, noop)
	if noopErr != nil {
		progress("envoy: %v", noopErr)
	}
	base := func() envoytest.Options {
		return envoytest.Options{Concurrency: o.concurrency, XFFNumTrustedHops: 1, Upstream: up.Addr(), LogLevel: "warn"}
	}
	native := func(limit uint32) *envoytest.LocalRateLimit {
		return &envoytest.LocalRateLimit{MaxTokens: limit, TokensPerFill: limit, FillInterval: time.Second,
			PerClientIP: true, MaxDynamicDescriptors: uint32(max(1024, o.clients)), Headers: true}
	}
	mk := func(key, filter, scenario string, edit func(*envoytest.Options)) *envoyScenario {
		op := base()
		edit(&op)
		return &envoyScenario{key: key, filter: filter, scenario: scenario, opts: op}
	}
	scs := []*envoyScenario{
		mk("none", "no filter", "-", func(*envoytest.Options) {}),
		mk("native", "native local_ratelimit", "admit", func(op *envoytest.Options) { op.LocalRateLimit = native(admitLimit) }),
		mk("sluice", "Sluice", "admit", func(op *envoytest.Options) {
			op.Wasm = &envoytest.Wasm{File: wasm, Config: sluiceConfig(admitLimit)}
		}),
		mk("sluice-nohdr", "Sluice, headers none", "admit", func(op *envoytest.Options) {
			op.Wasm = &envoytest.Wasm{File: wasm, Config: sluiceConfigHeaders(admitLimit, "none")}
		}),
		mk("native-reject", "native local_ratelimit", "reject", func(op *envoytest.Options) { op.LocalRateLimit = native(rejectLimit) }),
		mk("sluice-reject", "Sluice", "reject", func(op *envoytest.Options) {
			op.Wasm = &envoytest.Wasm{File: wasm, Config: sluiceConfig(rejectLimit)}
		}),
	}
	if noopErr == nil {
		// Inserted before Sluice's admit row, the no-op is loaded exactly as
		// Sluice is (same vm_config, V8), without a configuration.
		noopSc := mk("noop", "no-op Go wasm filter", "admit", func(op *envoytest.Options) {
			op.Wasm = &envoytest.Wasm{File: noop, Name: "noop"}
		})
		scs = slices.Insert(scs, 2, noopSc)
	}
	for _, s := range scs {
		progress("envoy: starting %s", s.key)
		e, err := startEnvoy(ctx, s.opts)
		if err != nil {
			return "", fmt.Errorf("starting Envoy (%s): %w", s.key, err)
		}
		s.e = e
		defer e.Stop()
	}
	ips := make([]string, o.clients)
	for i := range ips {
		ips[i] = envoytest.ClientIP(i)
	}
	gen := func(s *envoyScenario, d time.Duration) (runStats, error) {
		pid := s.e.Pid()
		c0, err := procCPU(pid)
		if err != nil {
			return runStats{}, err
		}
		s0 := selfCPU()
		res := generate(ctx, genOptions{
			Addr: fmt.Sprintf("127.0.0.1:%d", s.e.Port()), Conns: o.conns, Duration: d,
			XFF: func(i int64) string { return ips[i%int64(len(ips))] },
		})
		c1, _ := procCPU(pid)
		s1 := selfCPU()
		if ctx.Err() != nil {
			return runStats{}, ctx.Err()
		}
		if res.Requests == 0 {
			return runStats{}, fmt.Errorf("%s: no response (%d errors, first: %v)", s.key, res.Errors, res.FirstErr)
		}
		return runStats{
			rps: res.RPS(), p50: res.Quantile(0.5), p90: res.Quantile(0.9), p99: res.Quantile(0.99), max: res.Latencies[len(res.Latencies)-1],
			requests: res.Requests, ok: res.Status[200], r429: res.Status[429], errors: res.Errors,
			envoyCPU: c1 - c0, selfCPU: s1 - s0, elapsed: res.Elapsed,
		}, nil
	}
	for _, s := range scs {
		progress("envoy: warm-up %s (%v)", s.key, o.warmup)
		if _, err := gen(s, o.warmup); err != nil {
			return "", err
		}
	}
	t0 := time.Now()
	for r := 0; r < o.rounds; r++ {
		for k := range scs {
			s := scs[(k+r)%len(scs)] // rotate the order every round
			st, err := gen(s, o.duration)
			if err != nil {
				return "", err
			}
			s.runs = append(s.runs, st)
			progress("envoy: round %d/%d %-13s %7.0f req/s  p50 %-9v p99 %-9v 200:%d 429:%d err:%d  Envoy CPU %.0f%% of a core",
				r+1, o.rounds, s.key, st.rps, st.p50, st.p99, st.ok, st.r429, st.errors, 100*st.envoyCPU.Seconds()/st.elapsed.Seconds())
			time.Sleep(200 * time.Millisecond)
		}
	}
	measured := time.Since(t0)
	for _, s := range scs {
		if out := s.e.Logs(); strings.Contains(out, "][critical][") || strings.Contains(out, "][error][") {
			progress("envoy: %s logged errors:\n%s", s.key, lastLines(out, 10))
		}
	}
	return envoyReport(o, scs, measured, noopErr), nil
}

type summary struct {
	rps, p50, p90, p99, cpuPerReq, envoyCores, selfCores, okShare, okRate float64
	rpsMin, rpsMax                                                        float64
	errors                                                                int64
}

func summarize(runs []runStats) summary {
	var s summary
	col := func(f func(runStats) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = f(r)
		}
		return median(v)
	}
	s.rps = col(func(r runStats) float64 { return r.rps })
	s.p50 = col(func(r runStats) float64 { return float64(r.p50) })
	s.p90 = col(func(r runStats) float64 { return float64(r.p90) })
	s.p99 = col(func(r runStats) float64 { return float64(r.p99) })
	s.cpuPerReq = col(func(r runStats) float64 { return float64(r.envoyCPU.Microseconds()) / float64(r.requests) })
	s.envoyCores = col(func(r runStats) float64 { return r.envoyCPU.Seconds() / r.elapsed.Seconds() })
	s.selfCores = col(func(r runStats) float64 { return r.selfCPU.Seconds() / r.elapsed.Seconds() })
	s.okShare = col(func(r runStats) float64 { return float64(r.ok) / float64(r.requests) })
	s.okRate = col(func(r runStats) float64 { return float64(r.ok) / r.elapsed.Seconds() })
	s.rpsMin, s.rpsMax = runs[0].rps, runs[0].rps
	for _, r := range runs {
		s.rpsMin, s.rpsMax = min(s.rpsMin, r.rps), max(s.rpsMax, r.rps)
		s.errors += r.errors
	}
	return s
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func ms(ns float64) string { return fmt.Sprintf("%.3f ms", ns/1e6) }

func envoyReport(o options, scs []*envoyScenario, measured time.Duration, noopErr error) string {
	sum := map[string]summary{}
	for _, s := range scs {
		sum[s.key] = summarize(s.runs)
	}
	var b strings.Builder
	b.WriteString("## 1. Envoy: throughput and latency\n\n")
	ratio := func(a, c float64) string {
		if c == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.2fx", a/c)
	}
	sl, na, no := sum["sluice"], sum["native"], sum["none"]
	slr, nar := sum["sluice-reject"], sum["native-reject"]
	noop, haveNoop := sum["noop"]
	nohdr, haveNohdr := sum["sluice-nohdr"]
	b.WriteString("**Headline** (medians; throughput ratio > 1 and latency ratio < 1 favour the first filter named):\n\n")
	b.WriteString("| | throughput | p50 latency | p99 latency | Envoy CPU per request |\n|---|---:|---:|---:|---:|\n")
	row := func(name string, a, c summary, bold bool) {
		f := "| %s | %s | %s | %s | %s |\n"
		if bold {
			f = "| %s | **%s** | %s | %s | %s |\n"
		}
		fmt.Fprintf(&b, f, name, ratio(a.rps, c.rps), ratio(a.p50, c.p50), ratio(a.p99, c.p99), ratio(a.cpuPerReq, c.cpuPerReq))
	}
	row("Sluice / native local_ratelimit, all admitted", sl, na, true)
	row("Sluice / no filter, all admitted", sl, no, true)
	row("Sluice / native local_ratelimit, most rejected", slr, nar, true)
	row("Sluice / no filter, most rejected", slr, no, false)
	if haveNoop {
		row("no-op Go wasm filter / no filter", noop, no, true)
		row("Sluice / no-op Go wasm filter, all admitted", sl, noop, true)
	}
	if haveNohdr {
		if haveNoop {
			row("Sluice with headers none / no-op Go wasm filter, all admitted", nohdr, noop, false)
		}
		row("Sluice / Sluice with headers none, all admitted", sl, nohdr, false)
	}
	b.WriteString("\n")

	verdict := func(r float64) string {
		if r >= 0.9 {
			return "met"
		}
		return "**not met**"
	}
	if na.rps > 0 && nar.rps > 0 {
		fmt.Fprintf(&b, "Target, Sluice at least 0.9x the native filter's throughput: %s when all requests are admitted (%.2fx), "+
			"%s when most are rejected (%.2fx).\n\n", verdict(sl.rps/na.rps), sl.rps/na.rps, verdict(slr.rps/nar.rps), slr.rps/nar.rps)
	}
	paired := func(a, c string) string {
		var rs []float64
		for i := range scs[0].runs {
			var x, y float64
			for _, s := range scs {
				if s.key == a {
					x = s.runs[i].rps
				}
				if s.key == c {
					y = s.runs[i].rps
				}
			}
			if y > 0 {
				rs = append(rs, x/y)
			}
		}
		if len(rs) == 0 {
			return "n/a"
		}
		lo, hi := slices.Min(rs), slices.Max(rs)
		return fmt.Sprintf("%.2f-%.2f", lo, hi)
	}
	fmt.Fprintf(&b, "Round by round, Sluice/native throughput ranged %s (admit) and %s (reject); Sluice/no filter %s",
		paired("sluice", "native"), paired("sluice-reject", "native-reject"), paired("sluice", "none"))
	if haveNoop {
		fmt.Fprintf(&b, "; no-op Go filter/no filter %s; Sluice/no-op Go filter %s", paired("noop", "none"), paired("sluice", "noop"))
	}
	if haveNohdr {
		fmt.Fprintf(&b, "; Sluice/Sluice with headers none %s", paired("sluice", "sluice-nohdr"))
	}
	b.WriteString(".\n\n")

	if haveNoop && haveNohdr {
		// Envoy CPU per request is the least noisy figure: split Sluice's
		// extra cost over no filter along the admit Envoys.
		extra := sl.cpuPerReq - no.cpuPerReq
		share := func(v float64) string {
			if extra <= 0 {
				return "n/a"
			}
			return fmt.Sprintf("%.0f%%", 100*v/extra)
		}
		floor, decide, hdrs := noop.cpuPerReq-no.cpuPerReq, nohdr.cpuPerReq-noop.cpuPerReq, sl.cpuPerReq-nohdr.cpuPerReq
		fmt.Fprintf(&b, "**Where Sluice's cost in Envoy goes** (all admitted; differences between the medians of Envoy CPU per request "+
			"in the table below): Sluice takes %.1f µs per request against %.1f µs without a filter, %+.1f µs. "+
			"Of these, **%+.1f µs (%s) is the price of any Go proxy-wasm filter in Envoy's V8** (the no-op Go filter: the wasm "+
			"filter's per-stream work in Envoy, the calls into the module and the Go wasip1 runtime's cost per callback); "+
			"%+.1f µs (%s) is Sluice's own deciding (its host calls for the path, the client address and the shared-data state, "+
			"and the engine; Sluice with `headers: none` minus the no-op); %+.1f µs (%s) is writing the three X-RateLimit response headers (Sluice minus "+
			"Sluice with `headers: none`). The native filter costs %+.1f µs over no filter.\n\n",
			sl.cpuPerReq, no.cpuPerReq, extra, floor, share(floor), decide, share(decide), hdrs, share(hdrs), na.cpuPerReq-no.cpuPerReq)
	}

	b.WriteString("| filter | scenario | req/s (median) | req/s min-max | p50 | p90 | p99 | Envoy CPU µs/req | Envoy cores busy | generator+upstream cores | admitted | admitted/s | errors |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range scs {
		m := sum[s.key]
		fmt.Fprintf(&b, "| %s | %s | %.0f | %.0f-%.0f | %s | %s | %s | %.1f | %.2f | %.2f | %.1f%% | %.0f | %d |\n",
			s.filter, s.scenario, m.rps, m.rpsMin, m.rpsMax, ms(m.p50), ms(m.p90), ms(m.p99), m.cpuPerReq, m.envoyCores, m.selfCores,
			100*m.okShare, m.okRate, m.errors)
	}
	var names []string
	for _, s := range scs {
		n := s.filter
		if s.scenario != "-" {
			n += " (" + s.scenario + ")"
		}
		names = append(names, n)
	}
	noopText := "The no-op Go wasm filter (`tools/bench/testdata/noop`, every proxy-wasm callback the Go SDK's default) is built with " +
		"the same Go toolchain and flags as `build/sluice.wasm` (`GOOS=wasip1 GOARCH=wasm go build -trimpath -ldflags=\"-s -w\" " +
		"-buildmode=c-shared`) and loaded exactly as Sluice is (`envoy.filters.http.wasm`, V8, no configuration): it measures " +
		"what any Go filter costs in Envoy before it does anything. \"Sluice, headers none\" is the admit scenario's Sluice with " +
		"`headers: none` (no rate-limit response headers). "
	if noopErr != nil {
		noopText = "The no-op Go wasm filter could not be built, so its Envoy was left out: " + oneLine(noopErr.Error()) + ". "
	}
	fmt.Fprintf(&b, "\n**Method.** %s Envoys (%s) run side by side, `--concurrency %d` each, identical but for the HTTP filter, "+
		"behind one upstream. The load generator is a closed loop of **%d keep-alive HTTP/1.1 connections**, each sending the next "+
		"request as soon as the previous response is read (maximum throughput at fixed concurrency); it writes prebuilt requests and "+
		"parses responses by hand instead of using net/http, and the upstream answers every request with a fixed 3-byte body, because "+
		"on this machine the generator, the upstream and Envoy share %d cores: every cycle they spend is taken from Envoy. "+
		"The generator was chosen over vegeta for that reason (vegeta's open model suits the demo's question, not a cost measurement "+
		"at saturation); the same generator drives every Envoy. "+
		"\"Envoy cores busy\" and \"generator+upstream cores\" show where the CPU went; Envoy CPU per request (from /proc) is the "+
		"least noisy cost figure on a shared machine. "+
		"Requests rotate through %d client addresses in X-Forwarded-For (`xff_num_trusted_hops: 1`), so both limiters keep one "+
		"bucket per client: native `local_ratelimit` with a `remote_address` descriptor (dynamic per-client buckets, "+
		"`max_dynamic_descriptors: %d` so that no client is evicted), token bucket, `filter_enabled` and `filter_enforced` at 100%%, "+
		"`enable_x_ratelimit_headers: DRAFT_VERSION_03`; Sluice: one `token_bucket` rule keyed by `client_ip`, "+
		"`headers: legacy` (the same three X-RateLimit headers; Sluice adds Retry-After to a 429), the client being Envoy's `source.address`, "+
		"which Envoy derives from X-Forwarded-For as it does for the native filter (the plugin's own `xff_trusted_hops` stays 0). "+
		"%s"+
		"\"admit\": %d requests per second per client (never reached: measures the cost of deciding); \"reject\": %d per second per "+
		"client with a burst of %d, so that about %.0f requests per second pass (the rate, plus each client's burst refilled while "+
		"the other scenarios ran) and the rest are answered 429 by the filter. "+
		"Each Envoy was warmed up for %v, then %d interleaved rounds ran every scenario for %v each (the order rotated every "+
		"round; 2.5s by default so that `make bench` stays within about 3 minutes with seven Envoys; `-duration` "+
		"sets it), %v in all; the tables give the medians over the rounds. Latency is per request, from writing it to reading the "+
		"whole response, on loopback.\n",
		spellCount(len(scs)), strings.Join(names, "; "), o.concurrency, o.conns, numCPU(),
		o.clients, max(1024, o.clients), noopText, admitLimit, rejectLimit, rejectLimit,
		float64(o.clients)*(rejectLimit+rejectLimit*o.duration.Seconds())/o.duration.Seconds(),
		o.warmup, o.rounds, o.duration, measured.Round(time.Second))
	return b.String()
}

// spellCount spells small counts for prose ("Seven Envoys").
func spellCount(n int) string {
	words := []string{"Zero", "One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine", "Ten"}
	if n >= 0 && n < len(words) {
		return words[n]
	}
	return fmt.Sprint(n)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
