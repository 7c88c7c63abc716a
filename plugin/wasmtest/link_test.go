package wasmtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// What the plugin links, and how big the module is: Envoy's V8 keeps about
// 20 MiB of RSS resident per megabyte of module (docs/design/performance.md,
// "Memory"), in every Envoy that loads it.

// moduleCeiling bounds build/sluice.wasm: its size when the ceiling was
// set (3,418,379 bytes: with cost, adaptive concurrency, per-rule tables,
// problem+json bodies, case-insensitive paths, match.route, the rule index,
// the spill pool and rule_metrics; whole numbers parsed without
// strconv.ParseFloat) plus about 12 KB. Raised for priority classes and the
// rule-wide key (their parsing, the per-key class values, the per-class
// metrics and the adaptive Gauge's Use: about 46 KB of code and 20 KB of
// data): 3,516,725 bytes then. Raised for global rules' deposits sized to
// what requests cost (the deposit, its moving average shared by an Envoy's
// workers, charges sent as the response passes, resends of undelivered
// calls: about 23 KB): 3,540,231 bytes then. Raised for the engine's
// subsystems as packages (match, global: each package's and type's
// metadata; the code itself moved) and the plugin context's parts, on a
// main that was already 3,553,497 bytes (adaptive stalls): 3,554,482 bytes
// then. Raised for responses held until the service counted their debt,
// circuits that close with their Envoy and probes not blocked by a stuck
// one (about 10 KB), and by 12 KB for internal redirects not charged again
// by global rules (their numbers read from the lease: 6.8 KB), the layout
// record read before a fresh state (2.1 KB) and the record of workers'
// gauge counts (3.2 KB): 3,577,146 bytes then. Lowered when parsing hashed
// a rule's identity from one buffer and methods, header names and gRPC's
// content type were compared without strings.Map and Unicode folding
// (about 21 KB less): 3,556,478 bytes then, plus about 6 KB. A feature that
// needs more raises it on purpose, saying in the commit what the bytes buy:
// every byte of static data is also copied into each VM's linear memory,
// and so is a 320-byte slice of the runtime's function lookup table for
// every function (docs/design/memory.md, "The static data and the function
// count"). Raised for the rejected path's reuse of its last body and
// headers (7.7k fewer instructions per rejected request;
// docs/design/request-cost.md): 3,564,172 bytes then. Lowered when a
// class's reserve was parsed without strconv.ParseFloat (plugin/config's
// fraction, the same float64: 13.2 KB less) and durations without
// time.ParseDuration (parseDuration, the same values: 9.1 KB less), the
// unknown-field list and the IPv6 zone check without strings.Join and
// strings.ContainsRune (5.7 KB): 3,533,012 bytes then. Raised for a global
// rule's client on the overflow lease owing its own descriptor and barred
// from the overflow once over its limit (3.7 KB: the bars 1.8 KB, the
// debts 1.6 KB) and, for a rule charged after the response, the settled
// cost owed there too (2.6 KB): 3,539,339 bytes then. Raised for the
// engine's subsystems in packages of their own (plugin/engine/flight: the
// in-flight rules; plugin/engine/local: the local rules), which moves the
// code and costs about 15 KB (code +4 KB: calls through the packages'
// Table interfaces, the queue's poll in steps; static data +11 KB: each
// package's function and type names and what its callers inline):
// 3,554,603 bytes then (main 3,539,339 before). Raised for a token or
// leaky bucket deciding as of its last charge when a worker's clock read
// came before another worker's charge (limit's decidedAt: 1.3 KB) and the
// global rules' calls in flight and the decision's global rules in package
// global (global.Calls, global.Asked, global.Ref; code +2.6 KB, static data
// +4.5 KB: the package's method names, the types and their map):
// 3,563,242 bytes then; the fingerprint seed and the hold check in package
// local and a redirect decided by its own entry point
// (Engine.DecideRedirect), 1.3 KB: 3,564,944 bytes. Raised for the
// adaptive rule's no-queue latency per priority class (limit.ClassBases,
// the Sampler's per-class sums: 9.0 KB): 3,573,968 bytes then. Raised for
// the count of layout record writes (an Envoy counter) read before a
// client's fresh state instead of the record itself, a shared-data get
// (code +3.5 KB, static data +3.3 KB: the signal's interface and methods,
// the counter's check; about 12k fewer instructions per fresh state in
// Envoy, docs/design/request-cost.md), less 1.2 KB for direct host calls
// on the request path: 3,579,701 bytes then. Raised for the per-stream
// callbacks' own exports and context table (plugin/dispatch_wasip1.go,
// plugin/streams.go: code +7.5 KB, the SDK's exports stay linked for the
// contexts the plugin does not own; 5.0k fewer instructions per admitted
// and 4.6k per rejected request in Envoy, docs/design/request-cost.md):
// 3,590,868 bytes then (main 3,580,263). Raised for the adaptive rule
// with classes timing each class through the worker's loop lag
// (limit.ClassBases.Timed, Bears; Sampler.AdmitBearing, LateBy: +2.3 KB).
// Lowered to 3,473,935 bytes (from 3,593,378, every feature kept) plus
// about 4 KB: helpers that append, concatenate or loop made non-inlined
// where their copies at every call site cost more wasm code than the calls
// (off the request path: on it, a call costs instructions per request),
// the start-up log line appended without sprintf, no map iteration or map
// clearing, no equality functions for types never compared, and
// strings.TrimSpace, strconv.Atoi/ParseInt, IndexAny, Trim cut sets and
// substring search replaced by exact equivalents (docs/design/memory.md,
// "Inlining" and "The module's code, by package"). Raised for cheaper
// requests in Envoy (docs/design/request-cost.md, "Go's
// own part, function by function"): an IPv4 address parsed in one pass,
// the fingerprint hash resumed from the state after a key's first 13
// bytes, bucket numbers written with 32-bit arithmetic, the matched rules
// found once when no rule reads the request, an admitted response's
// headers and a rejection's headers and body kept while what they say is
// the same, fewer calls in the module on a bucket's read and write and on
// the response callbacks that have nothing to do, the shared-data
// methods on a pointer (no generated wrapper per call: 3.2 KB less), the
// stream table's home slot and an IPv4 field's digits read without a loop
// (2.3 KB); in all +13.6 KB with the functions' names and tables, about
// 6.5k fewer instructions per admitted and 5.8k per rejected request:
// 3,487,821 bytes then (merged with the cuts above). Raised for the fast
// classes' word on the upstream's queue in an adaptive rule with classes
// (limit.ClassBases.Fast and its queued samples' sums, Sampler.DoneFast,
// Gauge.Fast and fastStep, the crossing's backoff on two mild rises, the
// word in the debug line: +5.4 KB; in the store-wide model the orders'
// median 84% -> 88%): 3,493,565 bytes then. Raised for slow start's
// growth watched by the fast classes' word at once (Gauge.FastGrown and
// WordAtOnce, Sampler.ResetTo, the round ended on two waiting samples:
// +3.8 KB; in the store-wide model the buys over the store's slots in 1
// launch second in the median seed, 2 before): 3,497,382 bytes then.
// Raised for the Base re-measured at half the limit before a raise of
// half or more is taken (Gauge.slower, confirming; two Envoys' Bases no
// longer ratchet on each other's queue: 6 -> 1 of 200 model runs over the
// knee): 3,499,210 bytes then (merged with the header's CeilSeconds).
// Lowered to 3,494,241 bytes plus about 2 KB: fewer Go calls per request
// (folded single-caller helpers, a bucket's slots read without a loop,
// paid for by four helpers off the request path no longer inlined;
// docs/design/request-cost.md, "Fewer calls per request").
const moduleCeiling = 3_496_300

func TestModuleSize(t *testing.T) {
	if n := len(pluginWasm); n > moduleCeiling {
		t.Errorf("build/sluice.wasm is %d bytes, over the ceiling of %d: see what grew (go build -ldflags=-dumpdep, or twiggy) before raising moduleCeiling", n, moduleCeiling)
	}
	t.Logf("build/sluice.wasm: %d bytes (ceiling %d)", len(pluginWasm), moduleCeiling)
}

// The plugin never links Envoy's protos or a YAML library: they belong to
// sluice validate only (a bigger module would cost every Envoy worker VM:
// V8 keeps about 18 MiB resident per megabyte of module code). Nor
// encoding/json (plugin/internal/jsonlite decodes the configuration), anything of
// crypto/ (plugin/internal/sha256 makes the global rules' descriptor keys) or
// net/netip with unique (plugin/internal/ipaddr): they pulled in hundreds of
// kilobytes that the proxy-wasm SDK does not need. Nor sort (60 KB with
// the reflection of sort.Slice, for two sorts of a few strings).
func TestNotLinkedIntoPlugin(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "..")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "github.com/sluicehq/sluice/plugin/config") {
		t.Fatalf("go list does not list the plugin's packages:\n%s", out)
	}
	for _, p := range deps {
		if strings.Contains(p, "envoyproxy") || strings.Contains(p, "yaml") || strings.HasSuffix(p, "/envoyconf") ||
			p == "encoding/json" || p == "crypto" || strings.HasPrefix(p, "crypto/") || p == "encoding/hex" ||
			p == "net/netip" || p == "unique" || p == "sort" {
			t.Errorf("the plugin links %s", p)
		}
	}
}

// fmt and reflect are imported by the proxy-wasm SDK but must not be
// reachable in the plugin: the linker drops them unless something calls
// them, and they are about 350 KB of module (fmt's printing goes through
// reflect). The linker's reachability graph (-dumpdep) says what is kept.
func TestFmtNotReachableInPlugin(t *testing.T) {
	if testing.Short() {
		t.Skip("links the plugin (a few seconds)")
	}
	out := filepath.Join(t.TempDir(), "plugin.wasm")
	// -trimpath and c-shared as in make build, so that only the link is new.
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-dumpdep", "-buildmode=c-shared", "-o", out, "..")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	graph, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%.2000s", err, graph)
	}
	// A kept function is the target of an edge. Symbols the linker shares
	// between identical contents (arginfo, stkobj) may carry an fmt name
	// without fmt's code.
	// reflect's own initialization stays (the runtime's packages import
	// it), its Value machinery must not. strconv.ParseFloat (13 KB) and
	// time.ParseDuration (9 KB) have the configuration's own parsers
	// (plugin/config: fraction, parseDuration).
	kept := regexp.MustCompile(`(?m)-> ((?:fmt|reflect\.Value|reflect\.\(\*rtype\)|encoding/json)\.[^\s]+|strconv\.ParseFloat|time\.ParseDuration)$`)
	shared := regexp.MustCompile(`\.(arginfo\d+|argliveinfo|stkobj|args_stackmap|opendefer|wrapinfo)$`)
	edges := 0
	for _, m := range kept.FindAllStringSubmatch(string(graph), -1) {
		if !shared.MatchString(m[1]) {
			t.Errorf("the plugin keeps %s", m[1])
		}
	}
	for _, l := range strings.Split(string(graph), "\n") {
		if strings.Contains(l, " -> ") {
			edges++
		}
	}
	if edges < 1000 || !strings.Contains(string(graph), "github.com/sluicehq/sluice/plugin/config.Parse") {
		t.Fatalf("no reachability graph from the linker (%d edges)", edges)
	}
}

// shared/ holds what more than one part of the root module uses (the
// rate-limit algorithms; the header protocol is the SDK module's); what only
// the plugin uses lives in plugin/internal/, where nothing else can import it.
func TestSharedIsShared(t *testing.T) {
	deps := func(pkg string, env ...string) []string {
		cmd := exec.Command("go", "list", "-deps", pkg)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		return strings.Fields(string(out))
	}
	parts := map[string][]string{
		"plugin":     deps("..", "GOOS=wasip1", "GOARCH=wasm"),
		"sdk":        deps("github.com/sluicehq/sluice/sdk"),
		"cmd/sluice": deps("../../cmd/sluice"),
	}
	shared, err := filepath.Glob("../../shared/*")
	if err != nil || len(shared) == 0 {
		t.Fatalf("no packages in shared/: %v", err)
	}
	for _, dir := range shared {
		pkg := "github.com/sluicehq/sluice/shared/" + filepath.Base(dir)
		var users []string
		for part, d := range parts {
			if slices.Contains(d, pkg) {
				users = append(users, part)
			}
		}
		if len(users) < 2 {
			t.Errorf("%s is used by %v only: move it next to its one user (plugin/internal/ for the plugin)", pkg, users)
		}
	}
}
