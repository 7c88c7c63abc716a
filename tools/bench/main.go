// Command bench measures what Sluice costs and how it holds up, on this
// machine, and writes the results to build/bench.md (and prints them).
//
//	go run ./tools/bench                       # make bench: sections envoy, inproc, gobench, fleet, conc, charge, memory, adaptive
//	go run ./tools/bench -run flood,exact -flood 1000000
//
// Sections (-run, comma-separated):
//
//	envoy    Envoy throughput and latency at a fixed concurrency: no filter,
//	         Envoy's native local_ratelimit, Sluice; admit and reject scenarios;
//	         plus, admitting, the no-op Go wasm filter and Sluice without
//	         response headers, to split Sluice's cost in Envoy
//	inproc   the plugin's per-request cost in the wazero host (internal/wasmhost)
//	gobench  go test -bench of shared/... and plugin/engine
//	fleet    three Envoys behind a front, 1,000 clients: Sluice local and global
//	         rules and Envoy's native global rate-limit filter against
//	         envoyproxy/ratelimit on Redis (calls per request, latency)
//	memory   Envoy RSS with no filter, the no-op Go filter and Sluice at
//	         --concurrency 1 and 8
//	flood    N distinct client addresses through Envoy with max_keys 100000:
//	         memory, states per MB, fairness, contention (-flood N)
//	exact    5,000 simultaneous requests from one client at Envoy concurrency 2
//	         and 4, and a 30-second overload at twice the rate
//	conc     the concurrency rule: cost per request of a slot and of the
//	         queue in-process, the queue in Envoy, the slot-leak bound
//	charge   a rule with a cost (charged after the response, or at admission
//	         from a request header): cost per request in-process beside a
//	         plain token bucket
//	probe    (only when named) single proxy-wasm operations in Envoy's V8:
//	         the probe filter (tools/bench/testdata/probe) doing one operation
//	         per request, against the no-op Go filter
//	callgrind (only when named; make bench-cost) instructions per request
//	         of Envoy under valgrind for no filter, native, the no-op Go
//	         filter, each probe operation and Sluice: the cost breakdown
//
// Each section's latest result is kept in build/bench/<section>.md, and
// build/bench.md is assembled from all of them, so running one section
// refreshes it without losing the others. Everything runs on loopback with
// bounded counts and times. Envoy comes from ENVOY_BIN or .venv (make envoy);
// build/sluice.wasm from make build.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

var sectionOrder = []string{"envoy", "inproc", "gobench", "fleet", "flood", "exact", "conc", "charge", "memory", "adaptive"}

var sectionTitles = map[string]string{
	"envoy":     "1. Envoy: throughput and latency",
	"inproc":    "2. Plugin cost per request in-process",
	"gobench":   "3. Go benchmarks",
	"fleet":     "3b. Fleet: global rules against envoyproxy/ratelimit, side by side with Envoy's native global filter",
	"flood":     "4a. Flood of distinct clients: memory, fairness, contention",
	"exact":     "4b. Exactness under contention and overload",
	"probe":     "5. Probe: single proxy-wasm operations in Envoy's V8",
	"conc":      "6. Concurrency rule: queue cost and slot-leak bound",
	"charge":    "6b. Cost charged after the response, beside a plain token bucket",
	"callgrind": "7. Cost breakdown: instructions per request in Envoy (callgrind)",
	"memory":    "8. Memory: Envoy RSS with no filter, the no-op Go filter and Sluice",
	"adaptive":  "9. Adaptive concurrency: cost and convergence",
}

// extraSections run only when named in -run and appear in the report only
// once measured.
var extraSections = []string{"probe", "callgrind"}

type options struct {
	run         string
	out         string
	conns       int
	clients     int
	duration    time.Duration
	warmup      time.Duration
	rounds      int
	concurrency int
	inprocN     int
	benchtime   string
	flood       int
	floodConns  int
	floodBase   bool
	maxKeys     int
	exact       bool
	exactConns  int
	overload    time.Duration
	probeRepeat int
	cgRequests  int
	cgWarmup    int
	cgOnly      string
	cgWasm      string
	cgBaseline  string
	cgExtra     string
	cgKeep      string
	cgParallel  int
	memReps     int
	memWasm     string
}

func main() {
	var o options
	flag.StringVar(&o.run, "run", "", "sections to run, comma-separated: "+strings.Join(append(slices.Clone(sectionOrder), extraSections...), ",")+
		" (default envoy,inproc,gobench,fleet,conc,memory; plus flood with -flood N, exact with -exact)")
	flag.StringVar(&o.out, "out", "build/bench.md", "report file (relative to the repository root)")
	flag.IntVar(&o.conns, "conns", 32, "envoy: concurrent keep-alive connections of the closed-loop generator")
	flag.IntVar(&o.clients, "clients", 256, "envoy: distinct client addresses (X-Forwarded-For) the requests rotate through")
	flag.DurationVar(&o.duration, "duration", 2500*time.Millisecond, "envoy: length of one measured run")
	flag.DurationVar(&o.warmup, "warmup", 3*time.Second, "envoy: warm-up per Envoy before the rounds")
	flag.IntVar(&o.rounds, "rounds", 5, "envoy: interleaved rounds (each runs every scenario once)")
	flag.IntVar(&o.concurrency, "concurrency", 2, "envoy and flood: Envoy --concurrency")
	flag.IntVar(&o.inprocN, "inproc-requests", 20000, "inproc: measured requests per case")
	flag.StringVar(&o.benchtime, "benchtime", "500ms", "gobench: go test -benchtime")
	flag.IntVar(&o.flood, "flood", 0, "flood: number of distinct client addresses (adds the flood section; 1000000 for the flood of `make flood`)")
	flag.IntVar(&o.floodConns, "flood-conns", 32, "flood: concurrent connections")
	flag.BoolVar(&o.floodBase, "flood-baseline", true, "flood: also flood an Envoy without the filter, to separate Envoy's own growth")
	flag.IntVar(&o.maxKeys, "max-keys", 100000, "flood: Sluice max_keys")
	flag.BoolVar(&o.exact, "exact", false, "add the exact section (exactness and overload)")
	flag.IntVar(&o.exactConns, "exact-conns", 5000, "exact: simultaneous requests (one connection each) of the burst")
	flag.DurationVar(&o.overload, "overload", 30*time.Second, "exact: length of the overload at twice the rate")
	flag.IntVar(&o.probeRepeat, "probe-repeat", 1, "probe: repeat each single operation this many times per request (> 1 leaves out the combinations and Sluice)")
	flag.IntVar(&o.cgRequests, "callgrind-requests", 3000, "callgrind: counted requests per Envoy")
	flag.IntVar(&o.cgWarmup, "callgrind-warmup", 3000, "callgrind: uncounted warm-up requests per Envoy")
	flag.StringVar(&o.cgOnly, "callgrind-only", "", "callgrind: only these variants (comma-separated keys)")
	flag.StringVar(&o.cgWasm, "callgrind-wasm", "build/sluice.wasm", "callgrind: the Sluice module to count (e.g. an older build to compare)")
	flag.StringVar(&o.cgBaseline, "callgrind-baseline", "", "callgrind: also count this older Sluice module (rows sluice-base, sluice-base-reject)")
	flag.StringVar(&o.cgExtra, "callgrind-extra", "", "callgrind: more Sluice modules counted beside the current one, as key=file.wasm,... (rows key and key-reject, always counted; key-reject=file for the rejected row alone): builds with one feature taken out price that feature")
	flag.StringVar(&o.cgKeep, "callgrind-keep", "", "callgrind: copy each Envoy's raw callgrind files into this directory (per-function counts: callgrind_annotate; docs/design/request-cost.md)")
	flag.IntVar(&o.cgParallel, "callgrind-parallel", 2, "callgrind: Envoys counted at once (counts do not depend on it)")
	flag.StringVar(&o.memWasm, "memory-wasm", "build/sluice.wasm", "memory: the Sluice module to measure (e.g. an older build)")
	flag.IntVar(&o.memReps, "memory-reps", 5, "memory: Envoys started per filter and concurrency (the table gives the medians)")
	flag.Parse()

	run := map[string]bool{}
	if o.run == "" {
		run["envoy"], run["inproc"], run["gobench"], run["fleet"], run["conc"], run["memory"], run["adaptive"] = true, true, true, true, true, true, true
	} else {
		for _, s := range strings.Split(o.run, ",") {
			s = strings.TrimSpace(s)
			if _, ok := sectionTitles[s]; !ok {
				fatalf("unknown section %q (have %s)", s, strings.Join(sectionOrder, ", "))
			}
			run[s] = true
		}
	}
	if o.flood > 0 {
		run["flood"] = true
	} else if run["flood"] {
		o.flood = 1000000
	}
	if o.exact {
		run["exact"] = true
	}

	raiseNoFile() // thousands of loopback connections; Envoy inherits the limit
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, err := envoytest.RepoRoot()
	if err != nil {
		fatalf("%v", err)
	}
	if err := os.Chdir(root); err != nil {
		fatalf("%v", err)
	}
	mach := describeMachine(ctx, root)
	progress("machine: %s, %d cores; %s; Envoy %s; load average %s", mach.CPU, mach.Cores, mach.Go, mach.Envoy, loadAvg())
	needEnvoy := run["envoy"] || run["fleet"] || run["flood"] || run["exact"] || run["probe"] || run["conc"] || run["memory"] || run["callgrind"] || run["adaptive"]
	if needEnvoy {
		if _, err := envoytest.FindEnvoy(); err != nil {
			fatalf("%v", err)
		}
		if _, err := os.Stat(filepath.Join(root, "build", "sluice.wasm")); err != nil {
			fatalf("build/sluice.wasm is missing: run make build")
		}
	}

	fragDir := filepath.Join(root, "build", "bench")
	if err := os.MkdirAll(fragDir, 0o755); err != nil {
		fatalf("%v", err)
	}
	started := time.Now()
	failed := false
	for _, name := range append(slices.Clone(sectionOrder), extraSections...) {
		if !run[name] || ctx.Err() != nil {
			continue
		}
		t0 := time.Now()
		la0 := loadAvg()
		progress("=== section %s", name)
		var body string
		var err error
		switch name {
		case "envoy":
			body, err = envoySection(ctx, o)
		case "inproc":
			body, err = inprocSection(ctx, root, o.inprocN)
		case "gobench":
			body, err = gobenchSection(ctx, root, o.benchtime)
		case "fleet":
			body, err = fleetSection(ctx, o)
		case "flood":
			body, err = floodSection(ctx, o)
		case "exact":
			body, err = exactSection(ctx, o)
		case "probe":
			body, err = probeSection(ctx, o)
		case "conc":
			body, err = concSection(ctx, root, o)
		case "charge":
			body, err = chargeSection(ctx, root, o)
		case "memory":
			body, err = memorySection(ctx, o)
		case "adaptive":
			body, err = adaptiveSection(ctx, root, o)
		case "callgrind":
			body, err = callgrindSection(ctx, o)
		}
		if err != nil {
			failed = true
			progress("section %s failed: %v", name, err)
			body = fmt.Sprintf("## %s\n\n**Failed:** %s\n", sectionTitles[name], oneLine(err.Error()))
		}
		meta := fmt.Sprintf("_Measured %s in %s by `%s`; %s, %d cores; Envoy %s; %s; commit %s; load average (1/5/15 min) %s at the start, %s at the end._\n\n",
			t0.UTC().Format("2006-01-02 15:04 MST"), time.Since(t0).Round(time.Second), commandLine(), mach.CPU, mach.Cores,
			mach.Envoy, mach.Go, mach.Commit, la0, loadAvg())
		frag := insertMeta(body, meta)
		if err := os.WriteFile(filepath.Join(fragDir, name+".md"), []byte(frag), 0o644); err != nil {
			fatalf("%v", err)
		}
	}
	report := assemble(fragDir, mach, started)
	outPath := o.out
	if !filepath.IsAbs(outPath) {
		outPath = filepath.Join(root, outPath)
	}
	if err := os.WriteFile(outPath, []byte(report), 0o644); err != nil {
		fatalf("%v", err)
	}
	fmt.Print(report)
	progress("wrote %s in %s", outPath, time.Since(started).Round(time.Second))
	if ctx.Err() != nil {
		fatalf("interrupted")
	}
	if failed {
		os.Exit(1)
	}
}

// insertMeta puts meta after the section's first line (its title).
func insertMeta(body, meta string) string {
	title, rest, _ := strings.Cut(body, "\n")
	return title + "\n\n" + meta + strings.TrimLeft(rest, "\n")
}

func assemble(dir string, m machine, now time.Time) string {
	var b strings.Builder
	b.WriteString("# Sluice benchmarks\n\n")
	fmt.Fprintf(&b, "Last written %s by `%s`. `make bench` (`go run ./tools/bench`) measures sections 1-3b, 6, 8 and 9; `make bench-cost` section 7; "+
		"`go run ./tools/bench -run charge` section 6b; `go run ./tools/bench -run flood,exact -flood 1000000` sections 4a and 4b.\n\n", now.UTC().Format("2006-01-02 15:04 MST"), commandLine())
	b.WriteString("| machine | |\n|---|---|\n")
	fmt.Fprintf(&b, "| CPU | %s |\n| cores | %d |\n| memory | %s |\n| kernel | %s |\n| Go | %s |\n| Envoy | %s |\n| commit | %s |\n\n",
		m.CPU, m.Cores, m.MemTotal, m.Kernel, m.Go, m.Envoy, m.Commit)
	b.WriteString("Every section states when and how it was last measured; a section not run this time is kept from its last run. " +
		"The machine may be shared: each section records the load average around it, and a high one means noisier, lower figures.\n\n")
	for _, name := range append(slices.Clone(sectionOrder), extraSections...) {
		frag, err := os.ReadFile(filepath.Join(dir, name+".md"))
		if err != nil && slices.Contains(extraSections, name) {
			continue
		}
		if err != nil {
			fmt.Fprintf(&b, "## %s\n\nNot measured yet.\n\n", sectionTitles[name])
			continue
		}
		b.WriteString(strings.TrimRight(string(frag), "\n"))
		b.WriteString("\n\n")
	}
	return b.String()
}

func commandLine() string {
	args := append([]string{"go run ./tools/bench"}, os.Args[1:]...)
	return strings.Join(args, " ")
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench %s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	os.Exit(1)
}
