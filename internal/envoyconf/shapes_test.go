package envoyconf

import (
	"strings"
	"testing"
)

// routerFilter is the last of an HCM's http_filters (YAML, indented for
// bootstrapWith).
const routerFilter = `
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router`

// bootstrapWith returns a bootstrap whose one listener's HCM holds the
// given http_filters text, then the router.
func bootstrapWith(httpFilters string) string {
	return `static_resources:
  listeners:
  - name: edge
    address: {socket_address: {address: 0.0.0.0, port_value: 10000}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: edge
          use_remote_address: true
          route_config: {name: r, virtual_hosts: [{name: v, domains: ["*"], routes: [{match: {prefix: /}, direct_response: {status: 200}}]}]}
          http_filters:` + httpFilters + routerFilter + "\n"
}

// An error inside a map keyed by an extension name, whose key holds dots
// (typed_extension_protocol_options, as the rate-limit cluster of
// envoy/ratelimit is written), is reported with its line like every other
// field error (docs/configuration.md: "reported with its path and line").
func TestErrorLineThroughDottedMapKey(t *testing.T) {
	src := `static_resources:
  clusters:
  - name: ratelimit
    type: STRICT_DNS
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config:
          http2_protocol_options: {bogus_field: 1}
    load_assignment:
      cluster_name: ratelimit
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: ratelimit, port_value: 8081}}}}]}]
`
	_, err := Read([]byte(src))
	if err == nil {
		t.Fatal("an unknown field was accepted")
	}
	t.Logf("error: %v", err)
	if !strings.Contains(err.Error(), "line 10") {
		t.Errorf("the error does not name line 10 (where bogus_field is): %v", err)
	}
}

// The same for a proto validation error of a typed_config under a dotted
// map key: the line of the options is named.
func TestValidationErrorLineThroughDottedMapKey(t *testing.T) {
	src := `static_resources:
  clusters:
  - name: ratelimit
    type: STRICT_DNS
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
    load_assignment:
      cluster_name: ratelimit
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: ratelimit, port_value: 8081}}}}]}]
`
	_, err := Read([]byte(src))
	if err == nil {
		t.Fatal("HttpProtocolOptions without upstream_protocol_options was accepted (Envoy requires the oneof)")
	}
	t.Logf("error: %v", err)
	if !strings.Contains(err.Error(), "line 7") && !strings.Contains(err.Error(), "line 8") {
		t.Errorf("the error does not name the line of the options (7 or 8): %v", err)
	}
}

// Envoy takes an extension's typed_config as an xds.type.v3.TypedStruct (or
// udpa.type.v1.TypedStruct) naming the real type in type_url: the shape of
// Istio EnvoyFilter examples for wasm. sluice validate -envoy must find and
// check the Sluice configuration in it ("every Sluice configuration inside
// an Envoy file"), with the line of its configuration.
func TestTypedStructWasmIsFound(t *testing.T) {
	for _, url := range []string{"type.googleapis.com/xds.type.v3.TypedStruct", "type.googleapis.com/udpa.type.v1.TypedStruct"} {
		src := bootstrapWith(`
          - name: envoy.filters.http.wasm
            typed_config:
              "@type": ` + url + `
              type_url: type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              value:
                config:
                  name: sluice
                  configuration:
                    "@type": type.googleapis.com/google.protobuf.StringValue
                    value: '{"rules": [{"name": "a", "limit": 1, "window": "soon"}]}'
                  vm_config: {runtime: envoy.wasm.runtime.v8, code: {local: {filename: /etc/envoy/sluice.wasm}}}`)
		f, err := Read([]byte(src))
		if err != nil {
			t.Errorf("%s: Read: %v", url, err)
			continue
		}
		if len(f.Filters) != 1 {
			t.Errorf("%s: found %d wasm filters, want 1 (the TypedStruct one); unchecked %v", url, len(f.Filters), f.Unchecked)
			continue
		}
		if w := f.Filters[0]; w.Name != "sluice" || w.Line != 23 || !strings.Contains(string(w.Config), `"soon"`) {
			t.Errorf("%s: name %q line %d (want 23) config %q", url, w.Name, w.Line, w.Config)
		}
	}
}

// A YAML merge key with a list of mappings (<<: [*a, *b], YAML's merge
// type) merges every mapping of the list, like the single form <<: *a.
func TestYAMLMergeKeyWithList(t *testing.T) {
	src := `static_resources:
  listeners:
  - name: one
    address: {socket_address: {address: 0.0.0.0, port_value: 10000}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: one
          route_config: {name: r}
          http_filters:
          - name: envoy.filters.http.wasm
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config: &plugin
                name: sluice
                configuration:
                  "@type": type.googleapis.com/google.protobuf.StringValue
                  value: '{"rules": [{"name": "a", "limit": 1, "window": "1s"}]}'
          - name: envoy.filters.http.router
            typed_config: &router
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  - name: two
    address: {socket_address: {address: 0.0.0.0, port_value: 10001}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: two
          route_config: {name: r}
          http_filters:
          - name: envoy.filters.http.wasm
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config:
                <<: [*plugin]
                root_id: two
          - name: envoy.filters.http.router
            typed_config: *router
`
	f, err := Read([]byte(src))
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if len(f.Filters) != 2 {
		t.Fatalf("found %d filters, want 2", len(f.Filters))
	}
	for i, w := range f.Filters {
		if w.Err != nil || w.Name != "sluice" || !strings.Contains(string(w.Config), `"rules"`) {
			t.Errorf("filter %d (listener %s): name %q config %q err %v: the merged members are lost", i, w.Listener, w.Name, w.Config, w.Err)
		}
	}
}

// Shapes users write that must be found with the right line: the HCM as
// the last of several network filters, remote code with sha256, a Struct
// configuration, several filter chains, LDS JSON.
func TestShapesFoundWithLines(t *testing.T) {
	src := `static_resources:
  listeners:
  - name: edge
    address: {socket_address: {address: 0.0.0.0, port_value: 10000}}
    filter_chains:
    - filter_chain_match: {server_names: [a.example]}
      filters:
      - name: envoy.filters.network.local_ratelimit
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.local_ratelimit.v3.LocalRateLimit
          stat_prefix: lrl
          token_bucket: {max_tokens: 10, fill_interval: 1s}
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: edge
          route_config: {name: r}
          http_filters:
          - name: envoy.filters.http.wasm
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config:
                name: struct
                configuration:
                  "@type": type.googleapis.com/google.protobuf.Struct
                  value:
                    rules:
                    - {name: a, limit: 10, window: 1m, shadow: no}
                vm_config:
                  runtime: envoy.wasm.runtime.v8
                  code:
                    remote:
                      http_uri: {uri: "https://example.com/sluice.wasm", cluster: web, timeout: 5s}
                      sha256: 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: edge2
          route_config: {name: r}
          http_filters:
          - name: envoy.filters.http.wasm
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config:
                name: string
                configuration: {"@type": type.googleapis.com/google.protobuf.StringValue, value: '{"rules":[{"name":"b","limit":1,"window":"1s"}]}'}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
`
	f, err := Read([]byte(src))
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	want := map[string]int{"struct": 26, "string": 50}
	if len(f.Filters) != 2 {
		t.Fatalf("found %d filters, want 2", len(f.Filters))
	}
	for _, w := range f.Filters {
		if w.Err != nil || w.Line != want[w.Name] || w.Listener != "edge" || w.HCM == nil {
			t.Errorf("%s: line %d (want %d) listener %q err %v", w.Name, w.Line, want[w.Name], w.Listener, w.Err)
		}
		t.Logf("%s: %s", w.Name, w.Config)
	}
}

// In a merge list the earlier mappings take precedence over the later ones,
// and the mapping's own keys over all of them (YAML's merge type).
func TestYAMLMergeListPrecedence(t *testing.T) {
	js, err := yamlToJSON([]byte("a: &a {x: 1, y: 1}\nb: &b {x: 2, z: 2}\nc: {<<: [*a, *b], y: 3}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := `"c":{"x":1,"y":3,"z":2}`; !strings.Contains(string(js), want) {
		t.Errorf("%s, want it to hold %s", js, want)
	}
}
