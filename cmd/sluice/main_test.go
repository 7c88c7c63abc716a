package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/envoyconf"
	"github.com/sluicehq/sluice/plugin/config"
)

// sluice runs the command in-process.
func sluice(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestValidateFiles(t *testing.T) {
	good := writeFile(t, "good.json", `{"rules":[{"name":"a","limit":1,"window":"1s"},{"name":"b","limit":2,"window":"1m"}]}`)
	one := writeFile(t, "one.json", `{"rules":[{"name":"a","limit":1,"window":"1s"}]}`)
	bad := writeFile(t, "bad.json", `{"rules":[{"name":"a","limit":1,"window":"1s"},{"name":"b","limit":1,"window":"1 minute"}]}`)

	code, out, errOut := sluice(t, "", "validate", good, one)
	if code != 0 || out != good+": ok (2 rules)\n"+one+": ok (1 rule)\n" || errOut != "" {
		t.Errorf("valid files: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, _ = sluice(t, "", "validate", good, bad, filepath.Join(t.TempDir(), "missing.json"))
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 1 || len(lines) != 3 || lines[0] != good+": ok (2 rules)" ||
		lines[1] != bad+`: rules[1].window: "1 minute" is not a duration (use a Go duration like "1s", "1m", "250ms")` ||
		!strings.HasSuffix(lines[2], "missing.json: cannot read: no such file or directory") {
		t.Errorf("mixed files: code %d, stdout:\n%s", code, out)
	}

	code, out, _ = sluice(t, `{"rules":[{"name":"s","limit":1,"window":"1s"}]}`, "validate", "-")
	if code != 0 || out != "<stdin>: ok (1 rule)\n" {
		t.Errorf("stdin: code %d, stdout %q", code, out)
	}
	code, out, _ = sluice(t, `{"rules":[]}`, "validate", "-")
	if code != 1 || out != "<stdin>: rules: at least one rule is required\n" {
		t.Errorf("invalid stdin: code %d, stdout %q", code, out)
	}
	code, out, _ = sluice(t, "", "validate", "-")
	if code != 1 || !strings.HasPrefix(out, "<stdin>: configuration is empty") {
		t.Errorf("empty stdin: code %d, stdout %q", code, out)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"frobnicate"},
		{"validate"},
		{"validate", "-bogus", "x.json"},
		{"validate", "-name", "sluice", "x.json"},
		{"schema", "extra"},
	} {
		code, out, errOut := sluice(t, "", args...)
		if code != 2 || out != "" || !strings.Contains(errOut, "usage:") && !strings.Contains(errOut, "-name applies") {
			t.Errorf("%q: code %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	if code, out, _ := sluice(t, "", "help"); code != 0 || !strings.Contains(out, "sluice validate") {
		t.Errorf("help: code %d, stdout %q", code, out)
	}
}

func TestSchemaCommand(t *testing.T) {
	code, out, errOut := sluice(t, "", "schema")
	if code != 0 || out != string(config.Schema) || errOut != "" {
		t.Fatalf("code %d, stderr %q, %d bytes of stdout", code, errOut, len(out))
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil || v["$schema"] == nil {
		t.Errorf("not a JSON Schema: %v", err)
	}
}

// The command reports exactly what config.Parse says, on the whole corpus
// of plugin/config.
func TestValidateCorpus(t *testing.T) {
	for _, kind := range []string{"valid", "invalid"} {
		files, _ := filepath.Glob("../../plugin/config/testdata/corpus/" + kind + "/*.json")
		if len(files) == 0 {
			t.Fatalf("no %s corpus", kind)
		}
		code, out, _ := sluice(t, "", append([]string{"validate"}, files...)...)
		if want := map[string]int{"valid": 0, "invalid": 1}[kind]; code != want {
			t.Errorf("%s corpus: exit code %d, want %d", kind, code, want)
		}
		var lines []string // the verdicts; the flood warnings have their own test
		for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			if !strings.Contains(l, ": warning: rules[") {
				lines = append(lines, l)
			}
		}
		if len(lines) != len(files) {
			t.Fatalf("%s corpus: %d lines for %d files", kind, len(lines), len(files))
		}
		for i, f := range files {
			doc, _ := os.ReadFile(f)
			c, err := config.Parse(doc)
			want := f + ": "
			if err != nil {
				want += err.Error()
			} else {
				want += "ok (" + plural(len(c.Rules), "rule") + ")"
			}
			if lines[i] != want {
				t.Errorf("got  %s\nwant %s", lines[i], want)
			}
		}
	}
}

func TestValidateEnvoy(t *testing.T) {
	// The connection managers of these files keep Envoy's defaults, so each
	// configuration keyed by client IP is warned about.
	warn := func(file string, line int, name, listener string) string {
		return fmt.Sprintf("%s:%d (%s): warning: listener %q (use_remote_address false, xff_num_trusted_hops 0, Sluice client_ip.xff_trusted_hops 0): rules keyed by client IP key on source.address, which Envoy takes from X-Forwarded-For entry 1 from the right, the client's own address only behind exactly 1 proxy (that append to X-Forwarded-For); behind fewer, a client chooses its address, and a new budget per request, by writing X-Forwarded-For. Fix: set the connection manager's use_remote_address: true and xff_num_trusted_hops to the number of proxies in front of Envoy that append to X-Forwarded-For (0 if clients connect directly), and Sluice's client_ip.xff_trusted_hops to 0; or, if exactly that many always stand in front, say so with -proxies 1", file, line, name, listener)
	}
	forms := "testdata/envoy-forms.yaml"
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-envoy", forms}, 1, `
testdata/envoy-forms.yaml:30 (literal): ok (1 rule)
` + warn(forms, 30, "literal", "one") + `
testdata/envoy-forms.yaml:47 (folded): ok (1 rule)
` + warn(forms, 47, "folded", "one") + `
testdata/envoy-forms.yaml:73 (single-quoted): rules[0].name: "it's-not-valid" must match [a-z0-9_-]+ (at most 64 characters)
testdata/envoy-forms.yaml:82 (double-quoted): ok (1 rule)
` + warn(forms, 82, "double-quoted", "two") + `
testdata/envoy-forms.yaml:92 (explicit-indent): ok (1 rule)
` + warn(forms, 92, "explicit-indent", "two")},
		{[]string{"-envoy", forms, "-name", "folded", "-proxies", "1"}, 0, `
testdata/envoy-forms.yaml:47 (folded): ok (1 rule)`},
		{[]string{"-envoy", forms, "-name", "folded", "-proxies", "1", "-strict"}, 0, `
testdata/envoy-forms.yaml:47 (folded): ok (1 rule)`},
		{[]string{"-envoy", forms, "-name", "folded", "-strict"}, 1, `
testdata/envoy-forms.yaml:47 (folded): ok (1 rule)
` + warn(forms, 47, "folded", "one")},
		{[]string{"-envoy", forms, "-name", "sluice"}, 1, `
testdata/envoy-forms.yaml: no wasm filter named "sluice" found (5 wasm filters in the file)`},
		{[]string{"-envoy", "testdata/envoy-errors.yaml"}, 1, `
testdata/envoy-errors.yaml:23 (bad-window): rules[1].window: "1 minute" is not a duration (use a Go duration like "1s", "1m", "250ms")
testdata/envoy-errors.yaml:33 (struct): ok (1 rule)
testdata/envoy-errors.yaml:39 (missing): the wasm filter has no configuration (config.configuration)
testdata/envoy-errors.yaml:49 (bytes): ok (1 rule)
testdata/envoy-errors.yaml:51 (flow): ok (1 rule)`},
		{[]string{"-envoy", "testdata/envoy-unknown.yaml"}, 1, `
testdata/envoy-unknown.yaml: line 22: static_resources.listeners[0].filter_chains[0].filters[0].typed_config.http_filters[0].typed_config.config.vm_confg: unknown field "vm_confg" (Envoy: no such field: 'vm_confg', has unknown fields) (as envoy.config.bootstrap.v3.Bootstrap)`},
		{[]string{"-envoy", "testdata/envoy-flow-value.yaml"}, 1, `
testdata/envoy-flow-value.yaml: line 20: static_resources.listeners[0].filter_chains[0].filters[0].typed_config.http_filters[0].typed_config.config.configuration.value: invalid value for string field value: { (as envoy.config.bootstrap.v3.Bootstrap)`},
		{[]string{"-envoy", "testdata/envoy.json", "-proxies", "1"}, 1, `
testdata/envoy.json:16 (string): ok (1 rule)
testdata/envoy.json:21 (struct): ok (2 rules)
testdata/envoy.json:26 (struct-bad): rules[0].burst: must be > 0, got 0`},
		// Issue 11: Envoy's defaults and xff_trusted_hops 1.
		{[]string{"-envoy", "testdata/sidecar-defaults.yaml", "-proxies", "0", "-strict"}, 1, `
testdata/sidecar-defaults.yaml:24 (sluice): ok (1 rule)
testdata/sidecar-defaults.yaml:24 (sluice): warning: listener "sidecar" (use_remote_address false, xff_num_trusted_hops 0, Sluice client_ip.xff_trusted_hops 1): rules keyed by client IP key on X-Forwarded-For entry 1 from the right as the filter sees it, which behind 0 proxies (that append to X-Forwarded-For) is written by the client: a client chooses its address, and a new budget per request. Fix: set the connection manager's use_remote_address: true and xff_num_trusted_hops: 0, and Sluice's client_ip.xff_trusted_hops to 0`},
	} {
		code, out, errOut := sluice(t, "", append([]string{"validate"}, c.args...)...)
		want := strings.TrimPrefix(c.want, "\n") + "\n"
		if code != c.code || out != want || errOut != "" {
			t.Errorf("validate %q: code %d (want %d), stderr %q, stdout:\n%s\nwant:\n%s", c.args, code, c.code, errOut, out, want)
		}
	}
}

// A file that is not an Envoy configuration (a docker-compose file) is
// refused as Envoy would refuse it as a bootstrap.
func TestValidateNotEnvoy(t *testing.T) {
	code, out, _ := sluice(t, "", "validate", "-envoy", "../../envoy/docker-compose.yaml")
	want := regexp.MustCompile(`^\.\./\.\./envoy/docker-compose\.yaml: line [0-9]+: services: unknown field "services" \(Envoy: no such field: 'services', has unknown fields\) \(as envoy\.config\.bootstrap\.v3\.Bootstrap\)\n$`)
	if code != 1 || !want.MatchString(out) {
		t.Errorf("code %d, stdout %q", code, out)
	}
}

// The project's own Envoy configuration (envoy/envoy.yaml, maintained
// elsewhere: only the shape of the answer is fixed here).
func TestValidateProjectEnvoyConfig(t *testing.T) {
	ok := regexp.MustCompile(`^(\.\./\.\./envoy/envoy\.yaml|<stdin>):[0-9]+ \(sluice\): ok \([0-9]+ rules?\)\n$`)
	code, out, _ := sluice(t, "", "validate", "-envoy", "../../envoy/envoy.yaml")
	if code != 0 || !ok.MatchString(out) {
		t.Errorf("envoy/envoy.yaml: code %d, stdout %q", code, out)
	}
	code, out2, _ := sluice(t, "", "validate", "-envoy", "../../envoy/envoy.yaml", "../../plugin/config/testdata/corpus/valid/minimal.json")
	if code != 0 || out2 != "../../plugin/config/testdata/corpus/valid/minimal.json: ok (1 rule)\n"+out {
		t.Errorf("a file and -envoy: code %d, stdout %q", code, out2)
	}
	// Standard input, with CRLF line ends: the same answer.
	src, _ := os.ReadFile("../../envoy/envoy.yaml")
	crlf := strings.ReplaceAll(string(src), "\n", "\r\n")
	code, out3, _ := sluice(t, crlf, "validate", "-envoy", "-")
	if code != 0 || out3 != strings.Replace(out, "../../envoy/envoy.yaml", "<stdin>", 1) {
		t.Errorf("envoy.yaml with CRLF on stdin: code %d, stdout %q", code, out3)
	}
}

// envoyconf (protojson over go.yaml.in/yaml/v3) finds what a walk of the
// YAML tree finds: the same wasm filters, names, lines and documents.
func TestReaderAgreesWithYAMLTree(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.yaml")
	files = append(files, "../../envoy/envoy.yaml")
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var root yaml.Node
		if err := yaml.Unmarshal(src, &root); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		parsed := yamlWasmConfigs(&root)
		ef, err := envoyconf.Read(src)
		if err != nil {
			// Files Envoy refuses.
			if !strings.Contains(file, "unknown") && !strings.Contains(file, "flow-value") {
				t.Errorf("%s: %v", file, err)
			}
			continue
		}
		byName := map[string]envoyconf.Filter{}
		for _, f := range ef.Filters {
			byName[f.Name] = f
		}
		if len(parsed) == 0 || len(parsed) != len(ef.Filters) {
			t.Fatalf("%s: yaml.v3 finds %d wasm filters, envoyconf %d", file, len(parsed), len(ef.Filters))
		}
		for _, p := range parsed {
			s, ok := byName[p.name]
			if !ok {
				t.Errorf("%s: envoyconf misses wasm filter %q (line %d)", file, p.name, p.line)
				continue
			}
			if s.Line != p.line {
				t.Errorf("%s %s: envoyconf line %d, yaml.v3 line %d", file, p.name, s.Line, p.line)
			}
			if p.doc != nil && !sameJSON(s.Config, p.doc) {
				t.Errorf("%s %s: documents differ\nenvoyconf: %q\nyaml.v3: %q", file, p.name, s.Config, p.doc)
			}
		}
	}
}

// sameJSON compares two documents as JSON values, or as text when either
// is not JSON.
func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(x, y)
}

type found struct {
	line int
	name string
	doc  []byte
}

const (
	wasmFilterType = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"
	stringType     = "type.googleapis.com/google.protobuf.StringValue"
)

// yamlWasmConfigs finds the wasm filters' configurations with yaml.v3.
func yamlWasmConfigs(n *yaml.Node) []found {
	var out []found
	get := func(m *yaml.Node, key string) (*yaml.Node, *yaml.Node) {
		if m == nil || m.Kind != yaml.MappingNode {
			return nil, nil
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == key {
				return m.Content[i], m.Content[i+1]
			}
		}
		return nil, nil
	}
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if _, typ := get(n, "@type"); typ != nil && typ.Value == wasmFilterType {
			f := found{line: n.Line}
			_, cfg := get(n, "config")
			if _, name := get(cfg, "name"); name != nil {
				f.name = name.Value
			}
			confKey, conf := get(cfg, "configuration")
			if confKey != nil {
				f.line = confKey.Line
			} else if cfg != nil {
				f.line = cfg.Line - 1
			}
			if k, v := get(conf, "value"); v != nil {
				f.line = k.Line
				_, ct := get(conf, "@type")
				if v.Kind == yaml.ScalarNode && ct != nil && ct.Value == stringType {
					f.doc = []byte(v.Value)
				}
			}
			out = append(out, f)
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(n)
	return out
}

// FuzzExtractEnvoy: reading any input as an Envoy configuration never
// panics, and every line it reports is in the input.
func FuzzExtractEnvoy(f *testing.F) {
	files, _ := filepath.Glob("testdata/*")
	for _, file := range append(files, "../../envoy/envoy.yaml") {
		src, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	f.Add([]byte("config:\n  configuration:\n    value: \"\\"))
	f.Add([]byte("- - x: '\n"))
	f.Add([]byte("{\"static_resources\": {\"listeners\": [{\"name\": 1}]}}"))
	f.Fuzz(func(t *testing.T, src []byte) {
		ef, err := envoyconf.Read(src) // must not panic
		if err != nil {
			return
		}
		for _, c := range ef.Filters {
			if c.Line < 0 || c.Line > bytes.Count(src, []byte("\n"))+1 {
				t.Fatalf("line %d out of range", c.Line)
			}
			for _, j := range envoyconf.Judge(c, 1, true, -1) {
				if j.Text == "" {
					t.Fatal("empty finding")
				}
			}
		}
	})
}

// Every Envoy file the project ships or its tests use is read as Envoy's own
// types, and each Sluice configuration in it is valid.
func TestValidateEveryEnvoyFile(t *testing.T) {
	var files []string
	for _, g := range []string{"../../envoy/*.yaml", "../../envoy/*/*.yaml", "../../examples/*/envoy*.yaml", "../../e2e/*/testdata/*.yaml"} {
		m, _ := filepath.Glob(g)
		files = append(files, m...)
	}
	checked := 0
	for _, file := range files {
		src, _ := os.ReadFile(file)
		if bytes.Contains(src, []byte("\nservices:")) || bytes.Contains(src, []byte("\napiVersion:")) || bytes.Contains(src, []byte("\ngroups:")) {
			continue // not an Envoy configuration (docker-compose files, Kubernetes manifests, Prometheus rules)
		}
		ef, err := envoyconf.Read(src)
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		checked++
		if len(ef.Filters) == 0 {
			t.Logf("%s: %s, no wasm filter", file, ef.Kind)
			continue // e.g. the rate-limit service's cluster entry
		}
		code, out, _ := sluice(t, "", "validate", "-envoy", file, "-strict")
		if code != 0 {
			t.Errorf("%s: code %d\n%s", file, code, out)
		}
		t.Logf("%s", strings.TrimSpace(out))
	}
	if checked == 0 {
		t.Fatal("no Envoy file found")
	}
}

// TestValidateWarnsFloodableKeys: a rule keyed only by a header or the path
// gets a warning naming it and the fix, unless an enforced client_ip rate
// rule covers all its requests; -strict makes the warning fail.
func TestValidateWarnsFloodableKeys(t *testing.T) {
	const keys = `{"name":"keys","match":{"path_prefix":"/api","methods":["POST"]},"key":["header:x-api-key"],"limit":5,"window":"1m"}`
	for _, c := range []struct {
		name, others string
		warn         bool
	}{
		{"alone", ``, true},
		{"all requests per ip", `,{"name":"ip","limit":50,"window":"1m"}`, false},
		{"wider prefix per ip", `,{"name":"ip","match":{"path_prefix":"/a","methods":["GET","POST"]},"limit":50,"window":"1m"}`, false},
		{"other prefix", `,{"name":"ip","match":{"path_prefix":"/login"},"limit":50,"window":"1m"}`, true},
		{"methods not covered", `,{"name":"ip","match":{"methods":["GET"]},"limit":50,"window":"1m"}`, true},
		{"ip and path", `,{"name":"ip","key":["client_ip","path"],"limit":50,"window":"1m"}`, true},
		{"shadow", `,{"name":"ip","limit":50,"window":"1m","shadow":true}`, true},
		{"concurrency", `,{"name":"ip","algorithm":"concurrency","limit":50}`, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := writeFile(t, "c.json", `{"rules":[`+keys+c.others+`]}`)
			code, out, _ := sluice(t, "", "validate", f)
			warned := strings.Contains(out, f+`: warning: rules[0] (keys) is keyed only by values the client chooses (header:x-api-key)`)
			if warned != c.warn || code != 0 {
				t.Fatalf("code %d, warned %v, want %v:\n%s", code, warned, c.warn, out)
			}
			if c.warn {
				if !strings.Contains(out, `{"name": "keys-per-ip", "match": {"path_prefix": "/api", "methods": ["POST"]}, "key": ["client_ip"]`) {
					t.Errorf("the warning does not show the fix:\n%s", out)
				}
				if code, _, _ := sluice(t, "", "validate", "-strict", f); code != 1 {
					t.Errorf("-strict: exit %d, want 1", code)
				}
			}
		})
	}
}

// TestValidateWarnsCostNeverPasses: a rule charged at admission whose
// cost.max is over what it holds is valid (the plugin starts with it), and
// validate warns that requests declaring more than the capacity never
// pass; -strict makes the warning fail. At or under the capacity, or
// charged after the response, no warning.
func TestValidateWarnsCostNeverPasses(t *testing.T) {
	for _, c := range []struct {
		name, rule string
		warn       string
	}{
		{"token bucket", `{"name":"tok","limit":10,"window":"1s","burst":20,"cost":{"request_header":"x-cost","max":50}}`,
			`: warning: rules[0] (tok): cost.max 50 is more than the rule holds: requests declaring more than 20 never pass`},
		{"fixed window", `{"name":"win","algorithm":"fixed_window","limit":10,"window":"1m","cost":{"request_header":"x-cost","max":11}}`,
			`: warning: rules[0] (win): cost.max 11 is more than the rule holds: requests declaring more than 10 never pass`},
		{"at the capacity", `{"name":"tok","limit":10,"window":"1s","burst":20,"cost":{"request_header":"x-cost","max":20}}`, ""},
		{"after the response", `{"name":"tok","limit":10,"window":"1s","cost":{"response_header":"x-cost","max":500}}`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := writeFile(t, "c.json", `{"rules":[`+c.rule+`]}`)
			code, out, _ := sluice(t, "", "validate", f)
			if code != 0 || !strings.Contains(out, f+": ok (1 rule)") {
				t.Fatalf("code %d, want a valid configuration:\n%s", code, out)
			}
			if warned := strings.Contains(out, "never pass"); warned != (c.warn != "") || c.warn != "" && !strings.Contains(out, f+c.warn) {
				t.Fatalf("want warning %q:\n%s", c.warn, out)
			}
			if code, _, _ := sluice(t, "", "validate", "-strict", f); c.warn != "" && code != 1 {
				t.Errorf("-strict: exit %d, want 1", code)
			}
		})
	}
}
