package main

import (
	"strings"
	"testing"
)

const hcmHead = `static_resources:
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
          route_config: {name: r}
          http_filters:
`

// A file with two Sluice filters, the second written as a TypedStruct (as
// Envoy accepts any extension config, and as Istio EnvoyFilter examples
// write wasm) with an invalid configuration: validate checks it too and
// exits 1, naming the field.
func TestValidateChecksTypedStructFilter(t *testing.T) {
	src := hcmHead + `          - name: envoy.filters.http.wasm
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config:
                name: plain
                configuration: {"@type": type.googleapis.com/google.protobuf.StringValue, value: '{"rules":[{"name":"a","limit":1,"window":"1s"}]}'}
          - name: envoy.filters.http.wasm
            typed_config:
              "@type": type.googleapis.com/xds.type.v3.TypedStruct
              type_url: type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              value:
                config:
                  name: typed-struct
                  configuration:
                    "@type": type.googleapis.com/google.protobuf.StringValue
                    value: '{"rules":[{"name":"b","limit":1,"window":"soon"}]}'
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
`
	p := writeFile(t, "typed-struct.yaml", src)
	code, out, errOut := sluice(t, "", "validate", "-envoy", p)
	t.Logf("code %d\n%s%s", code, out, errOut)
	if code != 1 || !strings.Contains(out, "rules[0].window") {
		t.Errorf("the invalid Sluice configuration in the TypedStruct was not checked: exit %d", code)
	}
}

// Documented exit codes: 0 ok, 1 invalid (or a warning with -strict),
// 2 usage error.
func TestValidateExitCodes(t *testing.T) {
	good := writeFile(t, "good.json", `{"rules":[{"name":"a","limit":1,"window":"1s"}]}`)
	bad := writeFile(t, "bad.json", `{"rules":[{"name":"a","limit":1,"window":"1s","max_delay":"60.001s"}]}`)
	noWasm := writeFile(t, "nowasm.yaml", "static_resources: {}\n")
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"validate", good}, 0},
		{[]string{"validate", bad}, 1},
		{[]string{"validate", good, bad}, 1},
		{[]string{"validate"}, 2},
		{[]string{"validate", "-bogus", good}, 2},
		{[]string{"validate", "-proxies", "x", good}, 2},
		{[]string{"validate", "-name", "x", good}, 2},
		{[]string{"validate", "-envoy", noWasm}, 1},
		{[]string{"schema", "x"}, 2},
		{[]string{"bogus"}, 2},
		{[]string{}, 2},
	} {
		code, out, errOut := sluice(t, "", c.args...)
		if code != c.want {
			t.Errorf("%v: exit %d, want %d\n%s%s", c.args, code, c.want, out, errOut)
		}
	}
}
