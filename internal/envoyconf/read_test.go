package envoyconf

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestJSONPathAt(t *testing.T) {
	js := `{"a":{"b":[{"c":1},{"d":[5,{"e":"x"}]}]},"f":2}`
	for _, c := range []struct{ at, want string }{
		{`"c"`, "a.b[0].c"}, {`"d"`, "a.b[1].d"}, {`"e"`, "a.b[1].d[1].e"}, {`"f"`, "f"}, {`"x"`, "a.b[1].d[1].e"},
	} {
		off := strings.Index(js, c.at)
		if got := jsonPathAt([]byte(js), off); got != c.want {
			t.Errorf("at %s: %q, want %q", c.at, got, c.want)
		}
	}
}

func TestReadKindsAndLines(t *testing.T) {
	listener := `name: l
filter_chains:
- filters:
  - name: hcm
    typedConfig:
      "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
      statPrefix: x
      useRemoteAddress: true
      xffNumTrustedHops: 2
      routeConfig: {name: r}
      httpFilters:
      - name: w
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
          config:
            configuration: {"@type": type.googleapis.com/google.protobuf.StringValue, value: "{}"}
`
	f, err := Read([]byte(listener))
	if err != nil || f.Kind != KindListener || len(f.Filters) != 1 {
		t.Fatalf("%v %+v", err, f)
	}
	w := f.Filters[0]
	if w.Line != 16 || w.Listener != "l" || string(w.Config) != "{}" {
		t.Errorf("%+v", w)
	}
	if s, _ := w.SettingOf(0); s != (Setting{UseRemoteAddress: true, XFFNumTrustedHops: 2}) || s.ProxiesTrusted() != 2 {
		t.Errorf("setting %+v", s)
	}
	lds := "version_info: \"1\"\nresources:\n- \"@type\": type.googleapis.com/envoy.config.listener.v3.Listener\n  " +
		strings.ReplaceAll(listener, "\n", "\n  ")
	f, err = Read([]byte(lds))
	if err != nil || f.Kind != KindLDS || len(f.Filters) != 1 || f.Filters[0].Line != 19 {
		t.Fatalf("LDS: %v %+v", err, f)
	}
	// Envoy's proto validation rules: stat_prefix is required.
	_, err = Read([]byte(strings.Replace(listener, "statPrefix: x", "", 1)))
	if err == nil || !strings.Contains(err.Error(), "StatPrefix") || !strings.Contains(err.Error(), "line 5") {
		t.Errorf("missing stat_prefix: %v", err)
	}
	// An unknown typed_config type.
	_, err = Read([]byte(strings.Replace(listener, "wasm.v3.Wasm", "wasm.v3.Wasmx", 1)))
	if err == nil || !strings.Contains(err.Error(), "Wasmx") {
		t.Errorf("unknown type: %v", err)
	}
}

func TestProxiesTrusted(t *testing.T) {
	for _, c := range []struct {
		s    Setting
		want int
	}{
		{Setting{UseRemoteAddress: true}, 0},
		{Setting{UseRemoteAddress: true, XFFNumTrustedHops: 2}, 2},
		{Setting{}, 1},
		{Setting{XFFNumTrustedHops: 1}, 2},
		{Setting{UseRemoteAddress: true, SluiceHops: 1}, 0},
		{Setting{UseRemoteAddress: true, SluiceHops: 2}, 1},
		{Setting{UseRemoteAddress: true, SkipXFFAppend: true, SluiceHops: 2}, 2},
		{Setting{SluiceHops: 1}, 1},
	} {
		if got := c.s.ProxiesTrusted(); got != c.want {
			t.Errorf("%+v: %d, want %d", c.s, got, c.want)
		}
	}
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
	cmd := exec.Command("go", "list", "-deps", "../../plugin")
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
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-dumpdep", "-buildmode=c-shared", "-o", out, "../../plugin")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	graph, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%.2000s", err, graph)
	}
	// A kept function is the target of an edge. Symbols the linker shares
	// between identical contents (arginfo, stkobj) may carry an fmt name
	// without fmt's code.
	// reflect's own initialization stays (the runtime's packages import
	// it), its Value machinery must not.
	kept := regexp.MustCompile(`(?m)-> ((?:fmt|reflect\.Value|reflect\.\(\*rtype\)|encoding/json)\.[^\s]+)$`)
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

// The table of client addresses in docs/configuration.md says what ProxiesTrusted says
// (and e2e.TestClientIdentityMatrix proves against the real Envoy).
func TestClientAddressTable(t *testing.T) {
	src, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `(true|false)` \\| ([0-9]) \\| ([0-9]) \\| [^|]+ \\| ([0-9]) \\| ([^|]+) \\| ([^|]+) \\| ([^|]+) \\|$")
	rows := row.FindAllStringSubmatch(string(src), -1)
	if len(rows) != 18 {
		t.Fatalf("%d rows in the table of docs/configuration.md, want 18", len(rows))
	}
	for _, r := range rows {
		h, _ := strconv.Atoi(r[2])
		s, _ := strconv.Atoi(r[3])
		k, _ := strconv.Atoi(r[4])
		set := Setting{UseRemoteAddress: r[1] == "true", XFFNumTrustedHops: uint32(h), SluiceHops: s}
		if set.ProxiesTrusted() != k {
			t.Errorf("%s: trusts %d, ProxiesTrusted says %d", r[0], k, set.ProxiesTrusted())
		}
		for p := 0; p <= 2; p++ {
			want := "held, shared"
			switch {
			case p < k:
				want = "**warned**"
			case p == k:
				want = "held"
			}
			if got := strings.TrimSpace(r[5+p]); got != want {
				t.Errorf("%s: %d proxies: %q, want %q", r[0], p, got, want)
			}
		}
	}
}

// A typed_config of an extension this command does not link is read as an
// opaque value and listed, not refused.
func TestUnlinkedTypeIsOpaque(t *testing.T) {
	src := `name: l
filter_chains:
- filters:
  - name: hcm
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
      stat_prefix: x
      route_config: {name: r}
      http_filters:
      - name: o
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.not_linked.v3.Thing
          config: {max: 18446744073709551615}
      - name: w
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
          config:
            configuration: {"@type": type.googleapis.com/google.protobuf.StringValue, value: "{}"}
`
	f, err := Read([]byte(src))
	if err != nil || len(f.Filters) != 1 || len(f.Unchecked) != 1 || !strings.HasPrefix(f.Unchecked[0], "envoy.extensions.filters.http.not_linked.v3.Thing at filter_chains[0]") {
		t.Fatalf("%v %+v", err, f)
	}
	if f.Filters[0].Line != 18 {
		t.Errorf("line %d", f.Filters[0].Line)
	}
}
