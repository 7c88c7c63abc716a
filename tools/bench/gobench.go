package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// gobenchPackages are the packages whose Go benchmarks the report shows:
// the algorithms (shared/limit), the header parser (sdk/header, a package of
// the SDK module the root module requires) and the
// engine's whole decision (plugin/engine).
var gobenchPackages = []string{"./shared/...", "github.com/sluicehq/sluice/sdk/header", "./plugin/engine"}

// gobenchSection runs go test -bench natively and tabulates the results.
func gobenchSection(ctx context.Context, root, benchtime string) (string, error) {
	args := append([]string{"test", "-run", "^$", "-bench", ".", "-benchmem", "-benchtime", benchtime, "-count", "1"}, gobenchPackages...)
	progress("go %s", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	os.Stderr.Write(out.Bytes())
	if err != nil {
		return "", fmt.Errorf("go test -bench: %v\n%s", err, out.String())
	}
	var b strings.Builder
	b.WriteString("## 3. Go benchmarks\n\n")
	fmt.Fprintf(&b, "`go test -run '^$' -bench . -benchmem -benchtime %s %s`, native (%s). "+
		"`AllowN` is one decision of an algorithm on a client's 16-byte state; `Decide` is the engine's whole decision for one "+
		"request (rule matching, client address, keyed fingerprint, one read-modify-write of the client's shared-data bucket, "+
		"\"+headers\": building the response headers). Over `memstore` (the tests' store, which copies every value on get and set "+
		"as Envoy's shared data does) the allocations are the store's; over `nocopy` (a store that reuses one buffer) they are "+
		"the engine's own. Target: zero.\n\n", benchtime, strings.Join(gobenchPackages, " "), goarch())
	b.WriteString("| package | benchmark | ns/op | B/op | allocs/op |\n|---|---|---:|---:|---:|\n")
	pkg := ""
	var engineAllocs []string
	sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimPrefix(p, "github.com/sluicehq/sluice/")
			continue
		}
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		f := strings.Fields(line)
		// name N ns "ns/op" B "B/op" allocs "allocs/op"
		vals := map[string]string{}
		for i := 2; i+1 < len(f); i += 2 {
			vals[f[i+1]] = f[i]
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			name = name[:i] // drop -GOMAXPROCS
		}
		fmt.Fprintf(&b, "| %s | `%s` | %s | %s | %s |\n", pkg, name, vals["ns/op"], vals["B/op"], vals["allocs/op"])
		if (strings.Contains(name, "/nocopy/") || strings.HasPrefix(name, "BenchmarkAllowN")) && vals["allocs/op"] != "0" {
			engineAllocs = append(engineAllocs, fmt.Sprintf("`%s` %s", name, vals["allocs/op"]))
		}
	}
	if len(engineAllocs) == 0 {
		b.WriteString("\nAlgorithms and engine decisions (`AllowN`, `Decide/nocopy`): **zero allocations**, target met.\n")
	} else {
		fmt.Fprintf(&b, "\nAllocations per decision, target zero **not met**: %s.\n", strings.Join(engineAllocs, ", "))
	}
	return b.String(), nil
}

func goarch() string {
	out, err := exec.Command("go", "env", "GOOS", "GOARCH").Output()
	if err != nil {
		return ""
	}
	return strings.Join(strings.Fields(string(out)), "/")
}
