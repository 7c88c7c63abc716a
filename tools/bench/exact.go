package main

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// The exact section: a burst of simultaneous requests from one
// client must admit exactly burst whatever the number of workers racing on
// the client's state, and an overload at twice the rate must admit the rate.

const (
	exactBurst    = 100
	exactRequests = 5000
	overloadLimit = 100 // per second
	overloadBurst = 20
)

type burstRun struct {
	workers  int
	res      envoytest.LoadResult
	upstream int64
	stats    map[string]uint64
}

type overloadRun struct {
	sent, admitted, rejected, errors int
	first, last                      time.Time
	stats                            map[string]uint64
}

func exactSection(ctx context.Context, o options) (string, error) {
	up, err := startUpstream()
	if err != nil {
		return "", err
	}
	defer up.Close()
	wasm, _ := filepath.Abs("build/sluice.wasm")
	cfg := fmt.Sprintf(`{"rules":[{"name":"hot","limit":%d,"window":"1h","burst":%d}]}`, exactBurst, exactBurst)
	var bursts []burstRun
	conns := min(o.exactConns, exactRequests)
	if lim := raiseNoFile(); lim > 0 && uint64(conns)+256 > lim {
		conns = max(1, int(lim)-256)
		progress("exact: open-file limit %d: %d simultaneous connections instead of %d", lim, conns, o.exactConns)
	}
	for _, workers := range []int{2, 4} {
		progress("exact: Envoy --concurrency %d, %d simultaneous requests from one client", workers, exactRequests)
		e, err := startEnvoy(ctx, envoytest.Options{Concurrency: workers, Upstream: up.Addr(), LogLevel: "warn",
			Wasm: &envoytest.Wasm{File: wasm, Config: cfg}})
		if err != nil {
			return "", err
		}
		u0 := up.count.Load()
		client := envoytest.NewClient(conns)
		res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Requests: exactRequests, Concurrency: conns, Client: client, Timeout: time.Minute})
		client.CloseIdleConnections()
		time.Sleep(1500 * time.Millisecond)
		st := sluiceStats(e)
		bursts = append(bursts, burstRun{workers: workers, res: res, upstream: up.count.Load() - u0, stats: st})
		progress("exact: concurrency %d: %v", workers, res)
		e.Stop()
	}

	progress("exact: overload at %d/s for %v against %d/s burst %d", 2*overloadLimit, o.overload, overloadLimit, overloadBurst)
	e, err := startEnvoy(ctx, envoytest.Options{Concurrency: o.concurrency, Upstream: up.Addr(), LogLevel: "warn",
		Wasm: &envoytest.Wasm{File: wasm, Config: fmt.Sprintf(`{"rules":[{"name":"rate","limit":%d,"window":"1s","burst":%d}]}`, overloadLimit, overloadBurst)}})
	if err != nil {
		return "", err
	}
	defer e.Stop()
	ov := overloadRun{}
	client := envoytest.NewClient(256)
	atk := vegeta.NewAttacker(vegeta.Client(client), vegeta.Workers(16), vegeta.MaxBody(0))
	tr := vegeta.NewStaticTargeter(vegeta.Target{Method: "GET", URL: e.URL() + "/"})
	for res := range atk.Attack(tr, vegeta.Rate{Freq: 2 * overloadLimit, Per: time.Second}, o.overload, "overload") {
		if ctx.Err() != nil {
			atk.Stop()
		}
		ov.sent++
		if ov.first.IsZero() || res.Timestamp.Before(ov.first) {
			ov.first = res.Timestamp
		}
		if res.Timestamp.After(ov.last) {
			ov.last = res.Timestamp
		}
		switch res.Code {
		case 200:
			ov.admitted++
		case 429:
			ov.rejected++
		default:
			ov.errors++
		}
	}
	client.CloseIdleConnections()
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	time.Sleep(1500 * time.Millisecond)
	ov.stats = sluiceStats(e)
	return exactReport(o, cfg, conns, bursts, ov), nil
}

func exactReport(o options, cfg string, conns int, bursts []burstRun, ov overloadRun) string {
	var b strings.Builder
	b.WriteString("## 4b. Exactness under contention and overload\n\n")
	fmt.Fprintf(&b, "**Burst.** %d requests from one client, all at once (%d concurrent connections released together), "+
		"against `%s`: exactly %d must pass whatever the number of Envoy workers racing on the client's state.\n\n",
		exactRequests, conns, cfg, exactBurst)
	b.WriteString("| Envoy workers | admitted (200) | rejected (429) | errors | reached upstream | exact? | time | CAS retries | per request | retries exhausted | on_error decisions |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|\n")
	for _, r := range bursts {
		st := func(k string) uint64 { return r.stats[k] }
		ok := "yes"
		if r.res.Count(200) != exactBurst || r.res.Errors != 0 {
			ok = "**NO**"
		}
		fmt.Fprintf(&b, "| %d | %d | %d | %d | %d | %s | %.2f s | %d | %.4f | %d | %d |\n",
			r.workers, r.res.Count(200), r.res.Count(429), r.res.Errors, r.upstream, ok, r.res.Elapsed.Seconds(),
			st("cas_retries"), float64(st("cas_retries"))/exactRequests, st("cas_exhausted"), st("on_error_allowed")+st("on_error_denied"))
	}
	elapsed := ov.last.Sub(ov.first)
	want := float64(overloadBurst) + float64(overloadLimit)*elapsed.Seconds()
	off := 100 * (float64(ov.admitted) - want) / want
	st := func(k string) uint64 { return ov.stats[k] }
	fmt.Fprintf(&b, "\n**Overload.** %d requests per second for %v from one client (vegeta, constant rate, open model) against "+
		"%d per second with a burst of %d, Envoy `--concurrency %d`: %d sent, **%d admitted**, %d rejected, %d errors. "+
		"Expected: burst + limit × (time between the first and the last request sent, %.3f s) = %.0f; **%+.2f%% off** (target: within 1%%). "+
		"CAS retries %d (%.4f per request), exhausted %d, on_error decisions %d.\n",
		2*overloadLimit, o.overload, overloadLimit, overloadBurst, o.concurrency, ov.sent, ov.admitted, ov.rejected, ov.errors,
		elapsed.Seconds(), want, off, st("cas_retries"), float64(st("cas_retries"))/float64(max(1, ov.sent)), st("cas_exhausted"),
		st("on_error_allowed")+st("on_error_denied"))
	b.WriteString("\nCAS retries, exhaustions and on_error decisions are the plugin's counters (`wasmcustom.sluice.cas.retries`, " +
		"`sluice.cas.exhausted`, `sluice.on_error.allowed` + `sluice.on_error.denied`) read from Envoy's admin `/stats` 1.5 s after " +
		"the run (the plugin publishes them once a second); each run has an Envoy of its own.\n")
	return b.String()
}

func numCPU() int { return runtime.NumCPU() }
