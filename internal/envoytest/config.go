package envoytest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"time"
)

// DefaultCluster is the name of the cluster that points at Options.Upstream
// and the default cluster of a Route.
const DefaultCluster = "upstream"

// ListenerName is the name of the HTTP listener the harness renders.
const ListenerName = "sluice_listener"

// SecondListenerName is the name of the listener Options.SecondListenerPort
// adds.
const SecondListenerName = "sluice_listener_2"

// Options describe one Envoy instance. The zero value is usable: Envoy with no
// HTTP filter in front of a fresh Upstream, one route named "default" for "/".
type Options struct {
	// Bin is the Envoy binary. Empty: FindEnvoy.
	Bin string
	// Dir holds the rendered bootstrap, the LDS file and envoy.log.
	// Empty: a new temporary directory, removed by Stop (logs stay readable
	// through Logs). StartT uses t.TempDir.
	Dir string

	// Upstream is host:port of the cluster DefaultCluster. Empty: Start starts
	// an Upstream (see Envoy.Upstream) and closes it in Stop.
	Upstream string
	// UpstreamEndpoints, when set, replaces Upstream: the cluster
	// DefaultCluster balances round-robin over these host:port endpoints
	// (a front Envoy over a fleet).
	UpstreamEndpoints []string
	// Clusters are additional static clusters, name → host:port.
	Clusters map[string]string
	// HTTP2Clusters names clusters of Clusters that speak HTTP/2 (gRPC,
	// e.g. the rate-limit service of global rules).
	HTTP2Clusters []string
	// ExtraClustersYAML is a YAML list of Cluster entries appended verbatim
	// to static_resources.clusters (e.g. the shipped
	// envoy/ratelimit/cluster.yaml, its address rewritten).
	ExtraClustersYAML string
	// Routes in match order. Empty: one route {Name: "default", Prefix: "/"}.
	Routes []Route

	// XFFNumTrustedHops is the HTTP connection manager's xff_num_trusted_hops.
	// With 1 (and use_remote_address: true), the client address Envoy uses
	// (source.address) is the last X-Forwarded-For entry the client sent,
	// which is how one test client poses as many client IPs (see ClientIP).
	XFFNumTrustedHops int
	// UseRemoteAddress is the HTTP connection manager's use_remote_address.
	// Nil means true (the harness default); false is Envoy's own default, in
	// which Envoy appends nothing to X-Forwarded-For and takes source.address
	// from it.
	UseRemoteAddress *bool

	// StartTimeHeader, if set, names a request header Envoy adds to every
	// request it forwards: the time it received the request
	// (%START_TIME(%s.%6f)%, seconds since the epoch), so that the Upstream
	// can tell the order in which requests reached Envoy (Arrivals).
	StartTimeHeader string

	// At most one of Wasm and LocalRateLimit may be set; neither means no HTTP
	// filter but the router.
	Wasm           *Wasm
	LocalRateLimit *LocalRateLimit
	// GlobalRateLimit adds Envoy's native global rate-limit filter
	// (envoy.filters.http.ratelimit) in front of the router, which calls
	// the rate-limit service for every request.
	GlobalRateLimit *GlobalRateLimit

	// DynamicListeners serves the listener from a file-based LDS source
	// (dynamic_resources.lds_config.path_config_source) instead of
	// static_resources, so that Envoy.Reconfigure can replace it while Envoy
	// runs. The listener port is then chosen by the harness (ListenerPort).
	DynamicListeners bool
	// ListenerPort is the listener's port on 127.0.0.1. 0: a free port (the
	// kernel's choice read back from the admin API, or with DynamicListeners
	// a port found free by the harness).
	ListenerPort int

	// Concurrency is --concurrency, the number of worker threads. Default 2.
	Concurrency int
	// LogLevel is --log-level. Default "info".
	LogLevel string
	// ComponentLogLevel is --component-log-level, e.g. "wasm:debug,http:debug".
	ComponentLogLevel string
	// WasmDebug adds wasm:debug to ComponentLogLevel.
	WasmDebug bool
	// DrainTime is --drain-time-s (whole seconds, at least 1), used with
	// --drain-strategy immediate: how long connections to a replaced listener
	// filter chain stay open. Default 1s.
	DrainTime time.Duration
	// StartTimeout bounds the wait for /ready (and listener port discovery).
	// Default 2 minutes (V8 compiles a Go plugin in seconds, but in over a
	// minute on a loaded machine). The context given to Start can cut it
	// shorter.
	StartTimeout time.Duration
	// AccessLogFormat, if set, adds a file access log to the HTTP
	// connection manager, one line per request in this text format (e.g.
	// with %FILTER_STATE(wasm.sluice_decision:PLAIN)%), written to
	// AccessLogPath (in both modes: Dir is mounted in the container).
	AccessLogFormat string
	// AccessLogPath is the access log's file. Empty: access.log in Dir
	// (Envoy.AccessLogPath says where).
	AccessLogPath string

	// WebSocket adds upgrade_configs [{upgrade_type: websocket}] to the
	// HTTP connection manager.
	WebSocket bool
	// SecondListenerPort, if > 0, adds a second listener (SecondListenerName)
	// on that port with the same connection manager and filters (so the
	// same plugin and vm_id), as a second entry point into one Envoy.
	SecondListenerPort int
	// SecondListenerConfig, if set, is the plugin configuration of the
	// second listener (same module and vm_id, another configuration).
	SecondListenerConfig string
	// SecondListenerVMID, if set, is the vm_id of the second listener's
	// filter (another VM, another shared-data namespace).
	SecondListenerVMID string
	// Wasm2, if set, is a second Wasm filter after Wasm in the same filter
	// chain (say another vm_id, as two WasmPlugins in different phases).
	Wasm2 *Wasm
	// UpstreamWasm, if set, is a Wasm filter of the cluster DefaultCluster
	// (an upstream HTTP filter: the cluster's HttpProtocolOptions
	// http_filters, before envoy.filters.http.upstream_codec), run for each
	// attempt the router makes, retries included.
	UpstreamWasm *Wasm

	// StatsRejected are stat names (as /stats lists them, e.g.
	// "wasmcustom.sluice.table.layout_writes") that
	// stats_config.stats_matcher rejects: Envoy hands out a null stat for
	// them, which counts nothing and reads 0.
	StatsRejected []string

	// ExtraArgs are appended to Envoy's command line.
	ExtraArgs []string
	// LogOutput, if set, also receives Envoy's stdout and stderr.
	LogOutput io.Writer
}

// Route is one route of the virtual host; its Name is what the plugin reads
// as the xds.route_name property.
type Route struct {
	Name   string // route name; required, unique
	Prefix string // path prefix; "" means "/"
	// Cluster is the target cluster; "" means DefaultCluster.
	Cluster string
	// DirectResponse, if set (a status), makes the route answer itself
	// (direct_response, Envoy's own reply from the router) with DirectBody
	// instead of forwarding to Cluster.
	DirectResponse int
	DirectBody     string
	// NoWasm disables the wasm filter on this route
	// (typed_per_filter_config with envoy.config.route.v3.FilterConfig
	// disabled: true).
	NoWasm bool
	// RetryOn, if set, is the route's retry_policy.retry_on (e.g. "5xx"),
	// with NumRetries retries (0: Envoy's default, 1).
	RetryOn    string
	NumRetries int
	// RetriableStatusCodes are the retry_policy's retriable_status_codes
	// (with RetryOn "retriable-status-codes").
	RetriableStatusCodes []int
	// InternalRedirect makes Envoy follow the upstream's 302 itself
	// (internal_redirect_policy with its defaults).
	InternalRedirect bool
}

// Wasm configures the envoy.filters.http.wasm filter.
type Wasm struct {
	// File is the .wasm module. A relative path is made absolute against the
	// current working directory: Envoy resolves code.local.filename against
	// its own working directory, which the harness does not control.
	File string
	// Config is the plugin configuration (a JSON document for Sluice), passed
	// as a google.protobuf.StringValue; it arrives in the plugin verbatim.
	// Empty: no configuration field.
	Config string
	// ConfigAsStruct passes Config (which must then be a JSON object) as a
	// google.protobuf.Struct instead: Envoy hands the plugin its JSON
	// serialization, in which every number is a double.
	ConfigAsStruct bool
	// ConfigAsBytes passes Config as a google.protobuf.BytesValue (base64
	// in the YAML); Envoy hands the plugin its bytes as they are.
	ConfigAsBytes bool
	// VMID is vm_config.vm_id, the shared-data namespace. Default "sluice".
	VMID string
	// NoVMID leaves vm_id out (Envoy's default, the empty namespace).
	NoVMID bool
	// Name is the plugin name (it appears in Envoy's wasm log lines and
	// wasm.<name>.* stats). Default "sluice".
	Name string
	// RootID is the plugin's root_id. Default empty.
	RootID string
	// FailurePolicy is "FAIL_CLOSED" (Envoy's default), "FAIL_OPEN" or
	// "FAIL_RELOAD". Empty: not set.
	FailurePolicy string
	// AllowOnHeadersStopIteration sets allow_on_headers_stop_iteration
	// (Envoy >= 1.35): a header callback's StopIteration then stops the
	// headers alone, and the body goes on to the plugin.
	AllowOnHeadersStopIteration bool
	// Env are vm_config.environment_variables.key_values.
	Env map[string]string
	// AllowedCapabilities, if set, are the plugin's
	// capability_restriction_config.allowed_capabilities: the host calls
	// (WASI ones included) and callbacks the module may use; proxy-wasm-
	// cpp-host stubs the other imports and ignores the other exports.
	AllowedCapabilities []string
}

// LocalRateLimit configures Envoy's native envoy.filters.http.local_ratelimit
// filter (token bucket, filter_enabled and filter_enforced at 100%), the
// baseline that benchmarks compare Sluice with.
type LocalRateLimit struct {
	MaxTokens     uint32        // bucket capacity; required
	TokensPerFill uint32        // default MaxTokens
	FillInterval  time.Duration // at least 50ms; default 1s
	// PerClientIP gives each client address its own bucket (a remote_address
	// descriptor with dynamic values, Envoy >= 1.34) instead of one
	// process-wide bucket.
	PerClientIP bool
	// MaxDynamicDescriptors is the LRU size of per-client buckets with
	// PerClientIP (Envoy's default is 20). 0: 20.
	MaxDynamicDescriptors uint32
	// Headers enables X-RateLimit-* headers (enable_x_ratelimit_headers: DRAFT_VERSION_03).
	Headers bool
	// StatPrefix is the stat prefix; stats are
	// <StatPrefix>.http_local_rate_limit.{enabled,ok,rate_limited,enforced}.
	// Default "local_rate_limit".
	StatPrefix string
}

// GlobalRateLimit configures envoy.filters.http.ratelimit: one call to the
// service per request, with the descriptor [remote_address: <client IP>]
// (the service's configuration must give that descriptor a limit in
// Domain).
type GlobalRateLimit struct {
	Cluster string        // an HTTP/2 cluster of Clusters
	Domain  string        // required
	Timeout time.Duration // default 50ms
	// FailureModeDeny rejects requests when the service cannot answer
	// (Envoy's default allows them).
	FailureModeDeny bool
	// Header, if set, makes the descriptor [<Header>: <its value>] (a
	// request_headers action) instead of [remote_address: <client IP>].
	Header string
}

var routeNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// normalized returns a copy of o with defaults filled in, or an error for
// contradictory or invalid options. It does not start anything.
func (o Options) normalized() (Options, error) {
	if o.Wasm != nil && o.LocalRateLimit != nil {
		return o, errors.New("envoytest: set at most one of Options.Wasm and Options.LocalRateLimit")
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 2
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	if o.DrainTime <= 0 {
		o.DrainTime = time.Second
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 2 * time.Minute
	}
	if o.XFFNumTrustedHops < 0 {
		return o, errors.New("envoytest: XFFNumTrustedHops < 0")
	}
	if len(o.Routes) == 0 {
		o.Routes = []Route{{Name: "default", Prefix: "/"}}
	} else {
		o.Routes = append([]Route(nil), o.Routes...)
	}
	if g := o.GlobalRateLimit; g != nil {
		c := *g
		if c.Cluster == "" || c.Domain == "" {
			return o, errors.New("envoytest: GlobalRateLimit needs Cluster and Domain")
		}
		if c.Timeout <= 0 {
			c.Timeout = 50 * time.Millisecond
		}
		o.GlobalRateLimit = &c
	}
	for _, a := range o.UpstreamEndpoints {
		if _, _, err := splitHostPort(a); err != nil {
			return o, fmt.Errorf("envoytest: UpstreamEndpoints: %v", err)
		}
	}
	for _, n := range o.HTTP2Clusters {
		if _, ok := o.Clusters[n]; !ok {
			return o, fmt.Errorf("envoytest: HTTP2Clusters: %q is not in Clusters", n)
		}
	}
	clusters := map[string]bool{DefaultCluster: true}
	for name, addr := range o.Clusters {
		if name == DefaultCluster {
			return o, fmt.Errorf("envoytest: Clusters may not redefine %q (use Options.Upstream)", DefaultCluster)
		}
		if !routeNameRE.MatchString(name) {
			return o, fmt.Errorf("envoytest: bad cluster name %q", name)
		}
		if _, _, err := splitHostPort(addr); err != nil {
			return o, fmt.Errorf("envoytest: cluster %q: %v", name, err)
		}
		clusters[name] = true
	}
	seen := map[string]bool{}
	for i := range o.Routes {
		r := &o.Routes[i]
		if !routeNameRE.MatchString(r.Name) {
			return o, fmt.Errorf("envoytest: Routes[%d]: bad or empty name %q", i, r.Name)
		}
		if seen[r.Name] {
			return o, fmt.Errorf("envoytest: Routes[%d]: duplicate name %q", i, r.Name)
		}
		seen[r.Name] = true
		if r.Prefix == "" {
			r.Prefix = "/"
		}
		if r.Cluster == "" {
			r.Cluster = DefaultCluster
		}
		if !clusters[r.Cluster] {
			return o, fmt.Errorf("envoytest: Routes[%d]: unknown cluster %q", i, r.Cluster)
		}
	}
	for _, w := range []**Wasm{&o.Wasm, &o.Wasm2, &o.UpstreamWasm} {
		if *w != nil {
			c, err := normalizedWasm(**w)
			if err != nil {
				return o, err
			}
			*w = c
		}
	}
	if l := o.LocalRateLimit; l != nil {
		c := *l
		if c.MaxTokens == 0 {
			return o, errors.New("envoytest: LocalRateLimit.MaxTokens must be > 0")
		}
		if c.TokensPerFill == 0 {
			c.TokensPerFill = c.MaxTokens
		}
		if c.FillInterval == 0 {
			c.FillInterval = time.Second
		}
		if c.FillInterval < 50*time.Millisecond {
			return o, errors.New("envoytest: LocalRateLimit.FillInterval must be >= 50ms (an Envoy rule)")
		}
		if c.MaxDynamicDescriptors == 0 {
			c.MaxDynamicDescriptors = 20
		}
		if c.StatPrefix == "" {
			c.StatPrefix = "local_rate_limit"
		}
		o.LocalRateLimit = &c
	}
	return o, nil
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port in %q", addr)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return host, port, nil
}

// normalizedWasm returns c with defaults filled in, or an error.
func normalizedWasm(c Wasm) (*Wasm, error) {
	if c.File == "" {
		return nil, errors.New("envoytest: Wasm.File is required")
	}
	abs, err := filepath.Abs(c.File)
	if err != nil {
		return nil, err
	}
	c.File = abs
	if c.VMID == "" && !c.NoVMID {
		c.VMID = "sluice"
	}
	if c.ConfigAsStruct && c.ConfigAsBytes {
		return nil, errors.New("envoytest: set at most one of Wasm.ConfigAsStruct and Wasm.ConfigAsBytes")
	}
	if c.Name == "" {
		c.Name = "sluice"
	}
	switch c.FailurePolicy {
	case "", "FAIL_CLOSED", "FAIL_OPEN", "FAIL_RELOAD":
	default:
		return nil, fmt.Errorf("envoytest: Wasm.FailurePolicy %q: want FAIL_CLOSED, FAIL_OPEN or FAIL_RELOAD", c.FailurePolicy)
	}
	return &c, nil
}
