package deploy

// What this test proves: each manifest is valid YAML, its apiVersion and
// kind are the resource's, it sets the fields the resource requires, every
// field it sets is one the resource defines (so a misspelt or invented field
// fails here instead of being pruned by the API server), enums hold allowed
// values, and the Sluice configuration it carries passes config.Parse.
// The field lists come from the resources' published definitions: Istio's
// extensions/v1alpha1 WasmPlugin (wasm.proto) and Envoy Gateway's
// EnvoyExtensionPolicy CRD. What it does not prove: that a cluster accepts
// the resources. For Envoy Gateway, e2e/envoygateway_test.go does: it
// applies the files of envoy-gateway/ to a running Envoy Gateway
// (standalone mode) and builds, pushes and loads the image of oci/. Istio
// is checked here only (no Istio on this machine).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/plugin/config"
)

// readDocs parses every YAML document of a file into generic values.
func readDocs(t *testing.T, file string) []map[string]any {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(src))
	var docs []map[string]any
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: not valid YAML: %v", file, err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
	if len(docs) == 0 {
		t.Fatalf("%s: no YAML document", file)
	}
	return docs
}

// checker collects the problems of one manifest, each with its path.
type checker struct {
	t    *testing.T
	file string
}

func (c checker) errorf(path, format string, args ...any) {
	c.t.Helper()
	c.t.Errorf("%s: %s: %s", c.file, path, fmt.Sprintf(format, args...))
}

func (c checker) object(path string, v any) map[string]any {
	c.t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		c.errorf(path, "want an object, got %T", v)
		return nil
	}
	return m
}

func (c checker) list(path string, v any) []any {
	c.t.Helper()
	l, ok := v.([]any)
	if !ok {
		c.errorf(path, "want a list, got %T", v)
	}
	return l
}

func (c checker) str(path string, v any) string {
	c.t.Helper()
	s, ok := v.(string)
	if !ok {
		c.errorf(path, "want a string, got %T (%v)", v, v)
	}
	return s
}

// fields checks that m has the required fields and no others than known.
func (c checker) fields(path string, m map[string]any, required []string, known ...string) {
	c.t.Helper()
	for _, r := range required {
		if _, ok := m[r]; !ok {
			c.errorf(path, "required field %q is missing", r)
		}
	}
	var names []string
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if !slices.Contains(known, k) && !slices.Contains(required, k) {
			c.errorf(path, "%q is not a field of this object (known: %s)", k, strings.Join(append(required, known...), ", "))
		}
	}
}

func (c checker) enum(path string, v any, allowed ...string) {
	c.t.Helper()
	if s := c.str(path, v); !slices.Contains(allowed, s) {
		c.errorf(path, "%q is not one of %v", s, allowed)
	}
}

// sluiceConfig runs the embedded plugin configuration through config.Parse,
// as the plugin will receive it: Istio and Envoy Gateway both pass it as
// JSON.
func (c checker) sluiceConfig(path string, v any) *config.Config {
	c.t.Helper()
	if c.object(path, v) == nil {
		return nil
	}
	doc, err := json.Marshal(v)
	if err != nil {
		c.errorf(path, "cannot be turned into JSON: %v", err)
		return nil
	}
	cfg, err := config.Parse(doc)
	if err != nil {
		c.errorf(path, "the Sluice configuration is invalid: %v", err)
		return nil
	}
	return cfg
}

func metadata(c checker, doc map[string]any) {
	c.t.Helper()
	md := c.object("metadata", doc["metadata"])
	c.fields("metadata", md, []string{"name"}, "namespace", "labels", "annotations")
	if name, _ := md["name"].(string); !regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`).MatchString(name) || len(name) > 253 {
		c.errorf("metadata.name", "%q is not a Kubernetes object name", name)
	}
}

var k8sName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

func TestIstioWasmPlugin(t *testing.T) {
	const file = "istio/wasmplugin.yaml"
	c := checker{t, file}
	docs := readDocs(t, file)
	if len(docs) != 1 {
		t.Fatalf("%s: %d documents, want 1", file, len(docs))
	}
	doc := docs[0]
	c.fields("", doc, []string{"apiVersion", "kind", "metadata", "spec"})
	if doc["apiVersion"] != "extensions.istio.io/v1alpha1" || doc["kind"] != "WasmPlugin" {
		t.Fatalf("%s: apiVersion %v, kind %v", file, doc["apiVersion"], doc["kind"])
	}
	metadata(c, doc)
	spec := c.object("spec", doc["spec"])
	// istio.extensions.v1alpha1.WasmPlugin: url is REQUIRED.
	c.fields("spec", spec, []string{"url"},
		"selector", "targetRef", "targetRefs", "sha256", "imagePullPolicy", "imagePullSecret", "verificationKey",
		"pluginConfig", "pluginName", "phase", "priority", "failStrategy", "vmConfig", "match", "type")

	url := c.str("spec.url", spec["url"])
	scheme, _, hasScheme := strings.Cut(url, "://")
	if url == "" || hasScheme && !slices.Contains([]string{"oci", "file", "http", "https"}, scheme) {
		c.errorf("spec.url", "%q: the scheme must be oci, file, http or https", url)
	}
	if s, ok := spec["sha256"]; ok && !regexp.MustCompile(`^$|^[a-f0-9]{64}$`).MatchString(c.str("spec.sha256", s)) {
		c.errorf("spec.sha256", "not a hex SHA-256")
	}
	if _, sel := spec["selector"]; sel {
		if _, refs := spec["targetRefs"]; refs {
			c.errorf("spec", "only one of targetRefs or selector can be set")
		}
		s := c.object("spec.selector", spec["selector"])
		c.fields("spec.selector", s, []string{"matchLabels"})
		for k, v := range c.object("spec.selector.matchLabels", s["matchLabels"]) {
			c.str("spec.selector.matchLabels."+k, v)
		}
	}
	if v, ok := spec["imagePullPolicy"]; ok {
		c.enum("spec.imagePullPolicy", v, "UNSPECIFIED_POLICY", "IfNotPresent", "Always")
	}
	if v, ok := spec["phase"]; ok {
		c.enum("spec.phase", v, "UNSPECIFIED_PHASE", "AUTHN", "AUTHZ", "STATS")
	}
	if v, ok := spec["failStrategy"]; ok {
		c.enum("spec.failStrategy", v, "FAIL_CLOSE", "FAIL_OPEN", "FAIL_RELOAD")
	}
	if v, ok := spec["type"]; ok {
		c.enum("spec.type", v, "UNSPECIFIED_PLUGIN_TYPE", "HTTP", "NETWORK")
	}
	if v, ok := spec["match"]; ok {
		for i, m := range c.list("spec.match", v) {
			p := fmt.Sprintf("spec.match[%d]", i)
			sel := c.object(p, m)
			c.fields(p, sel, nil, "mode", "ports")
			if mode, ok := sel["mode"]; ok {
				c.enum(p+".mode", mode, "UNDEFINED", "CLIENT", "SERVER", "CLIENT_AND_SERVER")
			}
		}
	}
	if v, ok := spec["vmConfig"]; ok {
		vm := c.object("spec.vmConfig", v)
		c.fields("spec.vmConfig", vm, nil, "env")
	}
	cfg := c.sluiceConfig("spec.pluginConfig", spec["pluginConfig"])
	if cfg != nil {
		t.Logf("%s: WasmPlugin %s, phase %v, failStrategy %v, %d Sluice rules", file, url, spec["phase"], spec["failStrategy"], len(cfg.Rules))
	}
}

// envoyGatewayKinds are the other resources of envoy-gateway/ (the Gateway
// API resources the policies attach to, what standalone mode adds, the
// rate-limit service's cluster, Envoy Gateway's own configuration) with
// their apiVersion: e2e/envoygateway_test.go applies each of them to a
// running Envoy Gateway, which checks them for real.
var envoyGatewayKinds = map[string]string{
	"GatewayClass":     "gateway.networking.k8s.io/v1",
	"Gateway":          "gateway.networking.k8s.io/v1",
	"HTTPRoute":        "gateway.networking.k8s.io/v1",
	"Backend":          "gateway.envoyproxy.io/v1alpha1",
	"EnvoyPatchPolicy": "gateway.envoyproxy.io/v1alpha1",
	"EnvoyGateway":     "gateway.envoyproxy.io/v1alpha1",
}

func TestEnvoyGatewayExtensionPolicies(t *testing.T) {
	files, _ := filepath.Glob("envoy-gateway/*.yaml")
	if len(files) == 0 {
		t.Fatal("no Envoy Gateway manifest")
	}
	for _, file := range files {
		c := checker{t, file}
		policies := 0
		for _, doc := range readDocs(t, file) {
			if doc["kind"] != "EnvoyExtensionPolicy" {
				if want, ok := envoyGatewayKinds[fmt.Sprint(doc["kind"])]; !ok || doc["apiVersion"] != want {
					t.Errorf("%s: apiVersion %v, kind %v: not a resource this folder ships", file, doc["apiVersion"], doc["kind"])
				}
				continue
			}
			policies++
			c.fields("", doc, []string{"apiVersion", "kind", "metadata", "spec"})
			if doc["apiVersion"] != "gateway.envoyproxy.io/v1alpha1" {
				t.Fatalf("%s: apiVersion %v, kind %v", file, doc["apiVersion"], doc["kind"])
			}
			metadata(c, doc)
			spec := c.object("spec", doc["spec"])
			c.fields("spec", spec, nil, "targetRef", "targetRefs", "targetSelectors", "mergeType", "wasm", "extProc", "dynamicModule")
			// "either targetRef or targetRefs must be used"
			_, one := spec["targetRef"]
			_, many := spec["targetRefs"]
			if one == many {
				c.errorf("spec", "exactly one of targetRef and targetRefs must be set")
			}
			for i, r := range c.list("spec.targetRefs", spec["targetRefs"]) {
				p := fmt.Sprintf("spec.targetRefs[%d]", i)
				ref := c.object(p, r)
				c.fields(p, ref, []string{"group", "kind", "name"}, "sectionName")
				if ref["group"] != "gateway.networking.k8s.io" {
					c.errorf(p+".group", "must be gateway.networking.k8s.io")
				}
				c.enum(p+".kind", ref["kind"], "Gateway", "ListenerSet", "HTTPRoute", "GRPCRoute", "UDPRoute", "TCPRoute", "TLSRoute")
				if !k8sName.MatchString(c.str(p+".name", ref["name"])) {
					c.errorf(p+".name", "not a Kubernetes name")
				}
			}
			wasm := c.list("spec.wasm", spec["wasm"])
			if len(wasm) == 0 || len(wasm) > 16 {
				c.errorf("spec.wasm", "%d extensions, want 1 to 16", len(wasm))
			}
			for i, w := range wasm {
				p := fmt.Sprintf("spec.wasm[%d]", i)
				ext := c.object(p, w)
				c.fields(p, ext, []string{"code"}, "name", "rootID", "config", "env", "failOpen")
				if v, ok := ext["failOpen"]; ok {
					if _, isBool := v.(bool); !isBool {
						c.errorf(p+".failOpen", "want a boolean, got %T", v)
					}
				}
				code := c.object(p+".code", ext["code"])
				c.fields(p+".code", code, []string{"type"}, "http", "image", "pullPolicy")
				c.enum(p+".code.type", code["type"], "HTTP", "Image")
				if v, ok := code["pullPolicy"]; ok {
					c.enum(p+".code.pullPolicy", v, "IfNotPresent", "Always")
				}
				// "If type is HTTP, http field needs to be set", and likewise Image.
				_, hasHTTP := code["http"]
				_, hasImage := code["image"]
				if hasHTTP != (code["type"] == "HTTP") || hasImage != (code["type"] == "Image") {
					c.errorf(p+".code", "type %v needs exactly the %q member", code["type"], strings.ToLower(fmt.Sprint(code["type"])))
				}
				if hasHTTP {
					h := c.object(p+".code.http", code["http"])
					c.fields(p+".code.http", h, []string{"url"}, "sha256", "tls")
					u := c.str(p+".code.http.url", h["url"])
					if !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
						c.errorf(p+".code.http.url", "%q is not an http(s) URL", u)
					}
				}
				if hasImage {
					img := c.object(p+".code.image", code["image"])
					c.fields(p+".code.image", img, []string{"url"}, "pullSecretRef", "sha256", "tls")
					u := c.str(p+".code.image.url", img["url"])
					if u == "" || strings.Contains(u, "://") {
						c.errorf(p+".code.image.url", "%q: want registry/image:tag or registry/image@sha256:digest, without a scheme", u)
					}
				}
				if cfg := c.sluiceConfig(p+".config", ext["config"]); cfg != nil {
					t.Logf("%s: %s extension %v (%v), failOpen %v, %d Sluice rules", file, p, ext["name"], code["type"], ext["failOpen"], len(cfg.Rules))
				}
			}
		}
		if strings.HasPrefix(filepath.Base(file), "envoyextensionpolicy") && policies == 0 {
			t.Errorf("%s: no EnvoyExtensionPolicy", file)
		}
	}
}

// The image recipe follows the Wasm "compat" image layout that Istio's and
// Envoy Gateway's fetchers read: FROM scratch and a single layer holding
// plugin.wasm.
func TestOCIDockerfile(t *testing.T) {
	src, err := os.ReadFile("oci/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	// Join continuation lines, drop comments.
	text := regexp.MustCompile(`\\\n`).ReplaceAllString(string(src), " ")
	var instructions [][]string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instructions = append(instructions, strings.Fields(line))
	}
	if len(instructions) == 0 || strings.ToUpper(instructions[0][0]) != "FROM" || len(instructions[0]) != 2 || instructions[0][1] != "scratch" {
		t.Fatalf("the first instruction must be FROM scratch, got %v", instructions)
	}
	layers := 0
	for _, in := range instructions[1:] {
		switch op := strings.ToUpper(in[0]); op {
		case "COPY", "ADD":
			layers++
			if op != "COPY" || len(in) != 3 || in[1] != "sluice.wasm" || (in[2] != "./plugin.wasm" && in[2] != "/plugin.wasm" && in[2] != "plugin.wasm") {
				t.Errorf("want COPY sluice.wasm ./plugin.wasm, got %v", in)
			}
		case "LABEL", "ARG":
			// Metadata only: no layer.
		default:
			t.Errorf("%s: only COPY, LABEL and ARG belong in a Wasm image (it adds a layer or needs a shell)", op)
		}
	}
	if layers != 1 {
		t.Errorf("%d COPY/ADD instructions, want exactly 1 (one layer)", layers)
	}
}

// Every manifest in this folder is covered by a test above.
func TestEveryManifestIsChecked(t *testing.T) {
	var files []string
	err := filepath.Walk(".", func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			files = append(files, filepath.ToSlash(path))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f != "istio/wasmplugin.yaml" && !strings.HasPrefix(f, "envoy-gateway/") {
			t.Errorf("%s is not checked by any test", f)
		}
	}
}
