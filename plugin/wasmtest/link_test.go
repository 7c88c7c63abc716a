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
// set (2,975,247 bytes: findfunctab left out, binaryen's -Oz) plus about
// 0.5 KB, raised by 0.6 KB for the process-wide gauges that two vm_ids
// share (workerTable.publish adds changes; 2,976,337 bytes), lowered to
// 2,973,862 bytes plus about 0.1 KB once configuration-time helpers were
// no longer inlined and the response body callback went. Every byte of code is compiled by V8 in every Envoy
// that loads the module, and the static data is copied into every VM. A feature that needs
// more raises it on purpose, saying in the commit what the bytes buy.
const moduleCeiling = 2_973_960

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
