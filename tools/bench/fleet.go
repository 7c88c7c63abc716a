package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// The fleet section: three Envoys behind a round-robin front Envoy, 1,000
// clients well under a limit of 600 per minute, with
//
//   - a Sluice local rule (each Envoy counts alone),
//   - a Sluice global rule (one budget in envoyproxy/ratelimit on Redis,
//     leased per client),
//   - Envoy's native global rate-limit filter against the same service
//     (one call per request).
//
// It counts the calls the Envoys make to the service
// (cluster.ratelimit.upstream_rq_total) per request and compares latencies.
// Each scenario runs inside one minute window of the service (it waits for
// a window to start), first a warm-up that brings every client to every
// Envoy, then the measured run.

const (
	fleetLimit   = 600
	fleetClients = 1000
	// fleetRounds rounds of fleetPerRound requests per fleet, paced.
	fleetRounds     = 10
	fleetPerRound   = 4 * fleetClients
	fleetFirstRound = 6 * time.Second
	fleetRoundEvery = 4800 * time.Millisecond
)

func fleetSluiceConfig(scope string) string {
	alg := `"algorithm": "fixed_window", `
	if scope == "global" {
		alg = `"scope": "global", `
	}
	return `{"rules": [{"name": "api", ` + alg + `"limit": ` + strconv.Itoa(fleetLimit) + `, "window": "1m", "key": ["header:x-forwarded-for"]}],
  "global": {"cluster": "ratelimit", "domain": "sluice", "timeout": "100ms"}}`
}

type fleetRun struct {
	name             string
	warm, measured   *genResult
	warmCalls, calls uint64
	crossed          bool
	p99s             []time.Duration // per round
}

// medianP99 is the median over the rounds of each round's p99.
func (r *fleetRun) medianP99() time.Duration {
	if len(r.p99s) == 0 {
		return 0
	}
	v := slices.Clone(r.p99s)
	slices.Sort(v)
	return v[len(v)/2]
}

func fleetSection(ctx context.Context, o options) (string, error) {
	redisBin, err := envoytest.FindRedis()
	if err != nil {
		return "", err
	}
	rlsBin, err := envoytest.FindRLS()
	if err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp("", "sluice-bench-fleet-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	redis, err := envoytest.StartRedis(ctx, redisBin, tmp)
	if err != nil {
		return "", err
	}
	defer redis.Stop()
	shipped, err := os.ReadFile("envoy/ratelimit/config/sluice.yaml")
	if err != nil {
		return "", err
	}
	native := fmt.Sprintf("domain: native\ndescriptors:\n- key: x-forwarded-for\n  rate_limit: {unit: minute, requests_per_unit: %d}\n", fleetLimit)
	rls, err := envoytest.StartRLS(ctx, rlsBin, tmp, redis.Addr(), map[string]string{"sluice.yaml": string(shipped), "native.yaml": native})
	if err != nil {
		return "", err
	}
	defer rls.Stop()
	up, err := startUpstream()
	if err != nil {
		return "", err
	}
	defer up.Close()
	wasm, _ := filepath.Abs("build/sluice.wasm")

	type scenario struct {
		name string
		edit func(*envoytest.Options)
	}
	scs := []scenario{
		{"Sluice, local rule", func(op *envoytest.Options) {
			op.Wasm = &envoytest.Wasm{File: wasm, Config: fleetSluiceConfig("local")}
		}},
		{"Sluice, global rule", func(op *envoytest.Options) {
			op.Wasm = &envoytest.Wasm{File: wasm, Config: fleetSluiceConfig("global")}
		}},
		{"native envoy.filters.http.ratelimit", func(op *envoytest.Options) {
			op.GlobalRateLimit = &envoytest.GlobalRateLimit{Cluster: "ratelimit", Domain: "native", Timeout: 100 * time.Millisecond, Header: "x-forwarded-for"}
		}},
	}
	// Every fleet runs at once (12 Envoys, mostly idle), so that the
	// scenarios can be measured in interleaved rounds: the machine is
	// shared and its load drifts, and rounds spread that drift over all
	// scenarios alike.
	type fleetUnderTest struct {
		sc      scenario
		members []*envoytest.Envoy
		addr    string
		run     *fleetRun
	}
	var fleets []*fleetUnderTest
	defer func() {
		for _, f := range fleets {
			for _, e := range f.members {
				e.Stop()
			}
		}
	}()
	for _, sc := range scs {
		progress("fleet: %s: starting three Envoys and a front", sc.name)
		f := &fleetUnderTest{sc: sc, run: &fleetRun{name: sc.name, measured: &genResult{Status: map[int]int64{}}}}
		fleets = append(fleets, f)
		var addrs []string
		for i := 0; i < 3; i++ {
			op := envoytest.Options{Concurrency: 1, Upstream: up.Addr(), LogLevel: "warn",
				Clusters: map[string]string{"ratelimit": rls.GRPCAddr}, HTTP2Clusters: []string{"ratelimit"}}
			sc.edit(&op)
			e, err := startEnvoy(ctx, op)
			if err != nil {
				return "", err
			}
			f.members = append(f.members, e)
			addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(e.Port()))
		}
		front, err := startEnvoy(ctx, envoytest.Options{Concurrency: 1, UpstreamEndpoints: addrs, LogLevel: "warn"})
		if err != nil {
			return "", err
		}
		f.members = append(f.members, front)
		f.addr = "127.0.0.1:" + strconv.Itoa(front.Port())
	}
	calls := func(f *fleetUnderTest) uint64 {
		var n uint64
		for _, e := range f.members[:3] {
			v, _ := e.Stat("cluster.ratelimit.upstream_rq_total")
			n += v
		}
		return n
	}
	// One window of the service for the whole measurement.
	now := time.Now()
	if left := now.Truncate(time.Minute).Add(time.Minute).Sub(now); left < 55*time.Second {
		progress("fleet: waiting %v for a minute window to start", left.Round(time.Second))
		select {
		case <-time.After(left + 200*time.Millisecond):
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	minute := time.Now().Unix() / 60
	xff := func(i int64) string {
		c := i % fleetClients
		return fmt.Sprintf("10.%d.%d.%d", c>>16&255, c>>8&255, c&255)
	}
	for _, f := range fleets {
		c0 := calls(f)
		f.run.warm = generate(ctx, genOptions{Addr: f.addr, Conns: o.conns, Requests: 6 * fleetClients, Duration: 10 * time.Second, XFF: xff})
		f.run.warmCalls = calls(f) - c0
	}
	// The rounds are spread over the window (round r starts no earlier
	// than fleetFirstRound + r x fleetRoundEvery after its start), so that
	// every client stays well under its limit in rate too, not only in
	// count: run back to back, the rounds would send each client's requests
	// within a few seconds, at several times the pace its limit allows,
	// and would measure the start of a window, not leases past warm-up.
	windowStart := time.Unix(minute*60, 0)
	for round := 0; round < fleetRounds && ctx.Err() == nil; round++ {
		if d := time.Until(windowStart.Add(fleetFirstRound + time.Duration(round)*fleetRoundEvery)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		for k := range fleets {
			f := fleets[(k+round)%len(fleets)]
			c0 := calls(f)
			g := generate(ctx, genOptions{Addr: f.addr, Conns: o.conns, Requests: fleetPerRound, Duration: 5 * time.Second, XFF: xff})
			f.run.calls += calls(f) - c0
			f.run.p99s = append(f.run.p99s, g.Quantile(0.99))
			m := f.run.measured
			m.Latencies = append(m.Latencies, g.Latencies...)
			m.Requests += g.Requests
			m.Elapsed += g.Elapsed
			for code, n := range g.Status {
				m.Status[code] += n
			}
		}
	}
	var runs []*fleetRun
	for _, f := range fleets {
		slices.Sort(f.run.measured.Latencies)
		f.run.crossed = time.Now().Unix()/60 != minute
		r := f.run
		progress("fleet: %s: %d requests at %.0f/s, median p99 %v, %d calls (%.4f per request)", r.name, r.measured.Requests, r.measured.RPS(),
			r.medianP99(), r.calls, float64(r.calls)/float64(max(r.measured.Requests, 1)))
		runs = append(runs, r)
	}
	return fleetReport(runs), nil
}

func fleetReport(runs []*fleetRun) string {
	var b strings.Builder
	b.WriteString("## " + sectionTitles["fleet"] + "\n\n")
	fmt.Fprintf(&b, "Three Envoys (concurrency 1) behind a round-robin front Envoy; %d clients (X-Forwarded-For, the rule's key) "+
		"well under a limit of %d per minute; envoyproxy/ratelimit on Redis 7 on loopback. Each scenario runs inside one minute "+
		"window of the service: the three fleets run at once; each gets a warm-up of %d requests (every client reaches every Envoy), "+
		"then %d interleaved rounds of %d requests per fleet (32 connections, closed loop), spread over the window (round r starts %v + r x %v "+
		"after the window's start) so that clients stay well under their limit in rate, not only in count. p99 is the median of the rounds' p99s. "+
		"Calls are cluster.ratelimit.upstream_rq_total summed over the three Envoys of a fleet.\n\n", fleetClients, fleetLimit, 6*fleetClients,
		fleetRounds, fleetPerRound, fleetFirstRound, fleetRoundEvery)
	b.WriteString("| scenario | measured requests | req/s | p50 | p99 (median of rounds) | 429s | calls per request (measured) | calls per request (warm-up) |\n|---|---|---|---|---|---|---|---|\n")
	var p99 = map[string]time.Duration{}
	for _, r := range runs {
		m := r.measured
		p99[r.name] = r.medianP99()
		note := ""
		if r.crossed {
			note = " (crossed a window)"
		}
		fmt.Fprintf(&b, "| %s%s | %d | %.0f | %v | %v | %d | %.4f | %.4f |\n", r.name, note, m.Requests, m.RPS(),
			m.Quantile(0.5).Round(time.Microsecond), r.medianP99().Round(time.Microsecond), m.Status[429],
			float64(r.calls)/float64(max(m.Requests, 1)), float64(r.warmCalls)/float64(max(r.warm.Requests, 1)))
	}
	for _, r := range runs {
		if r.name != "Sluice, global rule" {
			continue
		}
		per := float64(r.warm.Requests+r.measured.Requests) / fleetClients
		fmt.Fprintf(&b, "\nWorkload: each client sent %.1f requests in the window (%.1f%% of its limit of %d; %.1f per Envoy in the measured part); "+
			"the global fleet made %.2f calls per client per Envoy in the whole window (warm-up included).\n",
			per, 100*per/fleetLimit, fleetLimit, float64(r.measured.Requests)/fleetClients/3,
			float64(r.warmCalls+r.calls)/fleetClients/3)
	}
	if l, g := p99["Sluice, local rule"], p99["Sluice, global rule"]; l > 0 && g > 0 {
		fmt.Fprintf(&b, "\nThe global rule's p99 is %.2fx the local rule's (target: within 1.1x).", float64(g)/float64(l))
	}
	b.WriteString(" A client's first request at each Envoy in a window waits for one call (the warm-up column); afterwards its lease serves it " +
		"until the window ends, so a fleet that serves R requests per second sends the service about R x (measured calls per request) calls per second, " +
		"plus one call per client per Envoy per window.\n")
	return b.String()
}
