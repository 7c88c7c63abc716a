package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// The memory section: Envoy's resident memory with no filter, the no-op Go
// filter and Sluice, at --concurrency 1 and 8, after the same few hundred
// requests. Each Go VM (one per worker, plus the main thread's) has its own
// linear memory that never shrinks, so what Sluice adds over the no-op filter
// is its module's code plus, per VM, what its start and its requests made the
// Go heap grow to.

const memRequests = 400

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
	sluice, _ := filepath.Abs(o.memWasm)
	filters := []memFilter{
		{"no filter", nil},
		{"no-op Go filter", &envoytest.Wasm{File: noop, Name: "noop"}},
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
	for _, c := range []int{1, 8} {
		for _, f := range filters {
			rows = append(rows, &memRow{filter: f.key, concurrency: c})
		}
	}
	const reps = 2
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
			var heap uint64
			if m, err := e.Memory(); err == nil {
				heap = m["allocated"]
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
			progress("memory: %-16s concurrency %d: RSS %s", r.filter, r.concurrency, mib(rss))
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
	b.WriteString("| filter | RSS at --concurrency 1 | over no filter | of which Envoy's heap | RSS at --concurrency 8 | over no filter | of which Envoy's heap | per extra worker |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, f := range filters {
		r1, r8 := find(f.key, 1), find(f.key, 8)
		n1, n8 := find("no filter", 1), find("no filter", 8)
		fmt.Fprintf(&b, "| %s | %.1f MiB | %+.1f MiB | %+.1f MiB | %.1f MiB | %+.1f MiB | %+.1f MiB | %+.2f MiB |\n",
			f.key, med(r1), med(r1)-med(n1), medOf(r1.heap)-medOf(n1.heap), med(r8), med(r8)-med(n8), medOf(r8.heap)-medOf(n8.heap),
			((med(r8)-med(n8))-(med(r1)-med(n1)))/7)
	}
	s1, s8 := med(find("Sluice", 1))-med(find("no-op Go filter", 1)), med(find("Sluice", 8))-med(find("no-op Go filter", 8))
	perWorker := (s8 - s1) / 7
	fmt.Fprintf(&b, "\n**Sluice over the no-op Go filter: %+.1f MiB at `--concurrency 1`, %+.1f MiB at `--concurrency 8`, %+.2f MiB per extra worker** "+
		"(targets: at most +15 MiB at concurrency 8 (%s), at most +0.75 MiB per extra worker (%s)).\n",
		s1, s8, perWorker, verdict(s8 <= 15), verdict(perWorker <= 0.75))
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
		"Envoy runs one wasm VM per worker plus one on the main thread, so the per-worker figure is the slope between the two concurrencies.\n",
		memRequests, o.clients, reps)
	return b.String(), nil
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
