package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

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
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
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
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-envoy", "testdata/envoy-forms.yaml"}, 1, `
testdata/envoy-forms.yaml:30 (literal): ok (1 rule)
testdata/envoy-forms.yaml:47 (folded): ok (1 rule)
testdata/envoy-forms.yaml:72 (single-quoted): rules[0].name: "it's-not-valid" must match [a-z0-9_-]+ (at most 64 characters)
testdata/envoy-forms.yaml:81 (double-quoted): ok (1 rule)
testdata/envoy-forms.yaml:91 (explicit-indent): ok (1 rule)`},
		{[]string{"-envoy", "testdata/envoy-forms.yaml", "-name", "folded"}, 0, `
testdata/envoy-forms.yaml:47 (folded): ok (1 rule)`},
		{[]string{"-envoy", "testdata/envoy-forms.yaml", "-name", "sluice"}, 1, `
testdata/envoy-forms.yaml: no wasm filter named "sluice" found (5 wasm filters in the file)`},
		{[]string{"-envoy", "testdata/envoy-errors.yaml"}, 1, `
testdata/envoy-errors.yaml: 1 wasm filter of type envoy.extensions.filters.http.wasm.v3.Wasm written in a form sluice validate cannot read (flow style {...}?): write its typed_config in block style, or check its configuration as a JSON file
testdata/envoy-errors.yaml:10 (bad-window): rules[1].window: "1 minute" is not a duration (use a Go duration like "1s", "1m", "250ms")
testdata/envoy-errors.yaml:20 (struct): the configuration is a google.protobuf.Struct written in YAML, which sluice validate cannot convert to JSON without a YAML parser: use the StringValue form, or run sluice validate on the JSON document
testdata/envoy-errors.yaml:26 (missing): the wasm filter has no configuration (config.configuration)
testdata/envoy-errors.yaml:36 (flow-value): the value is a YAML flow collection, not a string: quote the JSON ('{...}') or write it as a block (value: | then the JSON)`},
		{[]string{"-envoy", "testdata/envoy.json"}, 1, `
testdata/envoy.json:15 (string): ok (1 rule)
testdata/envoy.json:20 (struct): ok (2 rules)
testdata/envoy.json:25 (struct-bad): rules[0].burst: must be > 0, got 0`},
		{[]string{"-envoy", "../../envoy/docker-compose.yaml"}, 1, `
../../envoy/docker-compose.yaml: no envoy.filters.http.wasm filter configuration found`},
	} {
		code, out, errOut := sluice(t, "", append([]string{"validate"}, c.args...)...)
		want := strings.TrimPrefix(c.want, "\n") + "\n"
		if code != c.code || out != want || errOut != "" {
			t.Errorf("validate %q: code %d (want %d), stderr %q, stdout:\n%s\nwant:\n%s", c.args, code, c.code, errOut, out, want)
		}
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

// The line scanner finds what a real YAML parser finds: the same wasm
// filters, the same names and lines, and the same JSON documents.
func TestScannerAgreesWithYAMLParser(t *testing.T) {
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
		scanned, scanErr := extractEnvoy(src)
		byName := map[string]found{}
		for _, f := range scanned {
			byName[f.name] = f
		}
		if len(parsed) == 0 {
			t.Fatalf("%s: yaml.v3 finds no wasm filter", file)
		}
		for _, p := range parsed {
			s, ok := byName[p.name]
			if !ok {
				// Only a flow-style typed_config may be missed, and then
				// extractEnvoy says so.
				if scanErr == nil || !strings.Contains(scanErr.Error(), "flow style") {
					t.Errorf("%s: the scanner misses wasm filter %q (line %d) without an error", file, p.name, p.line)
				}
				continue
			}
			if s.line != p.line {
				t.Errorf("%s %s: scanner line %d, yaml.v3 line %d", file, p.name, s.line, p.line)
			}
			switch {
			case p.doc == nil: // not a string in YAML: the scanner must refuse
				if s.err == nil {
					t.Errorf("%s %s: yaml.v3 finds no string configuration, the scanner reads %q", file, p.name, s.doc)
				}
			case s.err != nil:
				t.Errorf("%s %s: the scanner fails (%v), yaml.v3 reads %q", file, p.name, s.err, p.doc)
			case !sameJSON(s.doc, p.doc):
				t.Errorf("%s %s: documents differ\nscanner: %q\nyaml.v3: %q", file, p.name, s.doc, p.doc)
			}
		}
		if len(scanned) > len(parsed) {
			t.Errorf("%s: the scanner finds %d wasm filters, yaml.v3 %d", file, len(scanned), len(parsed))
		}
		t.Logf("%s: yaml.v3 finds %d wasm filters, the scanner %d", file, len(parsed), len(scanned))
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

func FuzzExtractEnvoy(f *testing.F) {
	for _, file := range []string{"testdata/envoy-forms.yaml", "testdata/envoy-errors.yaml", "testdata/envoy.json", "../../envoy/envoy.yaml"} {
		src, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	f.Add([]byte("config:\n  configuration:\n    value: \"\\"))
	f.Add([]byte("- - x: '\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		found, _ := extractEnvoy(src) // must not panic
		for _, c := range found {
			if c.line < 1 || c.line > bytes.Count(src, []byte("\n"))+1 {
				t.Fatalf("line %d out of range", c.line)
			}
		}
	})
}
