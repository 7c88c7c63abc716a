package modgraph

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// root is the checkout's root (this package is internal/modgraph).
func root(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	r := filepath.Join(filepath.Dir(file), "..", "..")
	if _, err := os.Stat(filepath.Join(r, "sdk", "go.mod")); err != nil {
		t.Fatalf("no sdk/go.mod under %s: %v", r, err)
	}
	return r
}

// partnerGraph writes a module that imports pkg (a package of one of the
// SDK's modules), replaces the SDK's modules with this checkout's folders,
// tidies it and returns `go list -m all`, one module path per line.
func partnerGraph(t *testing.T, pkg string) []string {
	r := root(t)
	dir := t.TempDir()
	gomod := "module example.com/partner\n\ngo 1.26\n\n" +
		"replace github.com/sluicehq/sluice/sdk => " + filepath.Join(r, "sdk") + "\n" +
		"replace github.com/sluicehq/sluice/sdk/otelsluice => " + filepath.Join(r, "sdk", "otelsluice") + "\n"
	main := "package main\n\nimport _ \"" + pkg + "\"\n\nfunc main() {}\n"
	write(t, filepath.Join(dir, "go.mod"), gomod)
	write(t, filepath.Join(dir, "main.go"), main)
	run(t, dir, "go", "mod", "tidy")
	out := run(t, dir, "go", "list", "-m", "-f", "{{.Path}}", "all")
	return strings.Fields(out)
}

func write(t *testing.T, name, s string) {
	if err := os.WriteFile(name, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func run(t *testing.T, dir string, name string, args ...string) string {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// TestSDKGraphIsTheSDKAndBackoff: a partner importing the SDK gets the
// SDK's module and cenkalti/backoff/v4 in its graph, nothing else.
func TestSDKGraphIsTheSDKAndBackoff(t *testing.T) {
	got := partnerGraph(t, "github.com/sluicehq/sluice/sdk")
	want := []string{"example.com/partner", "github.com/cenkalti/backoff/v4", "github.com/sluicehq/sluice/sdk"}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("go list -m all of a module importing the SDK:\n%s\nwant exactly:\n%s",
			strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// pluginSide are modules of the plugin, Envoy's API, the benchmarks and the
// tests: none may reach a partner through the SDK's OpenTelemetry adapter.
var pluginSide = []string{
	"github.com/sluicehq/sluice", "github.com/proxy-wasm/", "github.com/tetratelabs/wazero",
	"github.com/envoyproxy/", "github.com/tsenart/vegeta", "gonum.org/", "codeberg.org/",
	"github.com/santhosh-tekuri/", "google.golang.org/protobuf", "google.golang.org/grpc",
	"golang.org/x/time", "golang.org/x/net",
}

// TestOtelGraphIsOpenTelemetryOnly: the adapter brings OpenTelemetry's
// modules, and nothing of the plugin, Envoy or the benchmarks.
func TestOtelGraphIsOpenTelemetryOnly(t *testing.T) {
	got := partnerGraph(t, "github.com/sluicehq/sluice/sdk/otelsluice")
	for _, must := range []string{"github.com/sluicehq/sluice/sdk", "github.com/sluicehq/sluice/sdk/otelsluice", "go.opentelemetry.io/otel"} {
		if !slices.Contains(got, must) {
			t.Errorf("graph lacks %s:\n%s", must, strings.Join(got, "\n"))
		}
	}
	for _, m := range got {
		if strings.HasPrefix(m, "github.com/sluicehq/sluice/sdk") {
			continue
		}
		for _, bad := range pluginSide {
			if m == bad || strings.HasPrefix(m, bad) && strings.HasSuffix(bad, "/") || strings.HasPrefix(m, bad+"/") {
				t.Errorf("graph of a module importing otelsluice holds %s (plugin side: %s)", m, bad)
			}
		}
	}
}
