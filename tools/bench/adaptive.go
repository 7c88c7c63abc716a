package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
	"github.com/sluicehq/sluice/internal/wasmhost"
)

// The adaptive section measures the adaptive_concurrency rule: its cost per
// request in the plugin beside concurrency's (the latency sample at the
// response headers and the batched updates of the shared Gauge), and in the
// real Envoy how long it takes, from cold, to find an upstream's capacity,
// and to follow it when the service time doubles and is restored.

const adaptiveCfg = `{"rules":[{"name":"bench","algorithm":"adaptive_concurrency","key":["path"],"max_delay":"10s"}]}`

func adaptiveSection(ctx context.Context, root string, o options) (string, error) {
	wasm, err := os.ReadFile(filepath.Join(root, "build", "sluice.wasm"))
	if err != nil {
		return "", err
	}
	n := max(2000, o.inprocN/4)
	progress("adaptive: in-process costs, %d requests per case", n)
	// Three interleaved rounds, the fastest of each case: on a shared
	// machine a case measured once reads whatever else ran meanwhile.
	var costs []concCost
	for round := 0; round < 3; round++ {
		for i, c := range []concCost{
			concInproc(ctx, wasm, "token_bucket admit (reference)", concTokenCfg, n, false),
			concInproc(ctx, wasm, "concurrency: take a slot, give it back at stream end", concAdmitCfg, n, false),
			adaptiveInproc(ctx, wasm, n),
		} {
			if round == 0 {
				costs = append(costs, c)
			} else if c.err == nil && c.nsPerReq < costs[i].nsPerReq {
				costs[i] = c
			}
		}
	}
	progress("adaptive: Envoy --concurrency %d, upstream of 8 slots x 50 ms, 64 clients: convergence from cold", o.concurrency)
	conv, convErr := adaptiveConvergence(ctx, filepath.Join(root, "build", "sluice.wasm"), o)

	var b strings.Builder
	b.WriteString("## 9. Adaptive concurrency: cost and convergence\n\n")
	b.WriteString("**Cost per request in the plugin** (build/sluice.wasm in the wazero host, one VM, real clock, the fastest of 3 interleaved rounds; a whole stream " +
		"each: headers, upstream response, stream end; the adaptive rule also reads `response.code_details` at the response " +
		"headers and adds its samples to the shared Gauge every 10 ms):\n\n")
	writeCostTable(&b, "case", costs)
	if costs[1].err == nil && costs[2].err == nil {
		d := costs[2].nsPerReq - costs[1].nsPerReq
		if d < 0.1*costs[1].nsPerReq {
			fmt.Fprintf(&b, "\nLearning the limit costs no more than this machine's noise over `concurrency` (%+.1f µs; %.1f more host calls: "+
				"`response.code_details` and `:status`; the Gauge's update is one per 10 ms, not per request).\n",
				d/1e3, costs[2].callsPerReq-costs[1].callsPerReq)
		} else {
			fmt.Fprintf(&b, "\nLearning the limit costs %.1f µs per request over `concurrency` (%.1f host calls).\n",
				d/1e3, costs[2].callsPerReq-costs[1].callsPerReq)
		}
	}
	b.WriteString("\n**Convergence in Envoy.** ")
	if convErr != nil {
		fmt.Fprintf(&b, "failed: %s\n", oneLine(convErr.Error()))
	} else {
		b.WriteString(conv + "\n")
	}
	return b.String(), nil
}

// adaptiveInproc times n whole streams through an adaptive rule; the
// upstream's responses carry response.code_details via_upstream, as in
// Envoy.
func adaptiveInproc(ctx context.Context, wasm []byte, n int) concCost {
	c := concCost{name: "adaptive_concurrency: take a slot, sample the latency, give it back"}
	vm, done, err := benchVM(ctx, wasm, adaptiveCfg)
	if err != nil {
		c.err = err
		return c
	}
	defer done()
	req := wasmhost.HTTPRequest("POST", "shop.example", "/buy")
	req.Properties = wasmhost.Properties{"source.address": "10.1.2.3:5555", "response.code_details": "via_upstream"}
	req.Response = &wasmhost.Response{Status: 200}
	c.timeRequests(vm, req, n)
	return c
}

// adaptiveConvergence runs 64 closed-loop clients through Envoy against an
// upstream of 8 slots × 50 ms, from cold; then doubles the service time and
// restores it. For each, the time until the upstream serves >= 80% of its
// capacity with its queue p90 <= 8 in a 250 ms bin and the next one.
func adaptiveConvergence(ctx context.Context, wasmPath string, o options) (string, error) {
	up := envoytest.NewSlotServer(8, 50*time.Millisecond)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: up}
	go srv.Serve(ln)
	defer srv.Close()
	e, err := startEnvoy(ctx, envoytest.Options{Concurrency: o.concurrency, Upstream: ln.Addr().String(), LogLevel: "warn",
		Wasm: &envoytest.Wasm{File: wasmPath, Config: adaptiveCfg}})
	if err != nil {
		return "", err
	}
	defer e.Stop()
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go envoytest.Load(lctx, e.URL(), envoytest.LoadOptions{Method: "POST", Path: "/buy", Requests: 1 << 22, Concurrency: 64, Timeout: 30 * time.Second})
	up.Take()
	var parts []string
	for _, ph := range []struct {
		name    string
		service time.Duration
	}{{"from cold", 50 * time.Millisecond}, {"service time doubled (50 -> 100 ms)", 100 * time.Millisecond}, {"restored (100 -> 50 ms)", 50 * time.Millisecond}} {
		up.SetService(ph.service)
		capacity := 8 / ph.service.Seconds()
		conv, trace := converge(ctx, up, e, capacity, 8*time.Second)
		parts = append(parts, fmt.Sprintf("%s: **%s** (capacity %.0f/s; 250 ms bins: %s)", ph.name, conv, capacity, trace))
	}
	return fmt.Sprintf("Envoy `--concurrency %d`, `%s`, an upstream of 8 slots that queues the rest inside itself, 64 closed-loop "+
		"clients (with no limit its queue holds about 56). Time until the upstream serves >= 80%% of its capacity with its "+
		"queue p90 <= 8 in two 250 ms bins in a row (bins: served/s, queue p90, learnt limit):\n\n- %s\n",
		o.concurrency, adaptiveCfg, strings.Join(parts, "\n- ")), nil
}

// converge watches the upstream in 250 ms bins for up to d; it returns when
// two bins in a row meet the target (then for 2 s more, to show it holds).
func converge(ctx context.Context, up *envoytest.SlotServer, e *envoytest.Envoy, capacity float64, d time.Duration) (string, string) {
	start := time.Now()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var bins []string
	good, conv := 0, "not within "+d.String()
	var until time.Time
	for ctx.Err() == nil && time.Since(start) < d && (until.IsZero() || time.Now().Before(until)) {
		<-tick.C
		n, p90 := up.Take()
		lim, _ := e.Stat("wasmcustom.sluice.rule.bench.limit")
		x := float64(n) * 4
		bins = append(bins, fmt.Sprintf("%.0f/%d/%d", x, p90, lim))
		if x >= 0.8*capacity && p90 <= 8 {
			good++
		} else {
			good = 0
		}
		if good == 2 && until.IsZero() {
			conv = (time.Since(start) - 250*time.Millisecond).Round(10 * time.Millisecond).String()
			until = time.Now().Add(2 * time.Second)
		}
	}
	return conv, strings.Join(bins, " ")
}
