package main

import (
	"bufio"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
	"github.com/sluicehq/sluice/internal/wasmexports"
)

// The callgrind section (-run callgrind, make bench-cost) attributes Envoy's
// CPU per request by counting instructions instead of timing them: on a
// shared machine a timed difference of a few µs drowns in noise, while
// valgrind's instruction count of the same request sequence repeats to a
// fraction of a percent. Each Envoy (--concurrency 1, V8) runs under
// `valgrind --tool=callgrind` with instrumentation off while it starts and
// warms up (so V8's compilation and Go's start are not counted), then the
// same fixed sequence of requests is counted. Envoy's binary is stripped,
// so the count is split by difference: each probe variant (one proxy-wasm
// operation per request) minus the no-op Go filter prices one operation;
// Sluice minus the no-op filter minus the sum of the operations Sluice does
// is its Go-side cost (SDK, runtime, allocation and GC, engine).

// cgVariant is one Envoy counted under callgrind.
type cgVariant struct {
	key, what string
	opts      envoytest.Options
	ir        float64 // instructions per request
	byObject  map[string]float64
	status    map[int]int64
}

func callgrindSection(ctx context.Context, o options) (string, error) {
	if _, err := exec.LookPath("valgrind"); err != nil {
		return "", fmt.Errorf("valgrind is not installed (make bench-cost installs it): %w", err)
	}
	envoyBin, err := envoytest.FindEnvoy()
	if err != nil {
		return "", err
	}
	nb, err := startNoopBench(ctx, "callgrind")
	if err != nil {
		return "", err
	}
	defer nb.close()
	up, tmp, noop, probe := nb.up, nb.tmp, nb.noop, filepath.Join(nb.tmp, "probe.wasm")
	progress("callgrind: building the probe Go filter")
	if err := buildProbeWasm(ctx, probe); err != nil {
		return "", err
	}
	noopTrim, noopMin := filepath.Join(tmp, "noop-trim.wasm"), filepath.Join(tmp, "noop-min.wasm")
	if err := dropExports(noop, noopTrim, noopTrimDrop); err != nil {
		return "", err
	}
	if err := dropExports(noop, noopMin, append(noopTrimDrop, noopMinDrop...)); err != nil {
		return "", err
	}
	sluice, _ := filepath.Abs(o.cgWasm)
	base := envoytest.Options{Concurrency: 1, XFFNumTrustedHops: 1, Upstream: up.Addr(), LogLevel: "warn", StartTimeout: 10 * time.Minute}
	mk := func(key, what string, edit func(*envoytest.Options)) *cgVariant {
		op := base
		edit(&op)
		return &cgVariant{key: key, what: what, opts: op}
	}
	probeV := func(key, cfg, what string) *cgVariant {
		return mk(key, what, func(op *envoytest.Options) {
			op.Wasm = &envoytest.Wasm{File: probe, Name: "probe", VMID: "probe", Config: cfg}
		})
	}
	// Under valgrind Envoy serves only a few hundred requests a second, so
	// the reject scenario admits one request per client per hour: after the
	// warm-up every counted request is rejected.
	native := func(limit uint32, every time.Duration) *envoytest.LocalRateLimit {
		return &envoytest.LocalRateLimit{MaxTokens: limit, TokensPerFill: limit, FillInterval: every,
			PerClientIP: true, MaxDynamicDescriptors: uint32(max(1024, o.clients)), Headers: true}
	}
	// A small table (900 states, 100 shared-data keys) keeps the census of
	// client states, a per-second walk of a fifth of the table, from
	// weighing on a count that valgrind stretches over minutes; the cost of
	// a request does not depend on the table's size.
	sluiceReject := `{"rules":[{"name":"bench","limit":1,"window":"1h","burst":1}],"headers":"legacy","max_keys":900}`
	sluiceAdmit := fmt.Sprintf(`{"rules":[{"name":"bench","limit":%d,"window":"1s","burst":%d}],"headers":%%q,"max_keys":900}`, admitLimit, admitLimit)
	vs := []*cgVariant{
		mk("none", "no filter", func(*envoytest.Options) {}),
		mk("native", "native local_ratelimit, all admitted", func(op *envoytest.Options) { op.LocalRateLimit = native(admitLimit, time.Second) }),
		mk("native-reject", "native local_ratelimit, all rejected", func(op *envoytest.Options) { op.LocalRateLimit = native(1, time.Hour) }),
		mk("noop", "no-op Go filter (SDK defaults)", func(op *envoytest.Options) { op.Wasm = &envoytest.Wasm{File: noop, Name: "noop"} }),
		mk("noop-trim", "no-op Go filter without the exports Sluice drops but its stream end (proxy_on_done, proxy_on_response_body and the unused ones)", func(op *envoytest.Options) {
			op.Wasm = &envoytest.Wasm{File: noopTrim, Name: "noop"}
		}),
		mk("noop-min", "no-op Go filter exporting only proxy_on_context_create, proxy_on_request_headers, proxy_on_delete per stream", func(op *envoytest.Options) {
			op.Wasm = &envoytest.Wasm{File: noopMin, Name: "noop"}
		}),
		probeV("vmctx", "vmctx", "SetVMContext and a 1 s tick (as Sluice is wired)"),
		probeV("recover", "recover", "a deferred recover() in OnHttpRequestHeaders"),
		probeV("clock", "clock", "time.Now()"),
		probeV("property", "property", "GetProperty(source.address)"),
		probeV("shared", "shared", "GetSharedData (288 bytes) + SetSharedData"),
		probeV("resp3", "resp3", "3 ReplaceHttpResponseHeader"),
		probeV("alloc", "alloc", "a 300-byte object per request"),
		probeV("all", "vmctx,recover,clock,property,shared,resp3,alloc", "all of the above together (Sluice's host work without its engine)"),
		probeV("probe-reject", "reject", "Sluice's reject-path host work (source.address, shared get, time.Now, SendHttpResponse 429 with 4 headers)"),
		mk("sluice-nohdr", "Sluice, headers none, all admitted", func(op *envoytest.Options) {
			op.Wasm = &envoytest.Wasm{File: sluice, Config: fmt.Sprintf(sluiceAdmit, "none")}
		}),
		mk("sluice", "Sluice, headers legacy, all admitted", func(op *envoytest.Options) {
			op.Wasm = &envoytest.Wasm{File: sluice, Config: fmt.Sprintf(sluiceAdmit, "legacy")}
		}),
		mk("sluice-reject", "Sluice, headers legacy, all rejected", func(op *envoytest.Options) {
			op.Wasm = &envoytest.Wasm{File: sluice, Config: sluiceReject}
		}),
	}
	if o.cgBaseline != "" {
		// An older build of Sluice counted in the same run: the before and
		// after of a change.
		old, _ := filepath.Abs(o.cgBaseline)
		vs = append(vs,
			mk("sluice-base", "baseline build ("+filepath.Base(o.cgBaseline)+"), all admitted", func(op *envoytest.Options) {
				op.Wasm = &envoytest.Wasm{File: old, Config: fmt.Sprintf(sluiceAdmit, "legacy")}
			}),
			mk("sluice-base-reject", "baseline build ("+filepath.Base(o.cgBaseline)+"), all rejected", func(op *envoytest.Options) {
				op.Wasm = &envoytest.Wasm{File: old, Config: sluiceReject}
			}))
	}
	vs = append(vs, manyRulesVariants(o.cgOnly, sluice, mk)...) // callgrind_rules.go
	rustVs, rustNote := rustProbeVariants(ctx, o.cgOnly, mk)    // rustprobe.go
	vs = append(vs, rustVs...)
	if o.cgOnly != "" {
		keep := map[string]bool{}
		for _, k := range strings.Split(o.cgOnly, ",") {
			keep[strings.TrimSpace(k)] = true
		}
		var sel []*cgVariant
		for _, v := range vs {
			if keep[v.key] {
				sel = append(sel, v)
			}
		}
		vs = sel
	}
	vs = append(vs, extraVariants(o.cgExtra, sluiceAdmit, sluiceReject, mk)...)
	ips := make([]string, o.clients)
	for i := range ips {
		ips[i] = envoytest.ClientIP(i)
	}
	t0 := time.Now()
	// Counts do not depend on timing, so Envoys may be counted side by side.
	sem := make(chan struct{}, max(1, o.cgParallel))
	errs := make([]error, len(vs))
	var wg sync.WaitGroup
	for i, v := range vs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if ctx.Err() != nil {
				errs[i] = ctx.Err()
				return
			}
			progress("callgrind: %d/%d %s", i+1, len(vs), v.key)
			if err := countVariant(ctx, v, envoyBin, tmp, ips, o); err != nil {
				errs[i] = fmt.Errorf("%s: %w", v.key, err)
				return
			}
			progress("callgrind: %s %.0f instructions/request", v.key, v.ir)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return "", err
	}
	return callgrindReport(o, vs, time.Since(t0)) + rustReport(vs, rustNote), nil
}

// countVariant starts v's Envoy under callgrind, warms it up uncounted and
// counts o.cgRequests requests.
func countVariant(ctx context.Context, v *cgVariant, envoyBin, tmp string, ips []string, o options) error {
	out := filepath.Join(tmp, "callgrind."+v.key+".out")
	wrapper := filepath.Join(tmp, "envoy-callgrind-"+v.key+".sh")
	// --smc-check: V8 writes and patches code on the fly.
	script := fmt.Sprintf("#!/bin/sh\nexec valgrind --tool=callgrind --instr-atstart=no --smc-check=all-non-file --separate-threads=yes --dump-instr=no --callgrind-out-file=%s %s \"$@\"\n", out, envoyBin)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		return err
	}
	op := v.opts
	op.Bin = wrapper
	e, err := startEnvoy(ctx, op)
	// Another Envoy forked while this wrapper was being written may hold
	// it open for a moment (ETXTBSY): try again.
	for i := 0; err != nil && strings.Contains(err.Error(), "text file busy") && i < 5; i++ {
		time.Sleep(200 * time.Millisecond)
		e, err = startEnvoy(ctx, op)
	}
	if err != nil {
		return err
	}
	defer e.Stop()
	addr := fmt.Sprintf("127.0.0.1:%d", e.Port())
	xff := func(i int64) string { return ips[i%int64(len(ips))] }
	warm := generate(ctx, genOptions{Addr: addr, Conns: 2, Requests: int64(o.cgWarmup), XFF: xff})
	if warm.Requests != int64(o.cgWarmup) {
		return fmt.Errorf("warm-up: %d of %d requests answered (%d errors, first: %v)", warm.Requests, o.cgWarmup, warm.Errors, warm.FirstErr)
	}
	pid := strconv.Itoa(e.Pid())
	ctl := func(args ...string) error {
		b, err := exec.CommandContext(ctx, "callgrind_control", append(args, pid)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("callgrind_control %s: %v: %s", strings.Join(args, " "), err, b)
		}
		return nil
	}
	if err := ctl("-z"); err != nil {
		return err
	}
	if err := ctl("-i", "on"); err != nil {
		return err
	}
	t1 := time.Now()
	res := generate(ctx, genOptions{Addr: addr, Conns: 2, Requests: int64(o.cgRequests), XFF: xff})
	busy := time.Since(t1)
	if err := ctl("-d"); err != nil { // part 1: the requests
		return err
	}
	// Part 2: the same Envoy idle, to subtract what runs by the clock
	// (ticks, the census of client states, stats flushes): under valgrind
	// a request takes ~50 times longer, which would inflate per-second work
	// ~50 times per request.
	idle := min(max(busy/2, 5*time.Second), 20*time.Second)
	t2 := time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(idle):
	}
	idle = time.Since(t2)
	if err := ctl("-d"); err != nil {
		return err
	}
	if err := ctl("-i", "off"); err != nil {
		return err
	}
	if res.Requests != int64(o.cgRequests) || res.Errors > 0 {
		return fmt.Errorf("%d of %d requests answered (%d errors, first: %v)", res.Requests, o.cgRequests, res.Errors, res.FirstErr)
	}
	want := 200
	if strings.HasSuffix(v.key, "-reject") {
		want = 429
	}
	if res.Status[want] != res.Requests {
		return fmt.Errorf("expected every counted request to answer %d, got %v", want, res.Status)
	}
	if o.cgKeep != "" {
		if err := keepFiles(out, o.cgKeep); err != nil {
			return err
		}
	}
	img, err := envoyImage(envoyBin)
	if err != nil {
		return err
	}
	objs, err := workerThreadCost(out, busy.Seconds()/idle.Seconds(), img)
	if err != nil {
		return err
	}
	v.byObject = map[string]float64{}
	v.ir = 0
	for ob, n := range objs {
		v.byObject[ob] = n / float64(res.Requests)
		v.ir += n / float64(res.Requests)
	}
	v.status = res.Status
	return nil
}

// keepFiles copies the callgrind files of out (one per thread and dump)
// into dir.
func keepFiles(out, dir string) error {
	files, _ := filepath.Glob(out + "*")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// cgDump is one thread's counts in one callgrind dump.
type cgDump struct {
	part, thread int
	objs         map[string]int64
}

// workerThreadCost returns, by object, the instructions of Envoy's worker
// thread (--separate-threads writes a file per thread and dump) over the
// requests (dump part 1), minus scale times its idle counts (part 2) for
// the work that runs by the clock. The worker is the thread that ran the
// most code of Envoy's binary among those that ran V8-compiled code (with
// a wasm filter; otherwise among all threads): V8's background compiler
// threads run no compiled wasm, and their tier-up work lands whenever the
// slowed-down scheduler lets it, which would make the count unrepeatable.
func workerThreadCost(out string, scale float64, img addrRange) (map[string]float64, error) {
	files, _ := filepath.Glob(out + "*")
	var dumps []cgDump
	for _, f := range files {
		d, err := callgrindObjects(f, img)
		if err != nil {
			return nil, err
		}
		dumps = append(dumps, d)
	}
	// Net counts per thread: the requests minus the idle rate.
	net := map[int]map[string]float64{}
	for _, d := range dumps {
		f := 1.0
		switch d.part {
		case 1:
		case 2:
			f = -scale
		default:
			continue
		}
		m := net[d.thread]
		if m == nil {
			m = map[string]float64{}
			net[d.thread] = m
		}
		for ob, n := range d.objs {
			m[ob] += f * float64(n)
		}
	}
	worker := pickWorker(net)
	if worker == nil {
		return nil, fmt.Errorf("no callgrind dump of the requests in %s*", out)
	}
	return worker, nil
}

// pickWorker returns the counts (by object) of Envoy's worker among the
// threads' net counts: the thread that ran the most code of Envoy's
// binary among those that ran V8-compiled code, or among all threads when
// none did (a filter without wasm). nil when there is no thread.
func pickWorker(net map[int]map[string]float64) map[string]float64 {
	sum := func(m map[string]float64, group string) float64 {
		var n float64
		for ob, c := range m {
			if objectGroup(ob) == group {
				n += c
			}
		}
		return n
	}
	// Ran V8-compiled code: more of it than a thousandth of the busiest
	// thread's Envoy code. Envoy's main thread runs a few hundred
	// instructions of code outside any file in some runs, with no wasm
	// filter too, and the worker of a filter without wasm would be left
	// out for it (a no-filter row of 75 instructions per request); the
	// Rust no-op filter's worker runs 0.65% of its Envoy code in V8's.
	var maxEnvoy float64
	for _, m := range net {
		maxEnvoy = max(maxEnvoy, sum(m, "envoy"))
	}
	ranJIT := func(m map[string]float64) bool { return sum(m, "jit") > maxEnvoy/1000 }
	anyJIT := false
	for _, m := range net {
		anyJIT = anyJIT || ranJIT(m)
	}
	var worker map[string]float64
	var best float64
	for _, m := range net {
		if anyJIT && !ranJIT(m) {
			continue
		}
		if n := sum(m, "envoy"); worker == nil || n > best {
			worker, best = m, n
		}
	}
	return worker
}

// callgrindObjects sums the self cost (instructions) of every function in
// one callgrind dump by the object it belongs to: the Envoy binary (Envoy,
// V8's runtime and the proxy-wasm host), the libraries, and code outside
// any file, which is what V8 compiled at run time: the wasm module (the Go
// code) and V8's trampolines between wasm and C++.
func callgrindObjects(f string, img addrRange) (cgDump, error) {
	sums := map[string]int64{}
	d := cgDump{objs: sums}
	{
		fh, err := os.Open(f)
		if err != nil {
			return d, err
		}
		names := map[string]string{} // "(n)" -> object name
		fns := map[string]string{}   // "(n)" -> function name
		cur, obj := "", ""
		skipNext := false
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if line == "" {
				continue
			}
			c := line[0]
			if c >= '0' && c <= '9' || c == '+' || c == '-' || c == '*' {
				if skipNext {
					skipNext = false
					continue
				}
				fs := strings.Fields(line)
				if len(fs) >= 2 {
					if n, err := strconv.ParseInt(fs[1], 10, 64); err == nil {
						sums[cur] += n
					}
				}
				continue
			}
			if rest, ok := strings.CutPrefix(line, "part:"); ok {
				d.part, _ = strconv.Atoi(strings.TrimSpace(rest))
			} else if rest, ok := strings.CutPrefix(line, "thread:"); ok {
				d.thread, _ = strconv.Atoi(strings.TrimSpace(rest))
			} else if rest, ok := strings.CutPrefix(line, "ob="); ok {
				obj = objName(names, rest)
				cur = obj
			} else if rest, ok := strings.CutPrefix(line, "cob="); ok {
				objName(names, rest) // defines the name for later references
			} else if rest, ok := strings.CutPrefix(line, "fn="); ok {
				cur = costObject(obj, objName(fns, rest), img)
			} else if rest, ok := strings.CutPrefix(line, "cfn="); ok {
				objName(fns, rest)
			} else if strings.HasPrefix(line, "calls=") {
				skipNext = true // the next cost line is the call's inclusive cost
			}
		}
		fh.Close()
	}
	return d, nil
}

// envoyAllocator is the object the report files Envoy's allocator under.
// tcmalloc is in the envoy binary's own ELF section (google_malloc), which
// callgrind maps to no object ("???"), as it does V8's generated code; a
// "???" function inside the binary's loaded image is the binary's.
const envoyAllocator = "envoy's allocator (google_malloc: no object to callgrind)"

// addrRange is the envoy binary's image as valgrind loads it.
type addrRange struct{ lo, hi uint64 }

// valgrindPIEBase is where valgrind loads a position-independent
// executable (google_malloc's runtime addresses are its section's plus
// this; V8's code lies elsewhere: 0xa5_9784_6000 and 0x19b3_dbfb_8000 in
// two runs).
const valgrindPIEBase = 0x108000

// envoyImage returns the range of the envoy binary bin's loaded segments
// under valgrind.
func envoyImage(bin string) (addrRange, error) {
	f, err := elf.Open(bin)
	if err != nil {
		return addrRange{}, err
	}
	defer f.Close()
	var base uint64
	if f.Type == elf.ET_DYN {
		base = valgrindPIEBase
	}
	r := addrRange{lo: ^uint64(0)}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			r.lo, r.hi = min(r.lo, base+p.Vaddr), max(r.hi, base+p.Vaddr+p.Memsz)
		}
	}
	return r, nil
}

// costObject is the object the costs of function fn of object ob count
// under: ob, or envoyAllocator for the binary's code callgrind gives no
// object.
func costObject(ob, fn string, img addrRange) string {
	if !strings.HasPrefix(ob, "???") {
		return ob
	}
	if a, err := strconv.ParseUint(strings.TrimPrefix(strings.SplitN(fn, "'", 2)[0], "0x"), 16, 64); err == nil && a >= img.lo && a < img.hi {
		return envoyAllocator
	}
	return ob
}

// objName resolves callgrind's name compression: "(n) name" defines n,
// "(n)" refers to it.
func objName(names map[string]string, s string) string {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "(") {
		if i := strings.IndexByte(s, ')'); i > 0 {
			id, rest := s[:i+1], strings.TrimSpace(s[i+1:])
			if rest != "" {
				names[id] = rest
				return rest
			}
			return names[id]
		}
	}
	return s
}

// interplay says how the parts priced alone compare with all of them done
// together by the probe filter.
func interplay(by map[string]*cgVariant) string {
	all, noop := by["all"], by["noop"]
	if all == nil || noop == nil {
		return "no \"all\" probe counted"
	}
	return fmt.Sprintf("the probe doing all of them at once, a 300-byte allocation included, costs %.1f k over the no-op", (all.ir-noop.ir)/1000)
}

// objectGroup names the part of the process an object is.
func objectGroup(ob string) string {
	switch {
	case ob == "" || ob == "???" || strings.HasPrefix(ob, "???"):
		return "jit"
	case strings.Contains(ob, "envoy"):
		return "envoy"
	default:
		return "libs"
	}
}

func groupCosts(v *cgVariant) (jit, envoy, libs float64) {
	for ob, n := range v.byObject {
		switch objectGroup(ob) {
		case "jit":
			jit += n
		case "envoy":
			envoy += n
		default:
			libs += n
		}
	}
	return
}

func callgrindReport(o options, vs []*cgVariant, took time.Duration) string {
	by := map[string]*cgVariant{}
	for _, v := range vs {
		by[v.key] = v
	}
	k := func(n float64) string { return fmt.Sprintf("%.1f k", n/1000) }
	diff := func(a, b string) (float64, bool) {
		x, y := by[a], by[b]
		if x == nil || y == nil {
			return 0, false
		}
		return x.ir - y.ir, true
	}
	var b strings.Builder
	b.WriteString("## 7. Cost breakdown: instructions per request in Envoy (callgrind)\n\n")
	b.WriteString("| variant | what it does per request | instructions/request | minus no filter | minus no-op Go filter | in V8-compiled code (wasm, Go) | in Envoy's binary (Envoy, its allocator, V8 runtime, proxy-wasm host) | in libraries (libc, kernel entry) |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, v := range vs {
		dn, okN := diff(v.key, "none")
		dp, okP := diff(v.key, "noop")
		c1, c2 := "", ""
		if okN {
			c1 = fmt.Sprintf("%+.1f k", dn/1000)
		}
		if okP && v.key != "none" && !strings.HasPrefix(v.key, "native") {
			c2 = fmt.Sprintf("%+.1f k", dp/1000)
		}
		jit, env, libs := groupCosts(v)
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", v.key, v.what, k(v.ir), c1, c2, k(jit), k(env), k(libs))
	}
	// Sluice's admit cost split into the host operations it does and the rest.
	if s, ok := diff("sluice", "noop"); ok {
		b.WriteString("\n**Sluice's admit cost over the no-op Go filter, split** (each operation priced by its probe variant minus the no-op filter):\n\n")
		b.WriteString("| part | instructions/request | share |\n|---|---:|---:|\n")
		var ops float64
		for _, p := range []struct{ key, what string }{
			{"vmctx", "VM context and tick wiring"},
			{"recover", "deferred recover()"},
			{"clock", "time.Now()"},
			{"property", "GetProperty(source.address)"},
			{"shared", "GetSharedData + SetSharedData (288-byte value)"},
			{"resp3", "3 response header calls"},
		} {
			d, ok := diff(p.key, "noop")
			if !ok {
				continue
			}
			ops += d
			fmt.Fprintf(&b, "| %s | %s | %.0f%% |\n", p.what, k(d), 100*d/s)
		}
		fmt.Fprintf(&b, "| the rest: Sluice's engine and glue, and how the parts interact (%s) | %s | %.0f%% |\n", interplay(by), k(s-ops), 100*(s-ops)/s)
		fmt.Fprintf(&b, "| **total** | **%s** | 100%% |\n", k(s))
	}
	if nv, ok := by["none"]; ok {
		fmt.Fprintf(&b, "\nFor scale: Envoy with no filter runs %s instructions per request (proxying included); ", k(nv.ir))
		if n, ok := by["native"]; ok {
			if s, ok := by["sluice"]; ok {
				fmt.Fprintf(&b, "the instruction-count ratio native/Sluice is %.2f admitted", n.ir/s.ir)
			}
			if nr, ok := by["native-reject"]; ok {
				if sr, ok := by["sluice-reject"]; ok {
					fmt.Fprintf(&b, ", %.2f rejected", nr.ir/sr.ir)
				}
			}
			b.WriteString(" (throughput ratios also depend on the memory and cache behaviour that instruction counts do not see)")
		}
		b.WriteString(".\n")
	}
	fmt.Fprintf(&b, "\n**Method.** Each Envoy (`--concurrency 1`, V8) runs under `valgrind --tool=callgrind --instr-atstart=no "+
		"--smc-check=all-non-file --separate-threads=yes`; it is warmed up with %d requests uncounted (V8's compilation tiers, "+
		"Go's heap), then `callgrind_control -i on` counts the instructions of the next %d requests (2 keep-alive connections, "+
		"%d client addresses in X-Forwarded-For) and of an idle interval after them. The figures are the worker thread's "+
		"(the thread that ran most of Envoy's code among those that ran wasm code; V8's background compiler threads are left out, "+
		"their tier-up work lands whenever valgrind's scheduler lets it) minus its idle rate times the requests' duration "+
		"(ticks, stats flushes and the census run by the clock, which valgrind stretches ~50 times per request). "+
		"Sluice runs with `max_keys: 900` here, which does not change a request's cost. Instruction counts do not depend on "+
		"the machine's load, so Envoys were counted %d at a time (%v in all). "+
		"Kernel time (sockets) is not counted, so instruction ratios are not throughput ratios. "+
		"Repeat with `make bench-cost` (`go run ./tools/bench -run callgrind`; `-callgrind-only sluice,noop` for a subset, "+
		"`-callgrind-baseline old.wasm` to count an older build beside the current one).\n",
		o.cgWarmup, o.cgRequests, o.clients, o.cgParallel, took.Round(time.Second))
	return b.String()
}

// The exports dropped from the no-op filter for the noop-trim and noop-min
// rows: noop - noop-trim is the price of proxy_on_done and
// proxy_on_response_body (those of them Envoy calls for a GET; Sluice exports
// neither), noop-trim - noop-min that of two more callbacks
// (proxy_on_response_headers, proxy_on_log).
var (
	noopTrimDrop = []string{"proxy_on_new_connection", "proxy_on_downstream_data", "proxy_on_downstream_connection_close",
		"proxy_on_upstream_data", "proxy_on_upstream_connection_close", "proxy_on_request_body", "proxy_on_request_trailers",
		"proxy_on_response_body", "proxy_on_response_trailers", "proxy_on_queue_ready", "proxy_on_done"}
	noopMinDrop = []string{"proxy_on_response_headers", "proxy_on_log"}
)

// dropExports writes in to out without the named exports.
func dropExports(in, out string, drop []string) error {
	mod, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	mod, err = wasmexports.Edit(mod, drop, nil)
	if err != nil {
		return err
	}
	return os.WriteFile(out, mod, 0o644)
}

// extraVariants are the modules of -callgrind-extra (key=file,...), each
// counted admitted (row key) and rejected (row key-reject) with the
// benchmark's own configurations: a build with one feature taken out
// prices that feature, in the same run as the current build.
func extraVariants(spec, admitCfg, rejectCfg string, mk func(key, what string, edit func(*envoytest.Options)) *cgVariant) []*cgVariant {
	var vs []*cgVariant
	for _, kv := range strings.Split(spec, ",") {
		key, file, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			continue
		}
		abs, _ := filepath.Abs(file)
		// key-reject=file counts only the rejected row.
		if k, ok := strings.CutSuffix(key, "-reject"); ok {
			key = k
		} else {
			vs = append(vs, mk(key, filepath.Base(file)+", all admitted", func(op *envoytest.Options) {
				op.Wasm = &envoytest.Wasm{File: abs, Config: fmt.Sprintf(admitCfg, "legacy")}
			}))
		}
		vs = append(vs, mk(key+"-reject", filepath.Base(file)+", all rejected", func(op *envoytest.Options) {
			op.Wasm = &envoytest.Wasm{File: abs, Config: rejectCfg}
		}))
	}
	return vs
}
