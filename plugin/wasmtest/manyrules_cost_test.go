package wasmtest

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

// Per-request cost with many rules, measured in the compiled plugin: the
// guest function calls of a request (a deterministic count: wazero calls a
// listener before every function, the plugin's and the host's) and its
// time under wazero's compiler.

// routeRules returns n per-route rules, none of which matches /target or
// /nomatch.
func routeRules(n int) []string {
	var rules []string
	for i := 0; i < n; i++ {
		rules = append(rules, fmt.Sprintf(`{"name":"route-%04d","match":{"path_prefix":"/api/route-%04d/"},"limit":100,"window":"1m"}`, i, i))
	}
	return rules
}

// targetRules are the two rules a request for /target/x matches.
var targetRules = []string{
	`{"name":"target","match":{"path_prefix":"/target"},"limit":4294967295,"window":"1h"}`,
	`{"name":"target-get","match":{"path_prefix":"/target/","methods":["GET"]},"limit":4294967295,"window":"1h"}`,
}

func ruleDoc(rules []string) string { return `{"rules":[` + strings.Join(rules, ",") + `]}` }

// costCase is one configuration and the request sent through it.
type costCase struct {
	name, cfg, path string
}

var costCases = []costCase{
	{"1002 rules, the 2 matching last", ruleDoc(append(routeRules(1000), targetRules...)), "/target/x"},
	{"the 2 matching rules alone", ruleDoc(targetRules), "/target/x"},
	{"1000 rules, none matching", ruleDoc(routeRules(1000)), "/nomatch"},
	{"1 rule, not matching", ruleDoc(routeRules(1)), "/nomatch"},
}

// decisionCounter counts the function calls made while the plugin's
// proxy_on_request_headers runs (the decision: matching, keys, state,
// headers; a garbage collection that a request's allocation triggers
// included), and how many times it ran.
type decisionCounter struct {
	in              bool
	calls, requests int64
	cur             int64
	each            []int64 // calls of each decision
}

func (c *decisionCounter) NewFunctionListener(def api.FunctionDefinition) experimental.FunctionListener {
	return c
}

func (c *decisionCounter) Before(_ context.Context, _ api.Module, def api.FunctionDefinition, _ []uint64, _ experimental.StackIterator) {
	if c.in {
		c.calls++
		c.cur++
	} else if def.ExportNames() != nil && slices.Contains(def.ExportNames(), "proxy_on_request_headers") {
		c.in = true
		c.requests++
		c.cur = 0
	}
}

func (c *decisionCounter) After(_ context.Context, _ api.Module, def api.FunctionDefinition, _ []uint64) {
	if c.in && slices.Contains(def.ExportNames(), "proxy_on_request_headers") {
		c.in = false
		c.each = append(c.each, c.cur)
	}
}

func (c *decisionCounter) Abort(context.Context, api.Module, api.FunctionDefinition, error) {}

// callsPerRequest counts the function calls of the decisions of n
// requests for path through one VM of cfg (after a warm-up): the median
// decision's (a garbage collection, which costs after the heap's size and
// runs every so many requests, is left out: it is in mean, with the rest).
// The module is compiled for this count alone: a listener is bound when
// the module is compiled, so a cached compilation would count elsewhere.
func callsPerRequest(t *testing.T, cfg, path string, n int) (median, mean float64) {
	c := &decisionCounter{}
	ctx := experimental.WithFunctionListenerFactory(context.Background(), c)
	h, err := wasmhost.New(ctx, pluginWasm, wasmhost.WithCompilationCache(wazero.NewCompilationCache()))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	vm := workers(t, h, 1, cfg)[0]
	for i := 0; i < 200; i++ {
		if r := get(vm, path, "10.0.0.1:1"); r.Status != 200 {
			t.Fatalf("%s: %d", path, r.Status)
		}
	}
	c.calls, c.requests, c.each = 0, 0, nil
	for i := 0; i < n; i++ {
		get(vm, path, "10.0.0.1:1")
	}
	if c.requests != int64(n) || len(c.each) != n {
		t.Fatalf("counted %d decisions of %d requests", c.requests, n)
	}
	slices.Sort(c.each)
	return float64(c.each[n/2]), float64(c.calls) / float64(n)
}

// TestManyRulesCost: a request through 1002 rules whose two matching ones
// are listed last costs what one through those two alone does (within
// 5%), and a request that matches none of 1000 rules what one through a
// one-rule configuration does, in guest function calls.
func TestManyRulesCost(t *testing.T) {
	var per []float64
	for _, c := range costCases {
		median, mean := callsPerRequest(t, c.cfg, c.path, 2000)
		per = append(per, median)
		t.Logf("%-34s %6.0f function calls per decision (median), %7.1f mean with garbage collection", c.name, median, mean)
	}
	for k := 0; k < len(per); k += 2 {
		if d := per[k]/per[k+1] - 1; d > 0.05 || d < -0.05 {
			t.Errorf("%s: %.1f calls per request, %s: %.1f (%+.1f%%), want within 5%%", costCases[k].name, per[k], costCases[k+1].name, per[k+1], 100*d)
		}
	}
}

// BenchmarkManyRulesCost times the same requests under wazero's compiler
// (no listener), the cases interleaved in rounds; the least time per
// request of the rounds is reported (go test -run '^$' -bench
// ManyRulesCost ./plugin/wasmtest).
func BenchmarkManyRulesCost(b *testing.B) {
	vms := make([]*wasmhost.VM, len(costCases))
	for k, c := range costCases {
		h := newHost(b)
		vms[k] = workers(b, h, 1, c.cfg)[0]
		for i := 0; i < 500; i++ {
			get(vms[k], c.path, "10.0.0.1:1")
		}
	}
	const perRound = 2000
	best := make([]time.Duration, len(costCases))
	samples := make([][]time.Duration, len(costCases))
	for round := 0; round < 15; round++ {
		for k, c := range costCases {
			start := time.Now()
			for i := 0; i < perRound; i++ {
				get(vms[k], c.path, "10.0.0.1:1")
			}
			d := time.Since(start) / perRound
			samples[k] = append(samples[k], d)
			if best[k] == 0 || d < best[k] {
				best[k] = d
			}
		}
	}
	for k, c := range costCases {
		s := samples[k]
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		b.Logf("%-34s least %v, median %v per request", c.name, best[k], s[len(s)/2])
	}
	for i := 0; i < b.N; i++ {
		get(vms[0], costCases[0].path, "10.0.0.1:1")
	}
}

// TestManyRulesMemory: a VM's linear memory (which never shrinks) after
// starting with 1,002 rules, and after 1,000 requests, against the same
// with 2 rules; and the time a VM takes to start (parse, table, metrics).
func TestManyRulesMemory(t *testing.T) {
	const budget = 16 << 20
	for _, c := range []costCase{costCases[1], costCases[0]} {
		h := newHost(t)
		start := time.Now()
		vm := workers(t, h, 1, c.cfg)[0]
		took := time.Since(start)
		atStart := vm.MemorySize()
		for i := 0; i < 1000; i++ {
			get(vm, c.path, fmt.Sprintf("10.0.%d.%d:1", i/250, i%250))
		}
		t.Logf("%-34s VM started in %v; linear memory %.1f MiB at start, %.1f MiB after 1000 clients", c.name, took.Round(time.Millisecond), float64(atStart)/(1<<20), float64(vm.MemorySize())/(1<<20))
		if vm.MemorySize() > budget {
			t.Errorf("%s: linear memory %d bytes, over the %d budget", c.name, vm.MemorySize(), budget)
		}
		healthy(t, vm)
	}
}
