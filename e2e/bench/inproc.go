package main

import (
	"bytes"
	"context"
	"encoding/json"
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

	"github.com/sluicehq/sluice/e2e/envoytest"
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

type inprocResult struct {
	name        string
	nsPerReq    float64
	nsSpread    [2]float64 // min, max over batches
	calls       map[string]float64
	memBefore   uint32
	memAfter    uint32
	status      map[int]int
	bytesPerReq float64 // -1: not measured
	mallocsReq  float64
	gcs         uint64
	note        string
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
	noopErr := envoytest.BuildWasm(ctx, "./e2e/bench/testdata/noop", noopPath)
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
	var results []*inprocResult
	run := func(name string, module []byte, cfg string, wantStatus int, allocs bool) {
		progress("in-process: %s (%d requests)", name, n)
		r, err := measureInproc(ctx, module, cfg, req, n, wantStatus, allocs)
		if r == nil {
			r = &inprocResult{}
		}
		r.name = name
		if err != nil {
			r.note = err.Error()
		}
		results = append(results, r)
	}
	run("Sluice, admit path", wasm, inprocAdmitCfg, 200, false)
	run("Sluice, reject path", wasm, inprocRejectCfg, 429, false)
	run("Sluice, admit path, headers none", wasm, inprocAdmitNoHeadersCfg, 200, false)
	run("Sluice, no rule matches", wasm, inprocNoMatchCfg, 200, false)
	if noopErr == nil {
		run("no-op Go filter (floor)", noop, "", 200, false)
	}
	if instrErr == nil {
		run("Sluice, admit path (instrumented copy)", instr, inprocAdmitCfg, 200, true)
		run("Sluice, reject path (instrumented copy)", instr, inprocRejectCfg, 429, true)
		run("Sluice, no rule matches (instrumented copy)", instr, inprocNoMatchCfg, 200, true)
	}

	var b strings.Builder
	b.WriteString("## 2. Plugin cost per request in-process (wazero host)\n\n")
	fmt.Fprintf(&b, "`build/sluice.wasm` (%d bytes) in `internal/wasmhost`, a proxy-wasm host on wazero %s that follows Envoy 1.40's ABI: "+
		"one VM (one worker), one rule keyed by client IP, %d requests per case after 2,000 warm-up requests, each a full stream "+
		"(`proxy_on_context_create`, request headers, upstream 200 or the plugin's local 429, response headers, `proxy_on_log`, `proxy_on_done`, `proxy_on_delete`). "+
		"Time is wall time per request, the median of 5 batches (min-max in brackets); it includes the host's own stream emulation, "+
		"which the no-op Go filter measures. wazero is not V8: absolute times differ from Envoy's, the host-call counts do not.\n\n",
		len(wasm), depVersion("github.com/tetratelabs/wazero"), n)
	b.WriteString("| case | ns/request | linear memory before → after | status |\n|---|---:|---|---|\n")
	for _, r := range results {
		if r.note != "" && r.nsPerReq == 0 {
			fmt.Fprintf(&b, "| %s | failed: %s | | |\n", r.name, oneLine(r.note))
			continue
		}
		fmt.Fprintf(&b, "| %s | %.0f [%.0f-%.0f] | %s → %s | %s |\n", r.name, r.nsPerReq, r.nsSpread[0], r.nsSpread[1],
			mib(uint64(r.memBefore)), mib(uint64(r.memAfter)), statusString(r.status))
	}
	byName := map[string]*inprocResult{}
	for _, r := range results {
		if r.nsPerReq > 0 {
			byName[r.name] = r
		}
	}
	admit, reject, floor := byName["Sluice, admit path"], byName["Sluice, reject path"], byName["no-op Go filter (floor)"]
	noHdr, noMatch := byName["Sluice, admit path, headers none"], byName["Sluice, no rule matches"]
	if admit != nil && reject != nil && noHdr != nil && noMatch != nil && floor != nil {
		fmt.Fprintf(&b, "\n**Where the time goes** (differences between the cases above; batch medians, so ±1 µs): "+
			"of the admit path's %.1f µs, %.1f µs is the floor every Go filter pays in this host; "+
			"%.1f µs is Sluice's fixed cost per stream with no rule matching (its HTTP context, reading `:path`, the response callback); "+
			"%.1f µs is the decision (client address property, shared-data get and set, the engine); "+
			"%.1f µs is writing the rate-limit headers to the response (`headers: both`, 5 `proxy_replace_header_map_value` calls). "+
			"The reject path costs %+.1f µs against the admit path (the local response, and a debug log line that is formatted and "+
			"handed to the host even when debug logging is off).\n",
			admit.nsPerReq/1e3, floor.nsPerReq/1e3, (noMatch.nsPerReq-floor.nsPerReq)/1e3, (noHdr.nsPerReq-noMatch.nsPerReq)/1e3,
			(admit.nsPerReq-noHdr.nsPerReq)/1e3, (reject.nsPerReq-admit.nsPerReq)/1e3)
	}

	// Host calls per request.
	b.WriteString("\n### Host calls per request\n\n")
	var cols []*inprocResult
	for _, r := range []*inprocResult{admit, reject, floor} {
		if r != nil && r.calls != nil {
			cols = append(cols, r)
		}
	}
	names := map[string]bool{}
	for _, r := range cols {
		for k := range r.calls {
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
	for _, r := range cols {
		b.WriteString(" " + r.name + " |")
	}
	b.WriteString("\n|---|")
	for range cols {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	totals := make([]float64, len(cols))
	for _, k := range sorted {
		b.WriteString("| `" + k + "` |")
		for i, r := range cols {
			v := r.calls[k]
			totals[i] += v
			fmt.Fprintf(&b, " %s |", trimFloat(v))
		}
		b.WriteString("\n")
	}
	b.WriteString("| **total** |")
	for _, t := range totals {
		fmt.Fprintf(&b, " **%s** |", trimFloat(t))
	}
	b.WriteString("\n\nCalls that return data (headers, properties, shared data) make the host re-enter the guest's allocator " +
		"(`proxy_on_memory_allocate`, not counted above as it is a guest export).\n")

	// Guest allocations.
	b.WriteString("\n### Bytes allocated in the guest per request\n\n")
	switch {
	case instrErr != nil:
		fmt.Fprintf(&b, "Not measured: building the instrumented copy failed: %s\n", oneLine(instrErr.Error()))
	default:
		b.WriteString("Measured exactly with the guest Go runtime's own counters (`runtime.MemStats.TotalAlloc` and `Mallocs`): " +
			"an instrumented copy of the plugin, built with `go build -overlay` from the same sources plus one file that, on " +
			"`proxy_on_tick`, logs those counters; ticks before and after the requests, minus one empty tick-to-tick interval. " +
			"This counts every allocation on the request path: the SDK's buffers for each host call that returns data, and Sluice's own.\n\n")
		b.WriteString("| case | bytes/request | allocations/request | GC cycles during the run |\n|---|---:|---:|---:|\n")
		for _, r := range results {
			if !strings.Contains(r.name, "instrumented") {
				continue
			}
			if r.bytesPerReq < 0 {
				fmt.Fprintf(&b, "| %s | n/a | n/a | %s |\n", r.name, oneLine(r.note))
				continue
			}
			fmt.Fprintf(&b, "| %s | %.1f | %.2f | %d |\n", strings.TrimSuffix(r.name, " (instrumented copy)"), r.bytesPerReq, r.mallocsReq, r.gcs)
		}
		b.WriteString("\nThe native benchmark `BenchmarkDecide/nocopy` (section 3) isolates the engine: its allocations are the " +
			"engine's own; the rest here are the proxy-wasm SDK's copies of header values, properties and shared-data values.\n")
	}
	if noopErr != nil {
		fmt.Fprintf(&b, "\nThe no-op baseline could not be built: %s\n", oneLine(noopErr.Error()))
	}
	for _, r := range results {
		if r.note != "" && r.nsPerReq != 0 {
			fmt.Fprintf(&b, "\nNote (%s): %s\n", r.name, oneLine(r.note))
		}
	}
	return b.String(), nil
}

// buildInstrumented builds ./plugin with the memstats overlay into dir.
func buildInstrumented(ctx context.Context, root, dir string) ([]byte, error) {
	src := filepath.Join(dir, "zz_sluicebench_memstats.go")
	if err := os.WriteFile(src, []byte(memstatsOverlay), 0o644); err != nil {
		return nil, err
	}
	ov, _ := json.Marshal(map[string]map[string]string{"Replace": {
		filepath.Join(root, "plugin", "zz_sluicebench_memstats.go"): src,
	}})
	ovPath := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ovPath, ov, 0o644); err != nil {
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
	return os.ReadFile(out)
}

func measureInproc(ctx context.Context, module []byte, cfg string, req wasmhost.Request, n, wantStatus int, allocs bool) (*inprocResult, error) {
	h, err := wasmhost.New(ctx, module, wasmhost.WithRealClock(), wasmhost.WithVMID("sluice"), wasmhost.WithLogLevel(wasmhost.LogWarn))
	if err != nil {
		return nil, err
	}
	defer h.Close(context.Background())
	vm, err := h.NewVM(nil, []byte(cfg))
	if err != nil {
		return nil, err
	}
	r := &inprocResult{status: map[int]int{}, bytesPerReq: -1}
	var firstErr error
	do := func(k int) {
		for i := 0; i < k; i++ {
			res := vm.Request(req)
			r.status[res.Status]++
			if firstErr == nil {
				if res.Err != nil {
					firstErr = res.Err
				} else if wantStatus != 0 && res.Status != wantStatus {
					firstErr = fmt.Errorf("status %d, want %d", res.Status, wantStatus)
				}
			}
		}
	}
	do(2000)
	r.status, firstErr = map[int]int{}, nil
	vm.ResetHostCalls()
	r.memBefore = vm.MemorySize()

	var before, after, idle0, idle1 []uint64
	if allocs {
		if idle0, err = tickStats(vm); err == nil {
			if idle1, err = tickStats(vm); err == nil {
				before, err = tickStats(vm)
			}
		}
		if err != nil {
			r.note = err.Error()
			allocs = false
		}
		vm.ResetHostCalls()
	}
	const batches = 5
	per := max(1, n/batches)
	var ns []float64
	for bi := 0; bi < batches; bi++ {
		t0 := time.Now()
		do(per)
		ns = append(ns, float64(time.Since(t0).Nanoseconds())/float64(per))
	}
	total := per * batches
	calls := vm.HostCalls()
	if allocs {
		if after, err = tickStats(vm); err != nil {
			r.note = err.Error()
		} else {
			tickBytes := float64(idle1[0] - idle0[0])
			tickMallocs := float64(idle1[1] - idle0[1])
			r.bytesPerReq = (float64(after[0]-before[0]) - tickBytes) / float64(total)
			r.mallocsReq = (float64(after[1]-before[1]) - tickMallocs) / float64(total)
			r.gcs = after[2] - before[2]
		}
	}
	r.memAfter = vm.MemorySize()
	slices.Sort(ns)
	r.nsPerReq, r.nsSpread = ns[len(ns)/2], [2]float64{ns[0], ns[len(ns)-1]}
	r.calls = map[string]float64{}
	for k, v := range calls {
		r.calls[k] = float64(v) / float64(total)
	}
	if firstErr != nil {
		return r, firstErr
	}
	if r.note != "" {
		return r, fmt.Errorf("%s", r.note)
	}
	return r, nil
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
