package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
	"github.com/sluicehq/sluice/internal/wasmhost"
)

// The conc section measures the concurrency rule: what taking
// and giving back a slot, and waiting in the queue, cost per request in the
// plugin (wazero host); how close to its limit the queue keeps a slow
// upstream in Envoy; and how long the slots of a worker that vanished stay
// leaked (the lease bound).

const (
	concTokenCfg = `{"rules":[{"name":"bench","limit":1000000000,"window":"1h","key":["path"]}]}`
	concAdmitCfg = `{"rules":[{"name":"bench","algorithm":"concurrency","limit":1000,"key":["path"]}]}`
	concQueueCfg = `{"rules":[{"name":"bench","algorithm":"concurrency","limit":10,"key":["path"],"max_delay":"60s"}]}`
)

type concCost struct {
	name        string
	nsPerReq    float64
	callsPerReq float64
	err         error
}

// writeCostTable writes costs as a table whose first column is headed
// first (a case, a rule).
func writeCostTable(b *strings.Builder, first string, costs []concCost) {
	fmt.Fprintf(b, "| %s | per request | host calls per request |\n|---|---:|---:|\n", first)
	for _, c := range costs {
		if c.err != nil {
			fmt.Fprintf(b, "| %s | failed: %s | |\n", c.name, oneLine(c.err.Error()))
			continue
		}
		fmt.Fprintf(b, "| %s | %.1f µs | %.1f |\n", c.name, c.nsPerReq/1e3, c.callsPerReq)
	}
}

func concSection(ctx context.Context, root string, o options) (string, error) {
	wasm, err := os.ReadFile(filepath.Join(root, "build", "sluice.wasm"))
	if err != nil {
		return "", err
	}
	n := max(2000, o.inprocN/4)
	progress("conc: in-process costs, %d requests per case", n)
	costs := []concCost{
		concInproc(ctx, wasm, "token_bucket admit (reference)", concTokenCfg, n, false),
		concInproc(ctx, wasm, "concurrency: take a slot, give it back at stream end", concAdmitCfg, n, false),
		concInproc(ctx, wasm, "concurrency: wait in the queue (100 waiting), admitted by a tick, give the slot back", concQueueCfg, n, true),
	}
	tick := concTickCost(ctx, wasm, n)

	progress("conc: Envoy --concurrency %d, upstream holding each request %v, 100 closed-loop clients, limit 10 with max_delay", o.concurrency, concHold)
	env, envErr := concEnvoy(ctx, o)

	progress("conc: slot-leak bound: killing a VM holding slots at several points of an epoch")
	leaks, leakErr := concLeakBound(ctx, wasm)

	var b strings.Builder
	b.WriteString("## 6. Concurrency rule: queue cost and slot-leak bound\n\n")
	b.WriteString("**Cost per request in the plugin** (build/sluice.wasm in the wazero host of internal/wasmhost, one VM, " +
		"real clock; each request is a whole stream: headers, upstream response, stream end):\n\n")
	writeCostTable(&b, "case", costs)
	if len(costs) == 3 && costs[0].err == nil && costs[1].err == nil && costs[2].err == nil {
		fmt.Fprintf(&b, "\nTaking and releasing a slot costs %.1f µs more than a token-bucket decision (a second shared-data update at stream end); "+
			"waiting in the queue costs %.1f µs more than that (the ticket, the poll from the tick that admits it, the resume), "+
			"i.e. **%.1f µs per queued request**.\n",
			(costs[1].nsPerReq-costs[0].nsPerReq)/1e3, (costs[2].nsPerReq-costs[1].nsPerReq)/1e3, (costs[2].nsPerReq-costs[0].nsPerReq)/1e3)
	}
	if tick.err == nil {
		fmt.Fprintf(&b, "\nA tick with concurrency rules and nothing waiting costs %.1f µs (%.1f host calls); the plugin ticks every 5 ms "+
			"with `max_delay` (every 100 ms without), so that is %.2f%% of one core per worker at 5 ms.\n",
			tick.nsPerReq/1e3, tick.callsPerReq, 100*tick.nsPerReq/5e6)
	}
	b.WriteString("\n**In Envoy.** ")
	if envErr != nil {
		fmt.Fprintf(&b, "failed: %s\n", oneLine(envErr.Error()))
	} else {
		b.WriteString(env + "\n")
	}
	b.WriteString("\n**Slot-leak bound.** A worker's slots are leases re-registered once per 1-second epoch; slots nobody " +
		"re-registered for a whole epoch are dropped, so the slots of a worker that vanishes are free again **at most 2 s** after it " +
		"vanished (between 1 and 2 s, depending on when in the epoch it vanished). Measured in the wazero host with a manual clock: " +
		"a VM takes 5 slots of a limit of 5 and is killed (no stream end, no tick ever again) at the given point of an epoch; another " +
		"VM probes every 10 ms until it gets all 5.\n\n")
	if leakErr != nil {
		fmt.Fprintf(&b, "failed: %s\n", oneLine(leakErr.Error()))
	} else {
		b.WriteString("| killed at (into the epoch) | slots free again after |\n|---:|---:|\n")
		worst := time.Duration(0)
		for _, l := range leaks {
			fmt.Fprintf(&b, "| %v | %v |\n", l[0], l[1])
			worst = max(worst, l[1])
		}
		fmt.Fprintf(&b, "\nWorst case measured: %v (bound: 2 s).\n", worst)
	}
	return b.String(), nil
}

// concInproc times n whole streams through the plugin. With queue, 10 slots
// are kept busy and 100 requests waiting: each step sends a new request
// (it queues), ends the oldest in flight, and ticks (the oldest waiter is
// admitted).
// timeRequests sends req to vm 500 times to warm up, then n times, and
// records the time and host calls per request (c.err: a status not 200).
func (c *concCost) timeRequests(vm *wasmhost.VM, req wasmhost.Request, n int) {
	run := func(k int) {
		for i := 0; i < k && c.err == nil; i++ {
			if r := vm.Request(req); r.Status != 200 {
				c.err = fmt.Errorf("status %d", r.Status)
			}
		}
	}
	run(500)
	vm.ResetHostCalls()
	t0 := time.Now()
	run(n)
	c.nsPerReq = float64(time.Since(t0).Nanoseconds()) / float64(n)
	c.callsPerReq = float64(vm.TotalHostCalls()) / float64(n)
}

// benchVM starts one VM of the plugin with cfg on a wazero host with a
// real clock (the in-process cost sections time whole streams through it);
// done closes the host.
func benchVM(ctx context.Context, wasm []byte, cfg string) (vm *wasmhost.VM, done func(), err error) {
	h, err := wasmhost.New(ctx, wasm, wasmhost.WithRealClock(), wasmhost.WithVMID("sluice"), wasmhost.WithLogLevel(wasmhost.LogWarn))
	if err != nil {
		return nil, nil, err
	}
	done = func() { h.Close(context.Background()) }
	if vm, err = h.NewVM(nil, []byte(cfg)); err != nil {
		done()
		return nil, nil, err
	}
	return vm, done, nil
}

func concInproc(ctx context.Context, wasm []byte, name, cfg string, n int, queue bool) concCost {
	c := concCost{name: name}
	vm, done, err := benchVM(ctx, wasm, cfg)
	if err != nil {
		c.err = err
		return c
	}
	defer done()
	req := wasmhost.HTTPRequest("POST", "shop.example", "/buy")
	req.Properties = wasmhost.Properties{"source.address": "10.1.2.3:5555"}
	req.Response = &wasmhost.Response{Status: 200}
	if !queue {
		c.timeRequests(vm, req, n)
		return c
	}
	start := func() *wasmhost.Stream {
		s, err := vm.NewStream(req.Properties)
		if err == nil {
			_, err = s.SendRequestHeaders(req.Headers, true)
		}
		if err != nil && c.err == nil {
			c.err = err
		}
		return s
	}
	var inflight, waiting []*wasmhost.Stream
	for i := 0; i < 10; i++ {
		inflight = append(inflight, start())
	}
	for i := 0; i < 100; i++ {
		waiting = append(waiting, start())
	}
	step := func() {
		waiting = append(waiting, start())
		if _, err := inflight[0].SendResponse(wasmhost.Response{Status: 200}); err != nil && c.err == nil {
			c.err = err
		}
		inflight = inflight[1:]
		if err := vm.Tick(); err != nil && c.err == nil {
			c.err = err
		}
		if waiting[0].State() != wasmhost.StreamUpstream && c.err == nil {
			c.err = fmt.Errorf("the oldest waiter was not admitted by the tick (%v)", waiting[0].State())
		}
		inflight, waiting = append(inflight, waiting[0]), waiting[1:]
	}
	for i := 0; i < 200; i++ {
		step()
	}
	vm.ResetHostCalls()
	t0 := time.Now()
	for i := 0; i < n && c.err == nil; i++ {
		step()
	}
	c.nsPerReq = float64(time.Since(t0).Nanoseconds()) / float64(n)
	c.callsPerReq = float64(vm.TotalHostCalls()) / float64(n)
	return c
}

// concTickCost times ticks with a concurrency rule and nothing waiting.
func concTickCost(ctx context.Context, wasm []byte, n int) concCost {
	c := concCost{name: "tick"}
	vm, done, err := benchVM(ctx, wasm, concQueueCfg)
	if err != nil {
		c.err = err
		return c
	}
	defer done()
	vm.ResetHostCalls()
	t0 := time.Now()
	for i := 0; i < n; i++ {
		if c.err = vm.Tick(); c.err != nil {
			return c
		}
	}
	c.nsPerReq = float64(time.Since(t0).Nanoseconds()) / float64(n)
	c.callsPerReq = float64(vm.TotalHostCalls()) / float64(n)
	return c
}

// concHold is how long the upstream of the Envoy measurement holds each
// request: a slow backend, long against the 5 ms tick that hands a freed
// slot to a waiter on another worker.
const concHold = 100 * time.Millisecond

// concEnvoy runs 100 closed-loop clients for 5 s through Envoy against a
// concurrency rule of 10 with max_delay in front of an upstream that holds
// each request concHold: ideal throughput 10/concHold.
func concEnvoy(ctx context.Context, o options) (string, error) {
	up, err := envoytest.StartUpstream()
	if err != nil {
		return "", err
	}
	defer up.Close()
	up.SetDelay(concHold)
	wasm, _ := filepath.Abs("build/sluice.wasm")
	e, err := startEnvoy(ctx, envoytest.Options{Concurrency: o.concurrency, Upstream: up.Addr(), LogLevel: "warn",
		Wasm: &envoytest.Wasm{File: wasm, Config: concQueueCfg}})
	if err != nil {
		return "", err
	}
	defer e.Stop()
	// Warm up (and let the plugin observe the hold time).
	envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Path: "/buy", Requests: 300, Concurrency: 50})
	time.Sleep(1200 * time.Millisecond)
	st0 := sluiceStats(e)
	up.ResetInFlight()
	const clients = 100
	const window = 5 * time.Second
	lctx, cancel := context.WithTimeout(ctx, window)
	res := envoytest.Load(lctx, e.URL(), envoytest.LoadOptions{Path: "/buy", Requests: 1 << 20, Concurrency: clients, Timeout: 30 * time.Second})
	cancel()
	in := up.InFlight()
	time.Sleep(1200 * time.Millisecond)
	st1 := sluiceStats(e)
	delayed := st1["rule_bench_delayed"] - st0["rule_bench_delayed"]
	waitMS := st1["rule_bench_wait_ms"] - st0["rule_bench_wait_ms"]
	ok := res.Count(200)
	// Requests still waiting when the window closes end as errors: the
	// served ones completed within the window.
	rps := float64(ok) / window.Seconds()
	meanWait := 0.0
	if delayed > 0 {
		meanWait = float64(waitMS) / float64(delayed)
	}
	ideal := 10 / concHold.Seconds()
	return fmt.Sprintf("Envoy `--concurrency %d`, `%s`, upstream holding each request %v (at most %.0f requests/s through 10 slots), "+
		"%d closed-loop clients for %v: %d served (%.0f/s, **%.0f%% of the ideal %.0f/s**); "+
		"the upstream never had more than %d at once and had 10 at once %.0f%% of the busy time; %d requests waited in the queue, "+
		"%.0f ms on average (`wait_ms / delayed`; with %d clients on 10 slots the ideal wait is about %v). "+
		"A slot freed on one worker reaches the oldest waiter at its worker's next tick (5 ms): the handoff costs a few percent of a "+
		"%v hold, more of a short one, and more on a loaded machine (see the load average above).",
		o.concurrency, concQueueCfg, concHold, ideal, clients, window, ok, rps, 100*rps/ideal, ideal,
		in.Max, 100*in.AtLeast(10), delayed, meanWait, clients, time.Duration(float64(clients-10)/10*float64(concHold)), concHold), nil
}

// concLeakBound measures, for kills at several points of an epoch, how long
// the slots of a killed VM stay held.
func concLeakBound(ctx context.Context, wasm []byte) ([][2]time.Duration, error) {
	var out [][2]time.Duration
	for _, at := range []time.Duration{10 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond, 990 * time.Millisecond} {
		clk := wasmhost.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		h, err := wasmhost.New(ctx, wasm, wasmhost.WithClock(clk), wasmhost.WithVMID("sluice"), wasmhost.WithLogLevel(wasmhost.LogWarn))
		if err != nil {
			return nil, err
		}
		vms, err := h.NewVMs(2, nil, []byte(`{"rules":[{"name":"r","algorithm":"concurrency","limit":5,"key":["path"]}]}`))
		if err != nil {
			h.Close(ctx)
			return nil, err
		}
		// A few epochs of normal life, then slots taken and the VM killed
		// at the chosen point of an epoch.
		h.AdvanceClock(3*time.Second + at)
		open := func(vm *wasmhost.VM) *wasmhost.Stream {
			s, _ := vm.NewStream(wasmhost.Properties{"source.address": "10.0.0.1:1"})
			r := wasmhost.HTTPRequest("GET", "shop.example", "/x")
			_, _ = s.SendRequestHeaders(r.Headers, true)
			return s
		}
		for i := 0; i < 5; i++ {
			open(vms[0])
		}
		_ = vms[0].Kill()
		var back time.Duration
		for step := 10 * time.Millisecond; step <= 5*time.Second; step += 10 * time.Millisecond {
			h.AdvanceClock(10 * time.Millisecond)
			var got []*wasmhost.Stream
			for i := 0; i < 5; i++ {
				if s := open(vms[1]); s.State() == wasmhost.StreamUpstream {
					got = append(got, s)
				} else {
					break
				}
			}
			for _, s := range got {
				_, _ = s.SendResponse(wasmhost.Response{Status: 200})
			}
			if len(got) == 5 {
				back = step
				break
			}
		}
		h.Close(ctx)
		if back == 0 {
			return nil, fmt.Errorf("killed at %v into an epoch: slots still held after 5 s", at)
		}
		out = append(out, [2]time.Duration{at, back})
	}
	return out, nil
}
