package envoyconf

import (
	"os"
	"regexp"
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
