package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// The probe section (-run probe, never part of the default run) prices
// single proxy-wasm operations in Envoy's V8: Envoys run the no-op Go filter
// and the probe filter (tools/bench/testdata/probe) configured to do one
// operation per request (or a combination), plus Sluice for reference, and
// are measured in interleaved rounds with the Envoy section's generator.
// Each variant's cost is its Envoy CPU per request minus the no-op's, paired
// round by round.

// probeVariants are the probe configurations measured, in report order.
var probeVariants = []struct{ key, config, what string }{
	{"vmctx", "vmctx", "SetVMContext and a 1 s tick, nothing per request (as Sluice is wired)"},
	{"recover", "recover", "a deferred recover() in OnHttpRequestHeaders"},
	{"clock", "clock", "time.Now()"},
	{"header", "header", `GetHttpRequestHeader(":path")`},
	{"property", "property", "GetProperty(source.address)"},
	{"shared", "shared", "GetSharedData (288 bytes) + SetSharedData with its cas"},
	{"resp3", "resp3", "3 ReplaceHttpResponseHeader calls"},
	{"alloc", "alloc", "a 300-byte object per request kept in the http context"},
	{"compute", "compute", "pure Go work, no host call (about 6 µs natively and in node's V8)"},
	{"all", "vmctx,recover,clock,header,property,shared,resp3,alloc", "all of the above but compute"},
}

func buildProbeWasm(ctx context.Context, out string) error {
	return buildGoWasm(ctx, "./tools/bench/testdata/probe", out)
}

func probeSection(ctx context.Context, o options) (string, error) {
	variants := probeVariants
	if o.probeRepeat > 1 {
		// Each operation repeated, without the combination rows.
		variants = nil
		for _, p := range probeVariants {
			if p.key == "all" || p.key == "vmctx" || p.key == "recover" {
				continue
			}
			p.config += fmt.Sprintf(",x%d", o.probeRepeat)
			p.what = fmt.Sprintf("%d x %s", o.probeRepeat, p.what)
			variants = append(variants, p)
		}
	}
	nb, err := startNoopBench(ctx, "probe")
	if err != nil {
		return "", err
	}
	defer nb.close()
	up, noop, probe := nb.up, nb.noop, filepath.Join(nb.tmp, "probe.wasm")
	progress("probe: building the probe Go filter")
	if err := buildProbeWasm(ctx, probe); err != nil {
		return "", err
	}
	sluice, _ := filepath.Abs("build/sluice.wasm")
	base := envoytest.Options{Concurrency: o.concurrency, XFFNumTrustedHops: 1, Upstream: up.Addr(), LogLevel: "warn"}
	type variant struct {
		key, what string
		e         *envoytest.Envoy
		opts      envoytest.Options
		cpu       []float64 // Envoy CPU µs per request, one per round
		rps       []float64
	}
	mk := func(key, what string, w *envoytest.Wasm) *variant {
		op := base
		op.Wasm = w
		return &variant{key: key, what: what, opts: op}
	}
	vs := []*variant{
		mk("none", "no filter", nil),
		mk("noop", "no-op Go filter (SetPluginContext, SDK defaults)", &envoytest.Wasm{File: noop, Name: "noop"}),
	}
	for _, p := range variants {
		vs = append(vs, mk(p.key, p.what, &envoytest.Wasm{File: probe, Name: "probe", VMID: "probe", Config: p.config}))
	}
	if o.probeRepeat <= 1 {
		vs = append(vs,
			mk("sluice-nohdr", "Sluice, headers none", &envoytest.Wasm{File: sluice, Config: sluiceConfigHeaders(admitLimit, "none")}),
			mk("sluice", "Sluice, headers legacy", &envoytest.Wasm{File: sluice, Config: sluiceConfig(admitLimit)}))
	}
	for _, v := range vs {
		progress("probe: starting %s", v.key)
		e, err := startEnvoy(ctx, v.opts)
		if err != nil {
			return "", fmt.Errorf("starting Envoy (%s): %w", v.key, err)
		}
		v.e = e
		defer e.Stop()
	}
	ips := make([]string, o.clients)
	for i := range ips {
		ips[i] = envoytest.ClientIP(i)
	}
	gen := func(v *variant, d time.Duration) (float64, float64, error) {
		c0, err := procCPU(v.e.Pid())
		if err != nil {
			return 0, 0, err
		}
		res := generate(ctx, genOptions{
			Addr: fmt.Sprintf("127.0.0.1:%d", v.e.Port()), Conns: o.conns, Duration: d,
			XFF: func(i int64) string { return ips[i%int64(len(ips))] },
		})
		c1, _ := procCPU(v.e.Pid())
		if ctx.Err() != nil {
			return 0, 0, ctx.Err()
		}
		if res.Requests == 0 || res.Status[200] != res.Requests {
			return 0, 0, fmt.Errorf("%s: %d requests, %d answered 200, %d errors (first: %v)", v.key, res.Requests, res.Status[200], res.Errors, res.FirstErr)
		}
		return float64((c1 - c0).Microseconds()) / float64(res.Requests), res.RPS(), nil
	}
	warm := min(o.warmup, time.Second)
	for _, v := range vs {
		if _, _, err := gen(v, warm); err != nil {
			return "", err
		}
	}
	t0 := time.Now()
	for r := 0; r < o.rounds; r++ {
		for k := range vs {
			v := vs[(k+r)%len(vs)]
			cpu, rps, err := gen(v, o.duration)
			if err != nil {
				return "", err
			}
			v.cpu, v.rps = append(v.cpu, cpu), append(v.rps, rps)
			progress("probe: round %d/%d %-13s %7.0f req/s  Envoy CPU %.1f µs/req", r+1, o.rounds, v.key, rps, cpu)
			time.Sleep(100 * time.Millisecond)
		}
	}
	measured := time.Since(t0)
	for _, v := range vs {
		if out := v.e.Logs(); strings.Contains(out, "][critical][") || strings.Contains(out, "][error][") {
			progress("probe: %s logged errors:\n%s", v.key, lastLines(out, 10))
		}
	}
	noopV := vs[1]
	var b strings.Builder
	b.WriteString("## 5. Probe: single proxy-wasm operations in Envoy's V8\n\n")
	b.WriteString("| variant | what it does per request | req/s | Envoy CPU µs/req | minus no-op, paired per round: median | min..max |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|\n")
	for _, v := range vs {
		d := make([]float64, len(v.cpu))
		for i := range v.cpu {
			d[i] = v.cpu[i] - noopV.cpu[i]
		}
		fmt.Fprintf(&b, "| %s | %s | %.0f | %.1f | %+.1f | %+.1f..%+.1f |\n",
			v.key, v.what, median(v.rps), median(v.cpu), median(d), slices.Min(d), slices.Max(d))
	}
	fmt.Fprintf(&b, "\n**Method.** %d Envoys (`--concurrency %d`, V8) differing only in the HTTP filter; the probe filter "+
		"(`tools/bench/testdata/probe`) is built like `build/sluice.wasm` and told by its configuration which operations to do. "+
		"The Envoy section's closed-loop generator (%d connections, %d client addresses in X-Forwarded-For) drove each "+
		"Envoy for %v per round after a %v warm-up, %d interleaved rounds with the order rotated (%v in all); medians over the rounds.\n",
		len(vs), o.concurrency, o.conns, o.clients, o.duration, warm, o.rounds, measured.Round(time.Second))
	return b.String(), nil
}
