package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// The memory section: Envoy's resident memory with no filter, the no-op Go
// filter and Sluice, at --concurrency 1, 2 and 8, after the same few hundred
// requests. Each Go VM (one per worker, plus two more) has its own
// linear memory that never shrinks, so what Sluice adds over the no-op filter
// is its module's code plus, per VM, what its start and its requests made the
// Go heap grow to.

const memRequests = 400

// noopSlimKey is the row of the no-op Go filter built as make build builds
// the plugin.
const noopSlimKey = "no-op Go filter, built as Sluice is"

// memConcurrencies are the Envoy --concurrency values measured: a lone
// worker, a sidecar (Istio runs its proxies with 2 workers) and a gateway.
var memConcurrencies = []int{1, 2, 8}

// memFilter is one row's filter: nil wasm is Envoy with no filter.
type memFilter struct {
	key  string
	wasm *envoytest.Wasm
}

type memRow struct {
	filter      string
	concurrency int
	rss         []uint64 // one per repetition
	heap        []uint64 // Envoy's own heap (tcmalloc allocated), one per repetition
	cached      []uint64 // tcmalloc's free memory still mapped (heap_size - pageheap_unmapped - allocated), one per repetition
	linear      []uint64 // resident in the wasm linear memories, one per repetition
	vms         int      // linear memories seen (VMs), last repetition
}

func memorySection(ctx context.Context, o options) (string, error) {
	nb, err := startNoopBench(ctx, "memory")
	if err != nil {
		return "", err
	}
	defer nb.close()
	up, noop, confNoop := nb.up, nb.noop, filepath.Join(nb.tmp, "confignoop.wasm")
	if err := buildGoWasm(ctx, "./tools/bench/testdata/confignoop", confNoop); err != nil {
		return "", err
	}
	root, err := envoytest.RepoRoot()
	if err != nil {
		return "", err
	}
	noopSlim := filepath.Join(nb.tmp, "slim", "noop.wasm")
	if err := buildGoWasmSlim(ctx, root, "./tools/bench/testdata/noop", noopSlim); err != nil {
		return "", err
	}
	sluice, _ := filepath.Abs(o.memWasm)
	filters := []memFilter{
		{"no filter", nil},
		{"no-op Go filter", &envoytest.Wasm{File: noop, Name: "noop"}},
		{noopSlimKey, &envoytest.Wasm{File: noopSlim, Name: "noop"}},
		{"no-op + Sluice's config parsing", &envoytest.Wasm{File: confNoop, Name: "confignoop", Config: sluiceConfig(admitLimit)}},
		{"Sluice", &envoytest.Wasm{File: sluice, Config: sluiceConfig(admitLimit)}},
	}
	// The floor for memory as for instructions: the Rust yardstick
	// (rustprobe.go), idle and doing Sluice's admit-path host work.
	rustNote := ""
	if rust, err := buildRustProbe(ctx); err != nil {
		rustNote = fmt.Sprintf("\nThe Rust rows were not measured: %v.\n", err)
	} else {
		filters = append(filters,
			memFilter{"no-op Rust filter", &envoytest.Wasm{File: rust, Name: "rustprobe", VMID: "rustprobe"}},
			memFilter{"Rust yardstick (Sluice's host work)", &envoytest.Wasm{File: rust, Name: "rustprobe", VMID: "rustprobe", Config: "vmctx,clock,property,shared,resp3"}})
	}
	ips := make([]string, o.clients)
	for i := range ips {
		ips[i] = envoytest.ClientIP(i)
	}
	var rows []*memRow
	for _, c := range memConcurrencies {
		for _, f := range filters {
			rows = append(rows, &memRow{filter: f.key, concurrency: c})
		}
	}
	reps := o.memReps
	for rep := 0; rep < reps; rep++ {
		for i, r := range rows {
			f := filters[i%len(filters)]
			op := envoytest.Options{Concurrency: r.concurrency, XFFNumTrustedHops: 1, Upstream: up.Addr(), LogLevel: "warn", Wasm: f.wasm}
			e, err := startEnvoy(ctx, op)
			if err != nil {
				return "", fmt.Errorf("starting Envoy (%s, concurrency %d): %w", r.filter, r.concurrency, err)
			}
			res := generate(ctx, genOptions{Addr: fmt.Sprintf("127.0.0.1:%d", e.Port()), Conns: 16, Requests: memRequests,
				XFF: func(i int64) string { return ips[i%int64(len(ips))] }})
			time.Sleep(300 * time.Millisecond) // let the workers finish their ticks
			rss, rerr := e.ResidentMemory()
			var heap, cached uint64
			if m, err := e.Memory(); err == nil {
				heap = m["allocated"]
				cached = m["heap_size"] - m["pageheap_unmapped"] - heap
			}
			perVM, lerr := linearMemories(e.Pid())
			lin, vms := total(perVM), len(perVM)
			if lerr != nil {
				progress("memory: %v", lerr)
			}
			e.Stop()
			if rerr != nil {
				return "", rerr
			}
			if res.Status[200] != memRequests {
				return "", fmt.Errorf("%s, concurrency %d: %d of %d requests answered 200 (%d errors, first: %v)",
					r.filter, r.concurrency, res.Status[200], memRequests, res.Errors, res.FirstErr)
			}
			r.rss = append(r.rss, rss)
			r.heap = append(r.heap, heap)
			r.cached = append(r.cached, cached)
			r.linear, r.vms = append(r.linear, lin), vms
			progress("memory: %-16s concurrency %d: RSS %s, %d linear memories %s (KiB each: %v)", r.filter, r.concurrency, mib(rss), vms, mib(lin), kibs(perVM))
		}
	}
	medOf := func(xs []uint64) float64 {
		v := make([]float64, len(xs))
		for i, x := range xs {
			v[i] = float64(x) / (1 << 20)
		}
		return median(v)
	}
	med := func(r *memRow) float64 { return medOf(r.rss) }
	find := func(filter string, c int) *memRow {
		i := slices.IndexFunc(rows, func(r *memRow) bool { return r.filter == filter && r.concurrency == c })
		return rows[i]
	}
	var b strings.Builder
	b.WriteString("## 8. Memory: Envoy RSS with no filter, the no-op Go filter, Sluice and the Rust yardstick\n\n")
	b.WriteString("| filter | RSS at --concurrency 1 | at 2 | at 8 | over no filter at 1 | at 2 | at 8 | per extra worker |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	over := func(key string, c int) float64 { return med(find(key, c)) - med(find("no filter", c)) }
	for _, f := range filters {
		fmt.Fprintf(&b, "| %s | %.1f MiB | %.1f MiB | %.1f MiB | %+.1f MiB | %+.1f MiB | %+.1f MiB | %+.2f MiB |\n",
			f.key, med(find(f.key, 1)), med(find(f.key, 2)), med(find(f.key, 8)), over(f.key, 1), over(f.key, 2), over(f.key, 8),
			(over(f.key, 8)-over(f.key, 1))/7)
	}
	s1, s2, s8 := over("Sluice", 1)-over("no-op Go filter", 1), over("Sluice", 2)-over("no-op Go filter", 2), over("Sluice", 8)-over("no-op Go filter", 8)
	perWorker := (s8 - s1) / 7
	fmt.Fprintf(&b, "\n**Sluice over the no-op Go filter: %+.1f MiB at `--concurrency 1`, %+.1f MiB at 2, %+.1f MiB at 8, %+.2f MiB per extra worker** "+
		"(targets: at most +15 MiB at concurrency 8 (%s), at most +0.75 MiB per extra worker (%s)).\n",
		s1, s2, s8, perWorker, verdict(s8 <= 15), verdict(perWorker <= 0.75))
	fmt.Fprintf(&b, "\nSluice over the no-op Go filter built as Sluice is (the runtime overlay, no findfunctab, binaryen -Oz): %+.1f MiB at 1, %+.1f MiB at 2, %+.1f MiB at 8: what Sluice's code costs, the build's savings aside.\n",
		over("Sluice", 1)-over(noopSlimKey, 1), over("Sluice", 2)-over(noopSlimKey, 2), over("Sluice", 8)-over(noopSlimKey, 8))
	b.WriteString(memoryParts(filters, find, medOf))
	if st, err := os.Stat(sluice); err == nil {
		sizes := []string{fmt.Sprintf("Sluice %d", st.Size())}
		for _, f := range []struct{ name, path string }{{"no-op", noop}, {"no-op + config parsing", confNoop}} {
			if st, err := os.Stat(f.path); err == nil {
				sizes = append(sizes, fmt.Sprintf("%s %d", f.name, st.Size()))
			}
		}
		if rs := rustModuleSize(filters); rs != "" {
			sizes = append(sizes, rs)
		}
		fmt.Fprintf(&b, "\nModule sizes (bytes): %s. V8 compiles a module once per process (the constant part) "+
			"and each VM gets its own Go heap in its linear memory (the per-worker part).\n", strings.Join(sizes, ", "))
	}
	b.WriteString(rustNote)
	fmt.Fprintf(&b, "\n**Method.** For each filter and concurrency a fresh Envoy (V8) is started, sent %d requests (16 keep-alive connections, "+
		"%d client addresses) and its VmRSS read 300 ms later (with Envoy's own heap, tcmalloc's `allocated` from the admin `/memory`: the rest of the growth is mapped outside it, V8's compiled code and the wasm linear memories); every configuration was measured %d times, one Envoy at a time, "+
		"and the table gives the medians. Sluice runs the Envoy section's admit configuration (one token_bucket rule, legacy headers). "+
		"The Rust rows are the yardstick of section 7 (tools/bench/testdata/rustprobe, proxy-wasm crate 0.2.5): a floor, not a part of Sluice. "+
		"Envoy runs one wasm VM per worker plus two (the main thread's and one more, counted in the linear memories), so the per-worker figure is the slope between concurrency 1 and 8.\n",
		memRequests, o.clients, reps)
	return b.String(), nil
}

// memoryParts is the table that splits each filter's RSS over no filter
// into Envoy's own heap (tcmalloc), the wasm linear memories (the VMs' Go
// heaps and static data) and the rest (V8: compiled code, isolates).
func memoryParts(filters []memFilter, find func(string, int) *memRow, medOf func([]uint64) float64) string {
	var b strings.Builder
	b.WriteString("\nWhat the RSS over no filter is made of (medians): Envoy's own heap (tcmalloc `allocated`), the free pages tcmalloc keeps mapped " +
		"(`heap_size` - `pageheap_unmapped` - `allocated`: memory V8's compilers and the host used and freed), the wasm linear memories " +
		"(resident pages of the mappings V8 reserves for them, from `/proc/PID/smaps`; VMs counted there) and the rest (V8's compiled code and isolates, " +
		"the module's bytes):\n\n")
	b.WriteString("| filter | --concurrency | over no filter | Envoy's heap | tcmalloc's free pages | linear memories | VMs | per VM | rest |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, f := range filters {
		if f.wasm == nil {
			continue
		}
		for _, c := range memConcurrencies {
			r, n := find(f.key, c), find("no filter", c)
			total := medOf(r.rss) - medOf(n.rss)
			heap, lin := medOf(r.heap)-medOf(n.heap), medOf(r.linear)-medOf(n.linear)
			cached := medOf(r.cached) - medOf(n.cached)
			perVM := 0.0
			if r.vms > 0 {
				perVM = lin / float64(r.vms)
			}
			fmt.Fprintf(&b, "| %s | %d | %+.1f MiB | %+.1f MiB | %+.1f MiB | %+.1f MiB | %d | %.2f MiB | %+.1f MiB |\n",
				f.key, c, total, heap, cached, lin, r.vms, perVM, total-heap-cached-lin)
		}
	}
	return b.String()
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}

// rustModuleSize is "Rust yardstick N" for the Rust module among filters,
// or "" when it was not measured.
func rustModuleSize(filters []memFilter) string {
	for _, f := range filters {
		if f.wasm != nil && f.wasm.Name == "rustprobe" {
			if st, err := os.Stat(f.wasm.File); err == nil {
				return fmt.Sprintf("Rust yardstick %d", st.Size())
			}
		}
	}
	return ""
}

// linearMemories returns what is resident in each of Envoy's wasm linear
// memories (pid's /proc smaps). V8 reserves each linear memory with
// its guard regions as 8 GiB or more of address space (the accessible
// pages and the inaccessible rest are adjacent anonymous mappings), and no
// other mapping of Envoy comes near that size (V8's pointer cage is 4 GiB).
func linearMemories(pid int) (perVM []uint64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return nil, err
	}
	type vma struct {
		start, end, rss uint64
		anon, none      bool // anonymous; no access (a guard)
	}
	var maps []vma
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			lo, hi, _ := strings.Cut(f[0], "-")
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil {
				maps = append(maps, vma{start: start, end: end, anon: len(f) == 5, none: strings.HasPrefix(f[1], "---")})
			}
			continue
		}
		if len(f) == 3 && f[0] == "Rss:" && len(maps) > 0 {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			maps[len(maps)-1].rss += kb << 10
		}
	}
	// Each linear memory: anonymous accessible pages directly followed by
	// the inaccessible rest of its reservation (at least 6 GiB).
	const huge = 6 << 30
	for i := 1; i < len(maps); i++ {
		g, m := maps[i], maps[i-1]
		if g.anon && g.none && g.end-g.start >= huge && m.anon && !m.none && m.end == g.start {
			perVM = append(perVM, m.rss+g.rss)
		}
	}
	return perVM, nil
}

func total(xs []uint64) (s uint64) {
	for _, x := range xs {
		s += x
	}
	return s
}

// kibs is xs in KiB, for a progress line.
func kibs(xs []uint64) []uint64 {
	out := make([]uint64, len(xs))
	for i, x := range xs {
		out[i] = x >> 10
	}
	return out
}
