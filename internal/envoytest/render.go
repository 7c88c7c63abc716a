package envoytest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"
)

// Rendering Options into Envoy's bootstrap and LDS documents.

// yq quotes s as a YAML double-quoted scalar (JSON string syntax is a subset).
func yq(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// seconds renders a duration as a protobuf Duration string ("1.5s").
func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
}

type clusterData struct {
	Name      string
	Endpoints []endpointData
	DNS       bool
	HTTP2     bool
	// Filters is the rendered Wasm filter of Options.UpstreamWasm, for
	// the cluster's http_filters (DefaultCluster only).
	Filters string
}

type endpointData struct {
	Host string
	Port int
}

type renderData struct {
	O          Options
	Clusters   []clusterData
	Port       int
	LDSPath    string
	ListenerNm string
	Indent     string
}

var funcs = template.FuncMap{"q": yq, "seconds": seconds, "deref": func(b *bool) bool { return *b },
	"base64": func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }}

// listenerTmpl renders one Listener (without the leading "- " item marker
// handled by the caller via indentation).
var listenerTmpl = template.Must(template.New("listener").Funcs(funcs).Parse(`name: {{q .ListenerNm}}
address:
  socket_address: {address: 127.0.0.1, port_value: {{.Port}}}
filter_chains:
- filters:
  - name: envoy.filters.network.http_connection_manager
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
      stat_prefix: ingress_http
{{- if .O.WebSocket}}
      upgrade_configs: [{upgrade_type: websocket}]
{{- end}}
{{- if .O.AccessLogFormat}}
      access_log:
      - name: envoy.access_loggers.file
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
          path: {{q .O.AccessLogPath}}
          log_format:
            text_format_source: {inline_string: {{q .O.AccessLogFormat}}}
{{- end}}
      use_remote_address: {{if .O.UseRemoteAddress}}{{deref .O.UseRemoteAddress}}{{else}}true{{end}}
      xff_num_trusted_hops: {{.O.XFFNumTrustedHops}}
      route_config:
        name: local_route
        virtual_hosts:
        - name: all
          domains: ["*"]
{{- if .O.StartTimeHeader}}
          request_headers_to_add:
          - header: {key: {{q .O.StartTimeHeader}}, value: "%START_TIME(%s.%6f)%"}
            append_action: OVERWRITE_IF_EXISTS_OR_ADD
{{- end}}
          routes:
{{- range .O.Routes}}
          - name: {{q .Name}}
            match: {prefix: {{q .Prefix}}}
{{- if .NoWasm}}
            typed_per_filter_config:
              envoy.filters.http.wasm:
                "@type": type.googleapis.com/envoy.config.route.v3.FilterConfig
                disabled: true
{{- end}}
{{- if .DirectResponse}}
            direct_response:
              status: {{.DirectResponse}}
              body: {inline_string: {{q .DirectBody}}}
{{- else}}
            route:
              cluster: {{q .Cluster}}
{{- if .RetryOn}}
              retry_policy:
                retry_on: {{q .RetryOn}}
{{- if .NumRetries}}
                num_retries: {{.NumRetries}}
{{- end}}
{{- if .RetriableStatusCodes}}
                retriable_status_codes: [{{range $i, $c := .RetriableStatusCodes}}{{if $i}}, {{end}}{{$c}}{{end}}]
{{- end}}
{{- end}}
{{- if .InternalRedirect}}
              internal_redirect_policy: {}
{{- end}}
{{- end}}
{{- if and $.O.GlobalRateLimit (not .DirectResponse)}}
              rate_limits:
{{- if $.O.GlobalRateLimit.Header}}
              - actions: [{request_headers: {header_name: {{q $.O.GlobalRateLimit.Header}}, descriptor_key: {{q $.O.GlobalRateLimit.Header}}}}]
{{- else}}
              - actions: [{remote_address: {}}]
{{- end}}
{{- end}}
{{- end}}
      http_filters:
{{- with .O.Wasm}}{{template "wasm" .}}{{end}}
{{- with .O.Wasm2}}{{template "wasm" .}}{{end}}
{{- with .O.LocalRateLimit}}
      - name: envoy.filters.http.local_ratelimit
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
          stat_prefix: {{q .StatPrefix}}
          token_bucket: {max_tokens: {{.MaxTokens}}, tokens_per_fill: {{.TokensPerFill}}, fill_interval: {{seconds .FillInterval}}}
          filter_enabled:
            runtime_key: local_rate_limit_enabled
            default_value: {numerator: 100, denominator: HUNDRED}
          filter_enforced:
            runtime_key: local_rate_limit_enforced
            default_value: {numerator: 100, denominator: HUNDRED}
{{- if .Headers}}
          enable_x_ratelimit_headers: DRAFT_VERSION_03
{{- end}}
{{- if .PerClientIP}}
          always_consume_default_token_bucket: false
          max_dynamic_descriptors: {{.MaxDynamicDescriptors}}
          rate_limits:
          - actions: [{remote_address: {}}]
          descriptors:
          - entries: [{key: remote_address}]
            token_bucket: {max_tokens: {{.MaxTokens}}, tokens_per_fill: {{.TokensPerFill}}, fill_interval: {{seconds .FillInterval}}}
{{- end}}
{{- end}}
{{- with .O.GlobalRateLimit}}
      - name: envoy.filters.http.ratelimit
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
          domain: {{q .Domain}}
          timeout: {{seconds .Timeout}}
          failure_mode_deny: {{.FailureModeDeny}}
          enable_x_ratelimit_headers: DRAFT_VERSION_03
          rate_limit_service:
            transport_api_version: V3
            grpc_service:
              envoy_grpc: {cluster_name: {{q .Cluster}}}
{{- end}}
      - name: envoy.filters.http.router
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
{{define "wasm"}}
      - name: envoy.filters.http.wasm
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
          config:
            name: {{q .Name}}
            root_id: {{q .RootID}}
{{- if .FailurePolicy}}
            failure_policy: {{.FailurePolicy}}
{{- end}}
{{- if .AllowOnHeadersStopIteration}}
            allow_on_headers_stop_iteration: true
{{- end}}
{{- if .AllowedCapabilities}}
            capability_restriction_config:
              allowed_capabilities:
{{- range .AllowedCapabilities}}
                {{q .}}: {}
{{- end}}
{{- end}}
            vm_config:
{{- if not .NoVMID}}
              vm_id: {{q .VMID}}
{{- end}}
              runtime: envoy.wasm.runtime.v8
              code:
                local:
                  filename: {{q .File}}
{{- if .Env}}
              environment_variables:
                key_values:
{{- range $k, $v := .Env}}
                  {{q $k}}: {{q $v}}
{{- end}}
{{- end}}
{{- if and .Config .ConfigAsStruct}}
            configuration:
              "@type": type.googleapis.com/google.protobuf.Struct
              value: {{.Config}}
{{- else if and .Config .ConfigAsBytes}}
            configuration:
              "@type": type.googleapis.com/google.protobuf.BytesValue
              value: {{base64 .Config}}
{{- else if .Config}}
            configuration:
              "@type": type.googleapis.com/google.protobuf.StringValue
              value: {{q .Config}}
{{- end}}{{end}}`))

// StatsTag is one stats_config.stats_tags entry: Envoy takes the regex's
// second group out of a metric's name into the label Name.
type StatsTag struct{ Name, Regex string }

// StatsTags are the stats tags of every rendered bootstrap, the same as
// envoy/envoy.yaml's (e2e's TestShippedEnvoyConfig compares them): Sluice's
// per-rule counters (wasmcustom.sluice.rule.<rule>.<outcome>) become one
// Prometheus metric per outcome with a sluice_rule label, the class
// metrics (wasmcustom.sluice.class.<rule>.<class>.<metric>) one per metric
// with sluice_rule and sluice_class labels. Envoy refuses a tag name given
// twice, so one regex takes the rule out of both; names have no dots.
var StatsTags = []StatsTag{
	{"sluice_rule", `^wasmcustom\.sluice\.(?:rule|class)\.(([a-z0-9_-]+)\.)(?:[a-z0-9_-]+\.)?\w+$`},
	{"sluice_class", `^wasmcustom\.sluice\.class\.[a-z0-9_-]+\.(([a-z0-9_-]+)\.)\w+$`},
}

var bootstrapTmpl = template.Must(template.New("bootstrap").Funcs(funcs).Parse(`# Rendered by github.com/sluicehq/sluice/internal/envoytest.
node: {id: envoytest, cluster: envoytest}
stats_config:
  stats_tags:
{{- range .StatsTags}}
  - tag_name: {{.Name}}
    regex: '{{.Regex}}'
{{- end}}
{{- if .StatsRejected}}
  stats_matcher:
    exclusion_list:
      patterns:
{{- range .StatsRejected}}
      - exact: {{q .}}
{{- end}}
{{- end}}
admin:
  address:
    socket_address: {address: 127.0.0.1, port_value: 0}
{{- if .LDSPath}}
dynamic_resources:
  lds_config:
    resource_api_version: V3
    path_config_source:
      path: {{q .LDSPath}}
{{- end}}
static_resources:
{{- if not .LDSPath}}
  listeners:
  - {{.ListenerYAML}}
{{- if .Listener2YAML}}
  - {{.Listener2YAML}}
{{- end}}
{{- end}}
  clusters:
{{- range .Clusters}}
  - name: {{q .Name}}
    type: {{if .DNS}}STRICT_DNS{{else}}STATIC{{end}}
    connect_timeout: 2s
{{- if or .HTTP2 .Filters}}
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{if .HTTP2}}{http2_protocol_options: {}}{{else}}{http_protocol_options: {}}{{end}}
{{- if .Filters}}
        http_filters:{{.Filters}}
        - name: envoy.filters.http.upstream_codec
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec
{{- end}}
{{- end}}
    circuit_breakers:
      thresholds:
      - {max_connections: 100000, max_pending_requests: 100000, max_requests: 100000, max_retries: 100}
    load_assignment:
      cluster_name: {{q .Name}}
      endpoints:
      - lb_endpoints:
{{- range .Endpoints}}
        - endpoint:
            address:
              socket_address: {address: {{q .Host}}, port_value: {{.Port}}}
{{- end}}
{{- end}}
{{- if .ExtraClusters}}
  {{.ExtraClusters}}
{{- end}}
`))

var ldsTmpl = template.Must(template.New("lds").Funcs(funcs).Parse(`# Rendered by github.com/sluicehq/sluice/internal/envoytest.
version_info: {{q .Version}}
resources:
- "@type": type.googleapis.com/envoy.config.listener.v3.Listener
  {{.ListenerYAML}}
`))

func indent(s, prefix string) string {
	s = strings.TrimRight(s, "\n")
	lines := strings.Split(s, "\n")
	for i := 1; i < len(lines); i++ {
		if lines[i] != "" {
			lines[i] = prefix + lines[i]
		}
	}
	return strings.Join(lines, "\n")
}

// renderListener renders the listener of normalized options o on port.
// The first line has no indentation; the others are indented by ind.
func renderListener(o Options, port int, ind string) (string, error) {
	var b strings.Builder
	if err := listenerTmpl.Execute(&b, renderData{O: o, Port: port, ListenerNm: ListenerName}); err != nil {
		return "", err
	}
	return indent(b.String(), ind), nil
}

func clusterList(o Options, upstream string) ([]clusterData, error) {
	names := []string{}
	for n := range o.Clusters {
		names = append(names, n)
	}
	sort.Strings(names)
	addrs := map[string]string{DefaultCluster: upstream}
	for n, a := range o.Clusters {
		addrs[n] = a
	}
	var out []clusterData
	for _, n := range append([]string{DefaultCluster}, names...) {
		list := []string{addrs[n]}
		if n == DefaultCluster && len(o.UpstreamEndpoints) > 0 {
			list = o.UpstreamEndpoints
		}
		c := clusterData{Name: n}
		if n == DefaultCluster && o.UpstreamWasm != nil {
			var b strings.Builder
			if err := listenerTmpl.ExecuteTemplate(&b, "wasm", o.UpstreamWasm); err != nil {
				return nil, err
			}
			c.Filters = indent(b.String(), "  ")
		}
		for _, a := range list {
			host, port, err := splitHostPort(a)
			if err != nil {
				return nil, fmt.Errorf("envoytest: cluster %q: %v", n, err)
			}
			c.Endpoints = append(c.Endpoints, endpointData{host, port})
			if net.ParseIP(host) == nil {
				c.DNS = true
			}
		}
		for _, h := range o.HTTP2Clusters {
			if h == n {
				c.HTTP2 = true
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// renderBootstrap renders the bootstrap for normalized options. With a
// non-empty ldsPath the listener is left out (it goes to the LDS file).
func renderBootstrap(o Options, upstream string, port int, ldsPath string) (string, error) {
	cl, err := clusterList(o, upstream)
	if err != nil {
		return "", err
	}
	data := struct {
		Clusters      []clusterData
		LDSPath       string
		ListenerYAML  string
		Listener2YAML string
		ExtraClusters string
		StatsTags     []StatsTag
		StatsRejected []string
	}{Clusters: cl, LDSPath: ldsPath, StatsTags: StatsTags, StatsRejected: o.StatsRejected}
	if x := strings.TrimSpace(o.ExtraClustersYAML); x != "" {
		var lines []string
		for _, l := range strings.Split(x, "\n") {
			if t := strings.TrimSpace(l); t == "" || strings.HasPrefix(t, "#") {
				continue
			}
			lines = append(lines, l)
		}
		data.ExtraClusters = indent(strings.Join(lines, "\n"), "  ")
	}
	if ldsPath == "" {
		if data.ListenerYAML, err = renderListener(o, port, "    "); err != nil {
			return "", err
		}
		if o.SecondListenerPort > 0 {
			o2 := o
			if o.Wasm != nil && (o.SecondListenerConfig != "" || o.SecondListenerVMID != "") {
				w := *o.Wasm
				if o.SecondListenerConfig != "" {
					w.Config = o.SecondListenerConfig
				}
				if o.SecondListenerVMID != "" {
					w.VMID = o.SecondListenerVMID
				}
				o2.Wasm = &w
			}
			var b strings.Builder
			if err := listenerTmpl.Execute(&b, renderData{O: o2, Port: o.SecondListenerPort, ListenerNm: SecondListenerName}); err != nil {
				return "", err
			}
			data.Listener2YAML = indent(b.String(), "    ")
		}
	}
	var b strings.Builder
	if err := bootstrapTmpl.Execute(&b, data); err != nil {
		return "", err
	}
	return b.String(), nil
}

func renderLDS(o Options, port int, version string) (string, error) {
	l, err := renderListener(o, port, "  ")
	if err != nil {
		return "", err
	}
	var b strings.Builder
	err = ldsTmpl.Execute(&b, struct{ Version, ListenerYAML string }{version, l})
	return b.String(), err
}

// RenderBootstrap returns the Envoy bootstrap YAML that Start would write for
// o, with the cluster DefaultCluster pointing at upstream (host:port) and the
// listener on 127.0.0.1:port (0: kernel's choice). With o.DynamicListeners
// the listener is not in the bootstrap; RenderLDS renders it. Useful to
// inspect or `Validate` a configuration.
func RenderBootstrap(o Options, upstream string, port int) (string, error) {
	n, err := o.normalized()
	if err != nil {
		return "", err
	}
	lds := ""
	if n.DynamicListeners {
		lds = "lds.yaml"
	}
	return renderBootstrap(n, upstream, port, lds)
}

// RenderLDS returns the file-based LDS document (a DiscoveryResponse in
// YAML) holding o's listener on 127.0.0.1:port with the given version_info.
func RenderLDS(o Options, port int, version string) (string, error) {
	n, err := o.normalized()
	if err != nil {
		return "", err
	}
	return renderLDS(n, port, version)
}
