package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
	"github.com/sluicehq/sluice/internal/wasmhost"
)

// The in-process section runs build/sluice.wasm in internal/wasmhost (a
// proxy-wasm host on wazero that follows Envoy's semantics) and measures the
// plugin's cost per request without Envoy, the network or a load generator:
// time, host calls by function, and bytes the guest's Go runtime allocates.

const (
	inprocAdmitCfg  = `{"rules":[{"name":"bench","limit":1000000000,"window":"1h"}]}`
	inprocRejectCfg = `{"rules":[{"name":"bench","limit":1,"window":"1h"}]}`
	// The same admit path without rate-limit response headers, to show what
	// the headers cost.
	inprocAdmitNoHeadersCfg = `{"rules":[{"name":"bench","limit":1000000000,"window":"1h"}],"headers":"none"}`
	// A rule that does not match: the plugin's fixed cost per request (its
	// HTTP context, reading :path) without a decision.
	inprocNoMatchCfg = `{"rules":[{"name":"bench","match":{"path_prefix":"/nomatch"},"limit":1,"window":"1h"}]}`
)

// memstatsOverlay is added to the plugin package (go build -overlay, the
// repository is not touched) to build an instrumented copy of the plugin:
// it wraps the plugin's VM context so that every proxy_on_tick, after the
// plugin's own tick, logs the guest Go runtime's cumulative allocation
// counters. The request path is the unmodified plugin's.
const memstatsOverlay = `package main

import (
	"runtime"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

func init() { proxywasm.SetVMContext(&benchVMContext{inner: &vmContext{}}) }

type benchVMContext struct{ inner types.VMContext }

func (v *benchVMContext) OnVMStart(n int) types.OnVMStartStatus { return v.inner.OnVMStart(n) }

func (v *benchVMContext) NewPluginContext(id uint32) types.PluginContext {
	return &benchPluginContext{PluginContext: v.inner.NewPluginContext(id)}
}

type benchPluginContext struct{ types.PluginContext }

func (p *benchPluginContext) OnTick() {
	p.PluginContext.OnTick()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	proxywasm.LogWarnf("sluicebench memstats total_alloc=%d mallocs=%d num_gc=%d heap_inuse=%d", m.TotalAlloc, m.Mallocs, m.NumGC, m.HeapInuse)
}
`

var memstatsRE = regexp.MustCompile(`sluicebench memstats total_alloc=(\d+) mallocs=(\d+) num_gc=(\d+) heap_inuse=(\d+)`)

// inprocCase is one plugin and configuration in its own host and VM.
type inprocCase struct {
	name   string
	module []byte
	cfg    string
	want   int  // expected status after warm-up (0: any)
	allocs bool // instrumented copy: measure allocations, not time

	h  *wasmhost.Host
	vm *wasmhost.VM

	batches     []float64 // ns per request of each timed batch
	total       int       // timed requests
	calls       map[string]float64
	status      map[int]int
	memBefore   uint32
	memAfter    uint32
	bytesPerReq float64 // -1: not measured
	mallocsReq  float64
	gcs         uint64
	err         error
}

func (c *inprocCase) median() float64 {
	if len(c.batches) == 0 {
		return 0
	}
	return median(c.batches)
}

// do runs k requests, keeping the first unexpected outcome.
func (c *inprocCase) do(req wasmhost.Request, k int) {
	for i := 0; i < k; i++ {
		res := c.vm.Request(req)
		c.status[res.Status]++
		if c.err == nil {
			if res.Err != nil {
				c.err = res.Err
			} else if c.want != 0 && res.Status != c.want {
				c.err = fmt.Errorf("status %d, want %d", res.Status, c.want)
			}
		}
	}
}

// inprocSection measures the plugin in the wazero host.
func inprocSection(ctx context.Context, root string, n int) (string, error) {
	wasm, err := os.ReadFile(filepath.Join(root, "build", "sluice.wasm"))
	if err != nil {
		return "", fmt.Errorf("build/sluice.wasm: %w (run make build)", err)
	}
	tmp, err := os.MkdirTemp("", "sluice-bench-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)

	progress("in-process: building the no-op baseline plugin and the instrumented copy of the plugin")
	noopPath := filepath.Join(tmp, "noop.wasm")
	var noop []byte
	noopErr := envoytest.BuildWasm(ctx, "./tools/bench/testdata/noop", noopPath)
	if noopErr == nil {
		noop, noopErr = os.ReadFile(noopPath)
	}
	instr, instrErr := buildInstrumented(ctx, root, tmp)

	req := wasmhost.Request{
		Headers: wasmhost.Headers{
			{":method", "GET"}, {":path", "/products?page=2"}, {":authority", "shop.example"}, {":scheme", "http"},
			{"user-agent", "sluice-bench"}, {"accept", "*/*"}, {"x-forwarded-for", "203.0.113.7"},
			{"x-request-id", "8d3f3f4e-2b1c-4a3e-9a57-0c7d1f0f3c11"},
		},
		Properties: wasmhost.Properties{"source.address": "10.1.2.3:51234", "xds.route_name": "default"},
	}
	cases := []*inprocCase{
		{name: "Sluice, admit path", module: wasm, cfg: inprocAdmitCfg, want: 200},
		{name: "Sluice, reject path", module: wasm, cfg: inprocRejectCfg, want: 429},
		{name: "Sluice, admit path, headers none", module: wasm, cfg: inprocAdmitNoHeadersCfg, want: 200},
		{name: "Sluice, no rule matches", module: wasm, cfg: inprocNoMatchCfg, want: 200},
	}
	if noopErr == nil {
		cases = append(cases, &inprocCase{name: "no-op Go filter (floor)", module: noop, want: 200})
	}
	if instrErr == nil {
		cases = append(cases,
			&inprocCase{name: "Sluice, admit path", module: instr, cfg: inprocAdmitCfg, want: 200, allocs: true},
			&inprocCase{name: "Sluice, reject path", module: instr, cfg: inprocRejectCfg, want: 429, allocs: true},
			&inprocCase{name: "Sluice, no rule matches", module: instr, cfg: inprocNoMatchCfg, want: 200, allocs: true})
	}
	defer func() {
		for _, c := range cases {
			if c.h != nil {
				c.h.Close(context.Background())
			}
		}
	}()
	var timed []*inprocCase
	for _, c := range cases {
		c.status, c.bytesPerReq = map[int]int{}, -1
		c.h, c.err = wasmhost.New(ctx, c.module, wasmhost.WithRealClock(), wasmhost.WithVMID("sluice"), wasmhost.WithLogLevel(wasmhost.LogWarn))
		if c.err == nil {
			c.vm, c.err = c.h.NewVM(nil, []byte(c.cfg))
		}
		if c.err != nil {
			continue
		}
		// Warm-up; for the reject path it also spends the client's budget.
		c.do(req, 2000)
		c.status, c.err = map[int]int{}, nil
		c.vm.ResetHostCalls()
		c.memBefore = c.vm.MemorySize()
		if !c.allocs {
			timed = append(timed, c)
		}
	}

	// Time: interleaved rounds, every case once per round in a rotating
	// order, so that the load of a shared machine hits all cases alike.
	const rounds = 20
	batch := max(1, n/rounds)
	progress("in-process: %d rounds of %d requests for %d cases", rounds, batch, len(timed))
	for r := 0; r < rounds && ctx.Err() == nil; r++ {
		for k := range timed {
			c := timed[(k+r)%len(timed)]
			t0 := time.Now()
			c.do(req, batch)
			c.batches = append(c.batches, float64(time.Since(t0).Nanoseconds())/float64(batch))
			c.total += batch
		}
	}
	for _, c := range timed {
		c.calls = map[string]float64{}
		for k, v := range c.vm.HostCalls() {
			c.calls[k] = float64(v) / float64(max(1, c.total))
		}
		c.memAfter = c.vm.MemorySize()
	}
	// Allocations: the instrumented copies, ticks around n requests.
	for _, c := range cases {
		if !c.allocs || c.vm == nil || c.err != nil {
			continue
		}
		progress("in-process: allocations, %s (%d requests)", c.name, n)
		var idle0, idle1, before, after []uint64
		var err error
		if idle0, err = tickStats(c.vm); err == nil {
			if idle1, err = tickStats(c.vm); err == nil {
				if before, err = tickStats(c.vm); err == nil {
					c.do(req, n)
					after, err = tickStats(c.vm)
				}
			}
		}
		if err != nil {
			c.err = err
			continue
		}
		// Less an idle tick-to-tick interval (the tick's own allocations),
		// which makes a request path that allocates nothing come out a
		// hair under zero: clamped.
		c.bytesPerReq = max(0, (float64(after[0]-before[0])-float64(idle1[0]-idle0[0]))/float64(n))
		c.mallocsReq = max(0, (float64(after[1]-before[1])-float64(idle1[1]-idle0[1]))/float64(n))
		c.gcs = after[2] - before[2]
	}
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	return inprocReport(wasm, n, rounds, batch, cases, noopErr, instrErr), nil
}

func inprocReport(wasm []byte, n, rounds, batch int, cases []*inprocCase, noopErr, instrErr error) string {
	var b strings.Builder
	b.WriteString("## 2. Plugin cost per request in-process (wazero host)\n\n")
	fmt.Fprintf(&b, "`build/sluice.wasm` (%d bytes) in `internal/wasmhost`, a proxy-wasm host on wazero %s that follows Envoy 1.40's ABI: "+
		"one VM (one worker) per case, one rule keyed by client IP, 2,000 warm-up requests, then %d interleaved rounds of %d requests "+
		"per case (the order rotated every round); each request is a full stream (`proxy_on_context_create`, request headers, "+
		"upstream 200 or the plugin's local 429, response headers and body, the stream's end; the callbacks `make build` drops are skipped, as Envoy does). "+
		"Time is wall time per request: the median of the rounds, the fastest and slowest round in brackets. It includes the host's own stream "+
		"emulation, which the no-op Go filter measures. wazero is not V8: absolute times differ from Envoy's; host calls and "+
		"allocations do not.\n\n", len(wasm), depVersion("github.com/tetratelabs/wazero"), rounds, batch)
	b.WriteString("| case | ns/request | linear memory before → after | status |\n|---|---:|---|---|\n")
	byName := map[string]*inprocCase{}
	for _, c := range cases {
		if c.allocs {
			continue
		}
		if len(c.batches) == 0 {
			fmt.Fprintf(&b, "| %s | failed: %s | | |\n", c.name, oneLine(fmt.Sprint(c.err)))
			continue
		}
		byName[c.name] = c
		fmt.Fprintf(&b, "| %s | %.0f [%.0f-%.0f] | %s → %s | %s |\n", c.name, c.median(), slices.Min(c.batches), slices.Max(c.batches),
			mib(uint64(c.memBefore)), mib(uint64(c.memAfter)), statusString(c.status))
	}
	admit, reject, floor := byName["Sluice, admit path"], byName["Sluice, reject path"], byName["no-op Go filter (floor)"]
	noHdr, noMatch := byName["Sluice, admit path, headers none"], byName["Sluice, no rule matches"]
	if admit != nil && reject != nil && noHdr != nil && noMatch != nil && floor != nil {
		// The fastest batch is the least disturbed by the rest of a shared
		// machine, so the breakdown uses the minima.
		us := func(c *inprocCase) float64 { return slices.Min(c.batches) / 1e3 }
		fmt.Fprintf(&b, "\n**Where the time goes** (differences between the fastest batches of the cases above, the ones least disturbed by the rest of the machine): "+
			"of the admit path's %.1f µs, %.1f µs is the floor any Go filter pays in this host; "+
			"%.1f µs is Sluice's fixed cost per stream when no rule matches (its HTTP context, reading `:path`, the response callback); "+
			"%.1f µs is the decision (the client address property, the shared-data get and set, the engine); "+
			"%.1f µs is writing the rate-limit headers into the response (`headers: both`: %s `proxy_replace_header_map_value` calls). "+
			"The reject path differs from the admit path by %+.1f µs (a local response instead of the headers",
			us(admit), us(floor), us(noMatch)-us(floor), us(noHdr)-us(noMatch), us(admit)-us(noHdr),
			trimFloat(admit.calls["env.proxy_replace_header_map_value"]), us(reject)-us(admit))
		if l := reject.calls["env.proxy_log"]; l >= 0.5 {
			fmt.Fprintf(&b, ", and %s `proxy_log` call per rejection although the host's log level is warn: the line is formatted and handed over before the host drops it", trimFloat(l))
		}
		b.WriteString(").\n")
	}

	// Host calls per request.
	b.WriteString("\n### Host calls per request\n\n")
	var cols []*inprocCase
	for _, c := range []*inprocCase{admit, reject, noMatch, floor} {
		if c != nil && c.calls != nil {
			cols = append(cols, c)
		}
	}
	names := map[string]bool{}
	for _, c := range cols {
		for k := range c.calls {
			names[k] = true
		}
	}
	sorted := make([]string, 0, len(names))
	for k := range names {
		sorted = append(sorted, k)
	}
	sort.Slice(sorted, func(i, j int) bool {
		if admit != nil && admit.calls[sorted[i]] != admit.calls[sorted[j]] {
			return admit.calls[sorted[i]] > admit.calls[sorted[j]]
		}
		return sorted[i] < sorted[j]
	})
	b.WriteString("| host function |")
	for _, c := range cols {
		b.WriteString(" " + c.name + " |")
	}
	b.WriteString("\n|---|")
	for range cols {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	totals := make([]float64, len(cols))
	for _, k := range sorted {
		b.WriteString("| `" + k + "` |")
		for i, c := range cols {
			v := c.calls[k]
			totals[i] += v
			fmt.Fprintf(&b, " %s |", trimFloat(v))
		}
		b.WriteString("\n")
	}
	b.WriteString("| **total** |")
	for _, t := range totals {
		fmt.Fprintf(&b, " **%s** |", trimFloat(t))
	}
	b.WriteString("\n\nA call that returns data (a header, a property, a shared-data value) also makes the host call back into the guest's " +
		"allocator (`proxy_on_memory_allocate`, a guest export, not counted above) for the buffer the data is copied into.\n")

	// Guest allocations.
	b.WriteString("\n### Bytes allocated in the guest per request\n\n")
	if instrErr != nil {
		fmt.Fprintf(&b, "Not measured: building the instrumented copy failed: %s\n", oneLine(instrErr.Error()))
	} else {
		b.WriteString("Measured exactly with the guest Go runtime's own counters (`runtime.MemStats.TotalAlloc` and `Mallocs`), in an " +
			"instrumented copy of the plugin built with `go build -overlay` from the same sources plus one file that logs those counters " +
			"on `proxy_on_tick` (the request path is unchanged): ticks before and after the requests, minus one empty tick-to-tick " +
			"interval. This counts every allocation on the request path: the SDK's buffers for the host calls that return data, " +
			"its per-stream context, and Sluice's own.\n\n")
		fmt.Fprintf(&b, "| case (%d requests) | bytes/request | allocations/request | GC cycles during the run |\n|---|---:|---:|---:|\n", n)
		for _, c := range cases {
			if !c.allocs {
				continue
			}
			if c.bytesPerReq < 0 {
				fmt.Fprintf(&b, "| %s | n/a | n/a | %s |\n", c.name, oneLine(fmt.Sprint(c.err)))
				continue
			}
			fmt.Fprintf(&b, "| %s | %.1f | %.2f | %d |\n", c.name, c.bytesPerReq, c.mallocsReq, c.gcs)
		}
		b.WriteString("\nThe native `BenchmarkDecide/nocopy` (section 3) isolates the engine, whose own allocations are the target of zero; " +
			"the rest here belongs to the proxy-wasm Go SDK (a context object per stream, a fresh buffer for every header value, " +
			"property and shared-data value the host returns) and to the plugin's glue.\n")
	}
	if noopErr != nil {
		fmt.Fprintf(&b, "\nThe no-op baseline could not be built: %s\n", oneLine(noopErr.Error()))
	}
	for _, c := range cases {
		if c.err != nil && (len(c.batches) > 0 || c.bytesPerReq >= 0) {
			fmt.Fprintf(&b, "\nNote (%s): %s\n", c.name, oneLine(c.err.Error()))
		}
	}
	return b.String()
}

// buildInstrumented builds ./plugin with the memstats overlay into dir.
func buildInstrumented(ctx context.Context, root, dir string) ([]byte, error) {
	src := filepath.Join(dir, "zz_sluicebench_memstats.go")
	if err := os.WriteFile(src, []byte(memstatsOverlay), 0o644); err != nil {
		return nil, err
	}
	// The runtime overlay of make build too: wasm-edit leaves findfunctab
	// out, which only a module built with it can do without.
	ovPath, err := runtimeOverlay(ctx, filepath.Join(dir, "overlay"),
		map[string]string{filepath.Join(root, "plugin", "zz_sluicebench_memstats.go"): src})
	if err != nil {
		return nil, err
	}
	out := filepath.Join(dir, "sluice-memstats.wasm")
	cmd := exec.CommandContext(ctx, "go", "build", "-overlay", ovPath, "-trimpath", "-ldflags=-s -w", "-buildmode=c-shared", "-o", out, "./plugin")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build -overlay ./plugin: %v: %s", err, buf.String())
	}
	// The export edits of make build (its own allocator, the stream's end
	// in one callback), so the counts are those of build/sluice.wasm.
	edit := exec.CommandContext(ctx, "make", "-s", "wasm-edit", "FILE="+out)
	edit.Dir = root
	if b, err := edit.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("make wasm-edit: %v: %s", err, b)
	}
	return os.ReadFile(out)
}

// tickStats fires proxy_on_tick on the instrumented plugin and returns the
// counters it logged: total_alloc, mallocs, num_gc, heap_inuse.
func tickStats(vm *wasmhost.VM) ([]uint64, error) {
	vm.ClearLogs()
	if err := vm.Tick(); err != nil {
		return nil, err
	}
	for _, e := range vm.Logs() {
		if m := memstatsRE.FindStringSubmatch(e.Message); m != nil {
			out := make([]uint64, 4)
			for i := range out {
				out[i], _ = strconv.ParseUint(m[i+1], 10, 64)
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("the instrumented plugin logged no memstats on tick (logs: %q)", vm.LogText())
}

// depVersion returns the version of a module this program was built with.
func depVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				return d.Version
			}
		}
	}
	return ""
}

func trimFloat(v float64) string {
	if v == 0 {
		return "0"
	}
	if v < 0.005 {
		return "<0.01"
	}
	s := strconv.FormatFloat(v, 'f', 2, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

func statusString(m map[int]int) string {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d×%d", m[k], k))
	}
	return strings.Join(parts, ", ")
}

func oneLine(s string) string {
	s = strings.ReplaceAll(strings.TrimSpace(s), "\n", " ")
	s = strings.ReplaceAll(s, "|", "\\|")
	if len(s) > 400 {
		s = s[:400] + " …"
	}
	return s
}

func mib(b uint64) string { return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20)) }
