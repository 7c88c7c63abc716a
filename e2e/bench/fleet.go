package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/e2e/envoytest"
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
	var runs []*fleetRun
	for _, sc := range scs {
		progress("fleet: %s: starting three Envoys and a front", sc.name)
		var members []*envoytest.Envoy
		var addrs []string
		stopAll := func() {
			for _, e := range members {
				e.Stop()
			}
		}
		for i := 0; i < 3; i++ {
			op := envoytest.Options{Concurrency: 1, Upstream: up.Addr(), LogLevel: "warn",
				Clusters: map[string]string{"ratelimit": rls.GRPCAddr}, HTTP2Clusters: []string{"ratelimit"}}
			sc.edit(&op)
			e, err := startEnvoy(ctx, op)
			if err != nil {
				stopAll()
				return "", err
			}
			members = append(members, e)
			addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(e.Port()))
		}
		front, err := startEnvoy(ctx, envoytest.Options{Concurrency: 1, UpstreamEndpoints: addrs, LogLevel: "warn"})
		if err != nil {
			stopAll()
			return "", err
		}
		members = append(members, front)
		calls := func() uint64 {
			var n uint64
			for _, e := range members[:3] {
				v, _ := e.Stat("cluster.ratelimit.upstream_rq_total")
				n += v
			}
			return n
		}
		// One window of the service for the whole run.
		now := time.Now()
		if left := now.Truncate(time.Minute).Add(time.Minute).Sub(now); left < 55*time.Second {
			progress("fleet: %s: waiting %v for a minute window to start", sc.name, left.Round(time.Second))
			select {
			case <-time.After(left + 200*time.Millisecond):
			case <-ctx.Done():
				stopAll()
				return "", ctx.Err()
			}
		}
		minute := time.Now().Unix() / 60
		xff := func(i int64) string {
			c := i % fleetClients
			return fmt.Sprintf("10.%d.%d.%d", c>>16&255, c>>8&255, c&255)
		}
		addr := "127.0.0.1:" + strconv.Itoa(front.Port())
		r := &fleetRun{name: sc.name}
		c0 := calls()
		r.warm = generate(ctx, genOptions{Addr: addr, Conns: o.conns, Requests: 6 * fleetClients, Duration: 15 * time.Second, XFF: xff})
		c1 := calls()
		r.measured = generate(ctx, genOptions{Addr: addr, Conns: o.conns, Requests: 30 * fleetClients, Duration: 30 * time.Second, XFF: xff})
		c2 := calls()
		r.warmCalls, r.calls = c1-c0, c2-c1
		r.crossed = time.Now().Unix()/60 != minute
		progress("fleet: %s: %d requests at %.0f/s, p99 %v, %d calls (%.4f per request)", sc.name, r.measured.Requests, r.measured.RPS(),
			r.measured.Quantile(0.99), r.calls, float64(r.calls)/float64(max(r.measured.Requests, 1)))
		runs = append(runs, r)
		stopAll()
	}
	return fleetReport(runs), nil
}

func fleetReport(runs []*fleetRun) string {
	var b strings.Builder
	b.WriteString("## " + sectionTitles["fleet"] + "\n\n")
	fmt.Fprintf(&b, "Three Envoys (concurrency 1) behind a round-robin front Envoy; %d clients (X-Forwarded-For, the rule's key) "+
		"well under a limit of %d per minute; envoyproxy/ratelimit on Redis 7 on loopback. Each scenario runs inside one minute "+
		"window of the service: a warm-up of %d requests (every client reaches every Envoy), then the measured requests, "+
		"closed loop. Calls are cluster.ratelimit.upstream_rq_total summed over the three Envoys.\n\n", fleetClients, fleetLimit, 6*fleetClients)
	b.WriteString("| scenario | measured requests | req/s | p50 | p99 | 429s | calls per request (measured) | calls per request (warm-up) |\n|---|---|---|---|---|---|---|---|\n")
	var p99 = map[string]time.Duration{}
	for _, r := range runs {
		m := r.measured
		p99[r.name] = m.Quantile(0.99)
		note := ""
		if r.crossed {
			note = " (crossed a window)"
		}
		fmt.Fprintf(&b, "| %s%s | %d | %.0f | %v | %v | %d | %.4f | %.4f |\n", r.name, note, m.Requests, m.RPS(),
			m.Quantile(0.5).Round(time.Microsecond), m.Quantile(0.99).Round(time.Microsecond), m.Status[429],
			float64(r.calls)/float64(max(m.Requests, 1)), float64(r.warmCalls)/float64(max(r.warm.Requests, 1)))
	}
	if l, g := p99["Sluice, local rule"], p99["Sluice, global rule"]; l > 0 && g > 0 {
		fmt.Fprintf(&b, "\nThe global rule's p99 is %.2fx the local rule's (target: within 1.1x).", float64(g)/float64(l))
	}
	b.WriteString(" A client's first request at each Envoy in a window waits for one call (the warm-up column); afterwards its lease serves it " +
		"until the window ends, so a fleet that serves R requests per second sends the service about R x (measured calls per request) calls per second, " +
		"plus one call per client per Envoy per window.\n")
	return b.String()
}
