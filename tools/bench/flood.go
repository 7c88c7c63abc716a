package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/plugin/engine"
)

// The flood section: N distinct client addresses, one request
// each, through Envoy with xff_num_trusted_hops: 1, against Sluice with
// max_keys and against the same Envoy without the filter, to tell the
// memory Sluice keeps from Envoy's own. A victim that spent its budget
// before the flood probes once a second during it.

const (
	floodLimit = 5
	victimIP   = "192.0.2.1" // TEST-NET-1, outside the flood's ranges
	warmupN    = 20000
)

func floodConfig(maxKeys int) string {
	return fmt.Sprintf(`{"rules":[{"name":"flood","limit":%d,"window":"1h"}],"max_keys":%d}`, floodLimit, maxKeys)
}

type memSample struct {
	done      int64
	at        time.Duration
	rss, heap uint64
}

type floodRun struct {
	name           string
	sluice         bool
	rss0, rss1     uint64
	heap0, heap1   uint64
	samples        []memSample
	res            *genResult
	victimBefore   map[int]int
	victimDuring   map[int]int
	victimAfter    map[int]int
	stats0, stats1 map[string]uint64
}

func floodSection(ctx context.Context, o options) (string, error) {
	up, err := startUpstream()
	if err != nil {
		return "", err
	}
	defer up.Close()
	wasm, _ := filepath.Abs("build/sluice.wasm")
	var runs []*floodRun
	if o.floodBase {
		r, err := floodOnce(ctx, o, up, "no filter", nil)
		if err != nil {
			return "", err
		}
		runs = append(runs, r)
	}
	r, err := floodOnce(ctx, o, up, "Sluice", &envoytest.Wasm{File: wasm, Config: floodConfig(o.maxKeys)})
	if err != nil {
		return "", err
	}
	runs = append(runs, r)
	return floodReport(o, runs), nil
}

func floodOnce(ctx context.Context, o options, up *leanUpstream, name string, w *envoytest.Wasm) (*floodRun, error) {
	progress("flood: starting Envoy (%s)", name)
	e, err := startEnvoy(ctx, envoytest.Options{
		Concurrency: o.concurrency, XFFNumTrustedHops: 1, Upstream: up.Addr(), LogLevel: "warn", Wasm: w,
	})
	if err != nil {
		return nil, err
	}
	defer e.Stop()
	addr := fmt.Sprintf("127.0.0.1:%d", e.Port())
	run := &floodRun{name: name, sluice: w != nil}

	// Warm-up: Envoy's buffers, connection pools and the wasm VMs reach a
	// steady size, from 256 addresses of TEST-NET-3 (not the flood's).
	progress("flood(%s): warm-up, %d requests from 256 addresses", name, warmupN)
	generate(ctx, genOptions{Addr: addr, Conns: o.floodConns, Requests: warmupN,
		XFF: func(i int64) string { return fmt.Sprintf("203.0.113.%d", i%256) }})
	time.Sleep(1500 * time.Millisecond)
	if run.rss0, err = e.ResidentMemory(); err != nil {
		return nil, err
	}
	run.heap0 = heapAllocated(e)

	victim := &genWorker{addr: addr, status: map[int]int64{}}
	defer victim.close()
	probe := func(n int) map[int]int {
		m := map[int]int{}
		for i := 0; i < n; i++ {
			code, err := victim.do("/", victimIP)
			if err != nil {
				victim.close()
				m[0]++
				continue
			}
			m[code]++
		}
		return m
	}
	run.victimBefore = probe(floodLimit + 3)
	time.Sleep(1100 * time.Millisecond) // let the victim's decisions reach the stats
	run.stats0 = sluiceStats(e)

	progress("flood(%s): %d distinct client addresses, %d connections", name, o.flood, o.floodConns)
	var done atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	run.victimDuring = map[int]int{}
	start := time.Now()
	wg.Add(1)
	go func() { // memory at every tenth of the flood, the victim every second
		defer wg.Done()
		step := max(1, int64(o.flood)/10)
		nextMark := step
		lastProbe := time.Now()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if d := done.Load(); d >= nextMark {
				rss, _ := e.ResidentMemory()
				s := memSample{done: d, at: time.Since(start), rss: rss, heap: heapAllocated(e)}
				run.samples = append(run.samples, s)
				progress("flood(%s): %7d clients in %5.1fs  RSS %s (%+.1f MiB)", name, d, s.at.Seconds(), mib(rss), float64(int64(rss)-int64(run.rss0))/(1<<20))
				for nextMark <= d {
					nextMark += step
				}
			}
			if time.Since(lastProbe) >= time.Second {
				lastProbe = time.Now()
				for k, v := range probe(1) {
					run.victimDuring[k] += v
				}
			}
		}
	}()
	run.res = generate(ctx, genOptions{Addr: addr, Conns: o.floodConns, Requests: int64(o.flood), Progress: &done,
		XFF: func(i int64) string { return envoytest.ClientIP(int(i)) }})
	close(stop)
	wg.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	run.victimAfter = probe(3)
	time.Sleep(1500 * time.Millisecond) // the plugin publishes its counters once a second
	run.rss1, _ = e.ResidentMemory()
	run.heap1 = heapAllocated(e)
	run.stats1 = sluiceStats(e)
	progress("flood(%s): done: %d requests in %v (%.0f/s), status %v, %d errors; RSS %s -> %s",
		name, run.res.Requests, run.res.Elapsed.Round(time.Millisecond), run.res.RPS(), run.res.Status, run.res.Errors, mib(run.rss0), mib(run.rss1))
	return run, nil
}

// heapAllocated returns the bytes tcmalloc says Envoy's heap has in use
// (admin /memory "allocated"), 0 if unknown.
func heapAllocated(e *envoytest.Envoy) uint64 {
	m, err := e.Memory()
	if err != nil {
		return 0
	}
	return m["allocated"]
}

func delta(a, b uint64) float64 { return float64(int64(b) - int64(a)) }

func mb(bytes float64) string { return fmt.Sprintf("%+.2f MiB", bytes/(1<<20)) }

func floodReport(o options, runs []*floodRun) string {
	var b strings.Builder
	b.WriteString("## 4a. Flood of distinct clients: memory, fairness, contention\n\n")
	var base, sl *floodRun
	for _, r := range runs {
		if r.sluice {
			sl = r
		} else {
			base = r
		}
	}
	// The table the plugin builds for this configuration: one rule, its
	// share is max_keys (buckets of 8 slots and its overflow state).
	cfg, err := config.Parse([]byte(floodConfig(o.maxKeys)))
	if err != nil {
		return "invalid flood configuration: " + err.Error()
	}
	table := engine.NewTable(nil, engine.Regions(cfg))
	buckets, capacity := table.Buckets(), table.Capacity()
	lastKey, _, _ := table.Key(buckets - 1)
	keyLen := len(lastKey)
	payload := float64(buckets) * float64(engine.BucketSize+keyLen)

	fmt.Fprintf(&b, "**%d distinct client addresses**, one request each, through Envoy `--concurrency %d` with `xff_num_trusted_hops: 1` "+
		"(each request's X-Forwarded-For is a new address), %d keep-alive connections in a closed loop; Sluice configured with "+
		"`max_keys: %d` and one rule of %d requests per hour per client (`%s`), so that every state stays active "+
		"for the whole flood: the worst case for the table.\n\n", o.flood, o.concurrency, o.floodConns, o.maxKeys, floodLimit, floodConfig(o.maxKeys))

	b.WriteString("| | no filter | Sluice |\n|---|---:|---:|\n")
	cell := func(f func(r *floodRun) string) string {
		bs, ss := "not run", "not run"
		if base != nil {
			bs = f(base)
		}
		if sl != nil {
			ss = f(sl)
		}
		return "| " + bs + " | " + ss + " |"
	}
	fmt.Fprintf(&b, "| time for the flood %s\n", cell(func(r *floodRun) string {
		return fmt.Sprintf("%.1f s (%.0f req/s)", r.res.Elapsed.Seconds(), r.res.RPS())
	}))
	fmt.Fprintf(&b, "| responses (a 429 is answered by the filter, without the upstream) %s\n", cell(func(r *floodRun) string { return statusString64(r.res.Status, r.res.Errors) }))
	fmt.Fprintf(&b, "| Envoy RSS before → after %s\n", cell(func(r *floodRun) string {
		return fmt.Sprintf("%s → %s (%s)", mib(r.rss0), mib(r.rss1), mb(delta(r.rss0, r.rss1)))
	}))
	fmt.Fprintf(&b, "| Envoy heap in use (tcmalloc) before → after %s\n", cell(func(r *floodRun) string {
		return fmt.Sprintf("%s → %s (%s)", mib(r.heap0), mib(r.heap1), mb(delta(r.heap0, r.heap1)))
	}))
	b.WriteString("\nEnvoy's memory during the flood (clients so far: RSS / heap in use, change since before the flood):\n\n")
	b.WriteString("| clients | no filter | Sluice |\n|---:|---:|---:|\n")
	n := 0
	for _, r := range runs {
		n = max(n, len(r.samples))
	}
	for i := 0; i < n; i++ {
		var row [2]string
		var done int64
		for _, r := range runs {
			if i >= len(r.samples) {
				continue
			}
			s := r.samples[i]
			done = max(done, s.done)
			v := fmt.Sprintf("%s (%s) / %s (%s) at %.0fs", mib(s.rss), mb(delta(r.rss0, s.rss)), mib(s.heap), mb(delta(r.heap0, s.heap)), s.at.Seconds())
			if r.sluice {
				row[1] = v
			} else {
				row[0] = v
			}
		}
		fmt.Fprintf(&b, "| ~%d | %s | %s |\n", done, row[0], row[1])
	}

	if sl != nil {
		growth := delta(sl.rss0, sl.rss1)
		heapGrowth := delta(sl.heap0, sl.heap1)
		own, ownHeap := growth, heapGrowth
		if base != nil {
			own -= delta(base.rss0, base.rss1)
			ownHeap -= delta(base.heap0, base.heap1)
		}
		b.WriteString("\n**Memory per state.** ")
		fmt.Fprintf(&b, "The table has %d shared-data keys (buckets) of %d bytes and one overflow state: %d states (≤ max_keys), "+
			"%d bytes per slot; with the keys (%d bytes) that is %.2f MiB of payload, %.0f states per MB (MiB) before Envoy's per-key overhead. ",
			buckets, engine.BucketSize, capacity, engine.BucketSize/engine.SlotsPerBucket, keyLen, payload/(1<<20), float64(capacity)/(payload/(1<<20)))
		if base != nil {
			fmt.Fprintf(&b, "Measured: Envoy's RSS grew %s with Sluice and %s without a filter under the same flood; the difference, "+
				"**%s, is what Sluice keeps** (the table in shared data, plus any growth of the wasm VMs' linear memory), "+
				"which makes **%.0f states per MB** (MiB: %d states / %.2f MiB). Envoy's heap in use (tcmalloc's `allocated`, which excludes "+
				"the V8 heaps and pages kept free) grew %s more with Sluice: %.0f states per MB by that measure.",
				mb(growth), mb(delta(base.rss0, base.rss1)), mb(own), float64(capacity)/(own/(1<<20)), capacity, own/(1<<20),
				mb(ownHeap), float64(capacity)/(ownHeap/(1<<20)))
		} else {
			fmt.Fprintf(&b, "Measured: Envoy's RSS grew %s under the flood (no baseline run to subtract Envoy's own growth): "+
				"at least %.0f states per MB (MiB).", mb(growth), float64(capacity)/(growth/(1<<20)))
		}
		b.WriteString(" The table is filled completely: with 1h windows, no state recovers during the flood. After the table is full, " +
			"memory stays flat whatever the number of addresses (the samples above). nginx's limit_req fits about 8,000 states per MB.")
		if v, ok := sl.stats1["table_active_states"]; ok {
			fmt.Fprintf(&b, " The plugin's own census (gauge `sluice.table.active_states`) counted %d active states after the flood.", v)
		}
		if base != nil {
			fmt.Fprintf(&b, " Apart from the table, loading Sluice has a fixed cost that does not grow with clients: after the same warm-up, "+
				"Envoy's RSS was %s with Sluice and %s without a filter (%s: the V8 wasm VMs, one per worker plus the main thread's, "+
				"each with its own copy of the Go runtime and heap).", mib(sl.rss0), mib(base.rss0), mb(delta(base.rss0, sl.rss0)))
		}
		b.WriteString("\n\n")

		st := func(k string) uint64 { return sl.stats1[k] - sl.stats0[k] }
		allowed, rejected := st("rule_flood_allowed"), st("rule_flood_rejected")
		total := float64(sl.res.Requests)
		b.WriteString("**Fairness.** ")
		fmt.Fprintf(&b, "A victim (%s) spent its budget before the flood (%s of %d requests); during the flood it probed once a second: %s; "+
			"after the flood: %s. ", victimIP, statusMap(sl.victimBefore), floodLimit+3, statusMap(sl.victimDuring), statusMap(sl.victimAfter))
		if sl.victimDuring[200] == 0 && sl.victimAfter[200] == 0 {
			b.WriteString("**It stayed limited**: flooding new addresses did not reset its state.")
		} else {
			b.WriteString("**It was admitted again: its spent budget was reset.**")
		}
		fmt.Fprintf(&b, " The flood's clients (and the victim's probes during and after it): %d admitted (own slot, or the rule's shared overflow state while its budget lasted), %d rejected; "+
			"decisions on the overflow state %d, with no state at all (decided by on_error) %d.\n\n",
			allowed, rejected, st("table_overflow"), st("table_full"))
		b.WriteString("**Contention during the flood.** ")
		fmt.Fprintf(&b, "CAS retries %d (%.5f per request), retries exhausted %d, on_error decisions %d (allowed %d, denied %d), shared-data errors %d.\n",
			st("cas_retries"), float64(st("cas_retries"))/total, st("cas_exhausted"), st("on_error_allowed")+st("on_error_denied"),
			st("on_error_allowed"), st("on_error_denied"), st("shared_data_errors"))
	}
	fmt.Fprintf(&b, "\n**Method.** Each Envoy first serves %d requests from 256 other addresses (its buffers, connection pools and wasm VMs "+
		"reach a steady size), then its resident set (VmRSS, /proc) and tcmalloc's heap in use (admin `/memory`) are read, the flood runs, "+
		"and they are read again 1.5 s after it. The no-filter Envoy gets the same warm-up and flood, so its growth (connection "+
		"buffers, X-Forwarded-For handling, allocator caches) is Envoy's own and is subtracted. RSS includes everything Sluice costs, "+
		"the V8 wasm heaps included; it also includes allocator pages not returned to the system, so small differences are noise.\n", warmupN)
	return b.String()
}

func statusMap(m map[int]int) string {
	if len(m) == 0 {
		return "none"
	}
	s := statusString(m)
	return strings.ReplaceAll(s, "×0", "×error")
}

func statusString64(m map[int]int64, errors int64) string {
	mm := map[int]int{}
	for k, v := range m {
		mm[k] = int(v)
	}
	s := statusString(mm)
	if errors > 0 {
		s += fmt.Sprintf(", %d errors", errors)
	}
	return s
}
