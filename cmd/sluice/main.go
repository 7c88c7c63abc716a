// Command sluice checks Sluice plugin configurations without Envoy.
//
//	sluice validate FILE...                 check plugin configuration documents (JSON); - reads stdin
//	sluice validate -envoy envoy.yaml       check the Sluice configuration inside an Envoy configuration,
//	                                        and whether clients can choose the address rules key on
//	sluice schema                           print the JSON Schema of the plugin configuration
//
// validate runs the plugin's own parser (plugin/config), so a document it
// accepts is one the plugin starts with, and its errors are the log line the
// plugin would print, naming the field: "rules[1].window: ...". It prints one
// line per configuration and exits 1 if any is invalid, 2 on a usage error.
// Envoy files are read as Envoy's own v3 types (internal/envoyconf).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sluicehq/sluice/internal/envoyconf"
	"github.com/sluicehq/sluice/plugin/config"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

const usage = `usage:
  sluice validate [-envoy FILE]... [-name NAME] [-proxies N] [-strict] [FILE...]
        check Sluice plugin configurations (JSON documents; - reads standard input)
        without Envoy. -envoy FILE reads an Envoy bootstrap, listener or LDS file
        (YAML or JSON) as Envoy does and checks the configuration of every wasm
        HTTP filter in it; -name keeps only the filters whose plugin name
        (config.name) is NAME. It warns when the HTTP connection manager hosting
        Sluice lets clients choose the address rules are keyed by; -proxies N
        says how many proxies in front of Envoy append to X-Forwarded-For
        (default: unknown). Prints "FILE: ok (N rules)" or "FILE: field: problem"
        for each one, and "...: warning: ..." lines; exits 1 if any is invalid
        (or, with -strict, if there is a warning).
  sluice schema
        print the JSON Schema (draft 2020-12) of the plugin configuration.
`

// run is main without the process: tests call it in-process.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "validate":
		return validate(args[1:], stdin, stdout, stderr)
	case "schema":
		if len(args) > 1 {
			fmt.Fprintf(stderr, "sluice schema takes no arguments\n%s", usage)
			return 2
		}
		if _, err := stdout.Write(config.Schema); err != nil {
			fmt.Fprintf(stderr, "sluice: %v\n", err)
			return 1
		}
		return 0
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n%s", args[0], usage)
	return 2
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func validate(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	var envoyFiles listFlag
	fs.Var(&envoyFiles, "envoy", "an Envoy configuration (YAML or JSON) whose wasm filter configurations to check (repeatable)")
	name := fs.String("name", "", "with -envoy, check only the wasm filters whose config.name is `NAME`")
	proxies := fs.Int("proxies", -1, "with -envoy, the number `N` of proxies in front of Envoy that append to X-Forwarded-For (-1: unknown)")
	strict := fs.Bool("strict", false, "exit 1 on warnings too")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	files := fs.Args()
	if len(files) == 0 && len(envoyFiles) == 0 {
		fmt.Fprintf(stderr, "sluice validate: no file to check\n%s", usage)
		return 2
	}
	if *name != "" && len(envoyFiles) == 0 {
		fmt.Fprintf(stderr, "sluice validate: -name applies to -envoy files\n")
		return 2
	}
	v := &validator{stdin: stdin, out: stdout, name: *name, proxies: *proxies}
	for _, file := range files {
		if doc, label, ok := v.read(file); ok {
			v.report(label, doc)
		}
	}
	for _, file := range envoyFiles {
		v.envoyFile(file)
	}
	if v.failed || v.warned && *strict {
		return 1
	}
	return 0
}

// validator checks files and prints one line per finding; failed and
// warned say whether any configuration was invalid or warned about.
type validator struct {
	stdin          io.Reader
	out            io.Writer
	name           string // -name: only the wasm filters of this name
	proxies        int    // -proxies
	failed, warned bool
}

// read returns the contents of file ("-": standard input) and its label;
// a file that cannot be read is a failure, printed.
func (v *validator) read(file string) ([]byte, string, bool) {
	var b []byte
	var err error
	label := file
	if file == "-" {
		label = "<stdin>"
		b, err = io.ReadAll(v.stdin)
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		v.failed = true
		fmt.Fprintf(v.out, "%s: cannot read: %v\n", label, unwrapPath(err))
		return nil, label, false
	}
	return b, label, true
}

// report checks one plugin configuration and prints its verdict and
// warnings; it returns the configuration if it is valid.
func (v *validator) report(label string, doc []byte) *config.Config {
	c, err := config.Parse(doc)
	if err != nil {
		v.failed = true
		fmt.Fprintf(v.out, "%s: %v\n", label, err)
		return nil
	}
	fmt.Fprintf(v.out, "%s: ok (%s)\n", label, plural(len(c.Rules), "rule"))
	for _, w := range append(floodWarnings(c), costWarnings(c)...) {
		v.warned = true
		fmt.Fprintf(v.out, "%s: warning: %s\n", label, w)
	}
	return c
}

// envoyFile checks every Sluice configuration (or those named -name) in an
// Envoy configuration file.
func (v *validator) envoyFile(file string) {
	src, label, ok := v.read(file)
	if !ok {
		return
	}
	ef, err := envoyconf.Read(src)
	if err != nil {
		v.failed = true
		fmt.Fprintf(v.out, "%s: %v\n", label, err)
		return
	}
	for _, u := range ef.Unchecked {
		fmt.Fprintf(v.out, "%s: note: typed_config %s not checked (a type sluice validate does not know)\n", label, u)
	}
	checked := 0
	for _, f := range ef.Filters {
		if v.name != "" && f.Name != v.name {
			continue
		}
		checked++
		v.envoyFilter(label, f)
	}
	if checked == 0 {
		v.failed = true
		what := "no envoy.filters.http.wasm filter configuration found"
		if v.name != "" {
			what = fmt.Sprintf("no wasm filter named %q found (%s in the file)", v.name, plural(len(ef.Filters), "wasm filter"))
		}
		fmt.Fprintf(v.out, "%s: %s\n", label, what)
	}
}

// envoyFilter checks one wasm filter's configuration and judges the
// connection manager that hosts it.
func (v *validator) envoyFilter(label string, f envoyconf.Filter) {
	where := label
	if f.Line > 0 {
		where = fmt.Sprintf("%s:%d", label, f.Line)
	}
	if f.Name != "" {
		where += " (" + f.Name + ")"
	}
	if f.Err != nil {
		v.failed = true
		fmt.Fprintf(v.out, "%s: %v\n", where, f.Err)
		return
	}
	c := v.report(where, f.Config)
	if c == nil {
		return
	}
	for _, j := range envoyconf.Judge(f, c.ClientIP.XFFTrustedHops, keyedByAddress(c), v.proxies) {
		kind := "note"
		if j.Warning {
			kind = "warning"
			v.warned = true
		}
		fmt.Fprintf(v.out, "%s: %s: %s\n", where, kind, j.Text)
	}
	if routes, ok := f.Routes(); ok {
		for _, w := range routeWarnings(c, routes) {
			v.warned = true
			fmt.Fprintf(v.out, "%s: warning: %s\n", where, w)
		}
	}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// unwrapPath drops the path from an *os.PathError: the label already says it.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// keyedByAddress reports whether the client address decides some budget: a
// rule keyed by client_ip, or by a header (requests without it fall back to
// the client address), or exempt ranges.
func keyedByAddress(c *config.Config) bool {
	if len(c.Exempt) > 0 {
		return true
	}
	for _, r := range c.Rules {
		for _, k := range r.Key {
			if k.Kind == config.KeyClientIP || k.Kind == config.KeyHeader {
				return true
			}
		}
	}
	return false
}
