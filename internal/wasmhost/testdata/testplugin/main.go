// Command testplugin is a tiny proxy-wasm plugin used only by the tests of
// package wasmhost. It is built in TestMain with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared
//
// Every request is dispatched on its :path; each operation reports what the
// host returned through response headers (x-status, x-value, x-cas, ...), so
// the Go tests can assert the host's behaviour from the outside.
package main

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

func main() {}

func init() {
	proxywasm.SetVMContext(&vmContext{})
	// Host calls other than logging are refused while the VM starts
	// (_initialize): this lets the tests check that the host refuses them too.
	if v, _ := syscall.Getenv("TESTPLUGIN_SHARED_IN_INIT"); v == "1" {
		_, _, _ = proxywasm.GetSharedData("init")
	}
	if v, _ := syscall.Getenv("TESTPLUGIN_LOG_IN_INIT"); v == "1" {
		proxywasm.LogInfo("logging from init is allowed")
	}
}

// vmName is the VM configuration; Go globals are per VM (per worker).
var vmName string

type vmContext struct {
	types.DefaultVMContext
}

func (*vmContext) OnVMStart(int) types.OnVMStartStatus {
	cfg, err := proxywasm.GetVMConfiguration()
	if err == nil && string(cfg) == "fail-vm-start" {
		proxywasm.LogCritical("vm start refused: vm configuration says fail-vm-start")
		return types.OnVMStartStatusFailed
	}
	vmName = string(cfg)
	proxywasm.LogInfof("vm start: vm configuration %q", vmName)
	return types.OnVMStartStatusOK
}

func (*vmContext) NewPluginContext(contextID uint32) types.PluginContext {
	return &pluginContext{id: contextID, paused: map[uint32]string{}}
}

type config struct {
	Rate   *int   `json:"rate"`
	TickMS uint32 `json:"tick_ms"`
	Name   string `json:"name"`
}

type pluginContext struct {
	types.DefaultPluginContext
	id       uint32
	cfg      config
	rawCfg   string
	paused   map[uint32]string // stream context id -> what to do on the next tick
	requests proxywasm.MetricCounter
	ticks    proxywasm.MetricCounter
	inflight proxywasm.MetricGauge
	sizes    proxywasm.MetricHistogram
}

func (p *pluginContext) OnPluginStart(int) types.OnPluginStartStatus {
	raw, err := proxywasm.GetPluginConfiguration()
	if err != nil && !errors.Is(err, types.ErrorStatusNotFound) {
		proxywasm.LogErrorf("reading plugin configuration: %v", err)
		return types.OnPluginStartStatusFailed
	}
	p.rawCfg = string(raw)
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &p.cfg); err != nil {
			proxywasm.LogErrorf("invalid configuration: %v", err)
			return types.OnPluginStartStatusFailed
		}
	}
	if p.cfg.Rate != nil && *p.cfg.Rate <= 0 {
		proxywasm.LogErrorf("invalid configuration: field \"rate\" must be positive, got %d", *p.cfg.Rate)
		return types.OnPluginStartStatusFailed
	}
	if p.cfg.TickMS > 0 {
		if err := proxywasm.SetTickPeriodMilliSeconds(p.cfg.TickMS); err != nil {
			proxywasm.LogErrorf("set tick period: %v", err)
			return types.OnPluginStartStatusFailed
		}
	}
	if _, err := proxywasm.RegisterSharedQueue("work"); err != nil {
		proxywasm.LogErrorf("register queue: %v", err)
		return types.OnPluginStartStatusFailed
	}
	p.requests = proxywasm.DefineCounterMetric("test_requests_total")
	p.ticks = proxywasm.DefineCounterMetric("test_ticks_total")
	p.inflight = proxywasm.DefineGaugeMetric("test_paused")
	p.sizes = proxywasm.DefineHistogramMetric("test_sizes")
	proxywasm.LogInfof("plugin started: root context %d, configuration %q", p.id, p.rawCfg)
	return types.OnPluginStartStatusOK
}

// OnQueueReady drains the queue into the shared key "dequeued".
func (p *pluginContext) OnQueueReady(queueID uint32) {
	for {
		v, err := proxywasm.DequeueSharedQueue(queueID)
		if err != nil {
			return
		}
		old, cas, _ := proxywasm.GetSharedData("dequeued")
		next := string(old) + string(v) + "@" + vmName + ";"
		if err := proxywasm.SetSharedData("dequeued", []byte(next), cas); err != nil {
			proxywasm.LogErrorf("queue: %v", err)
		}
	}
}

// OnTick resumes or rejects every paused stream, as the rate limiter does.
func (p *pluginContext) OnTick() {
	p.ticks.Increment(1)
	for id, what := range p.paused {
		if err := proxywasm.SetEffectiveContext(id); err != nil {
			proxywasm.LogWarnf("tick: set effective context %d: %v", id, err)
			delete(p.paused, id)
			continue
		}
		switch what {
		case "deny":
			err := proxywasm.SendHttpResponse(503, [][2]string{{"x-from", "tick"}}, []byte("denied on tick"), -1)
			if err != nil {
				proxywasm.LogErrorf("tick: send response to %d: %v", id, err)
			}
		case "keep":
			continue // leave it paused
		default:
			if err := proxywasm.ResumeHttpRequest(); err != nil {
				proxywasm.LogErrorf("tick: resume %d: %v", id, err)
			}
		}
		p.inflight.Add(-1)
		delete(p.paused, id)
	}
}

func (p *pluginContext) NewHttpContext(contextID uint32) types.HttpContext {
	return &httpContext{id: contextID, plugin: p}
}

type httpContext struct {
	types.DefaultHttpContext
	id     uint32
	plugin *pluginContext
	path   string
	query  map[string]string
	// respHeaders are added to the response in OnHttpResponseHeaders.
	respHeaders [][2]string
}

func statusString(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, types.ErrorStatusNotFound):
		return "not_found"
	case errors.Is(err, types.ErrorStatusBadArgument):
		return "bad_argument"
	case errors.Is(err, types.ErrorStatusCasMismatch):
		return "cas_mismatch"
	case errors.Is(err, types.ErrorStatusEmpty):
		return "empty"
	default:
		return "error:" + err.Error()
	}
}

func parseQuery(raw string) map[string]string {
	q := map[string]string{}
	for _, kv := range strings.Split(raw, "&") {
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		q[k] = v
	}
	return q
}

func (h *httpContext) reply(status uint32, headers [][2]string, body string) types.Action {
	if err := proxywasm.SendHttpResponse(status, headers, []byte(body), -1); err != nil {
		proxywasm.LogErrorf("send response: %v", err)
	}
	return types.ActionPause
}

func (h *httpContext) OnHttpRequestHeaders(numHeaders int, endOfStream bool) types.Action {
	h.plugin.requests.Increment(1)
	fullPath, err := proxywasm.GetHttpRequestHeader(":path")
	if err != nil {
		proxywasm.LogErrorf("no :path: %v", err)
		return types.ActionContinue
	}
	path, rawQuery, _ := strings.Cut(fullPath, "?")
	h.path = path
	h.query = parseQuery(rawQuery)
	q := h.query

	switch path {
	case "/shared/get":
		v, cas, err := proxywasm.GetSharedData(q["key"])
		return h.reply(200, [][2]string{
			{"x-status", statusString(err)}, {"x-value", string(v)}, {"x-cas", strconv.FormatUint(uint64(cas), 10)},
		}, "")

	case "/shared/set":
		cas, _ := strconv.ParseUint(q["cas"], 10, 32)
		err := proxywasm.SetSharedData(q["key"], []byte(q["value"]), uint32(cas))
		return h.reply(200, [][2]string{{"x-status", statusString(err)}}, "")

	case "/shared/incr":
		// A CAS loop, as a rate limiter would do it.
		key := q["key"]
		for attempt := 1; ; attempt++ {
			v, cas, err := proxywasm.GetSharedData(key)
			n := 0
			if err == nil {
				n, _ = strconv.Atoi(string(v))
			} else if !errors.Is(err, types.ErrorStatusNotFound) {
				return h.reply(500, [][2]string{{"x-status", statusString(err)}}, "")
			} else {
				// Missing key: cas 0 would be an unconditional set that
				// overwrites a key another VM created meanwhile (a lost
				// update). A set on a missing key succeeds whatever cas is
				// passed, so pass one the new key cannot carry: the loser
				// of a creation race gets a mismatch and retries.
				cas = ^uint32(0)
			}
			err = proxywasm.SetSharedData(key, []byte(strconv.Itoa(n+1)), cas)
			if err == nil {
				return h.reply(200, [][2]string{{"x-status", "ok"}, {"x-value", strconv.Itoa(n + 1)}, {"x-attempts", strconv.Itoa(attempt)}}, "")
			}
			if !errors.Is(err, types.ErrorStatusCasMismatch) || attempt > 100 {
				return h.reply(500, [][2]string{{"x-status", statusString(err)}}, "")
			}
		}

	case "/headers":
		all, err := proxywasm.GetHttpRequestHeaders()
		if err != nil {
			proxywasm.LogErrorf("get headers: %v", err)
		}
		h.respHeaders = append(h.respHeaders, [2]string{"x-request-header-count", strconv.Itoa(len(all))})
		h.respHeaders = append(h.respHeaders, [2]string{"x-num-headers-arg", strconv.Itoa(numHeaders)})
		h.respHeaders = append(h.respHeaders, [2]string{"x-end-of-stream-arg", strconv.FormatBool(endOfStream)})
		if len(all) > 0 {
			h.respHeaders = append(h.respHeaders, [2]string{"x-first-request-header", all[0][0]})
		}
		_, err = proxywasm.GetHttpRequestHeader("x-does-not-exist")
		h.respHeaders = append(h.respHeaders, [2]string{"x-missing-header", statusString(err)})
		dup, _ := proxywasm.GetHttpRequestHeader("x-dup")
		h.respHeaders = append(h.respHeaders, [2]string{"x-dup-first", dup})
		_, err = proxywasm.GetHttpResponseHeader("server")
		h.respHeaders = append(h.respHeaders, [2]string{"x-response-map-in-request-phase", statusString(err)})
		must(proxywasm.AddHttpRequestHeader("X-Added", "1"))
		must(proxywasm.ReplaceHttpRequestHeader("x-replace", "new"))
		must(proxywasm.RemoveHttpRequestHeader("x-remove"))
		return types.ActionContinue

	case "/props":
		hdrs := [][2]string{}
		for _, p := range []string{"source.address", "xds.route_name", "plugin_vm_id", "plugin_name", "plugin_root_id", "request.path", "request.url_path", "node.id", "no.such.property", "sluice_custom"} {
			v, err := proxywasm.GetProperty(strings.Split(p, "."))
			name := "x-prop-" + strings.ReplaceAll(p, ".", "-")
			if err != nil {
				hdrs = append(hdrs, [2]string{name, "<" + statusString(err) + ">"})
			} else {
				hdrs = append(hdrs, [2]string{name, string(v)})
			}
		}
		if v, err := proxywasm.GetProperty([]string{"source", "port"}); err == nil && len(v) == 8 {
			var port int64
			for i := 7; i >= 0; i-- {
				port = port<<8 | int64(v[i])
			}
			hdrs = append(hdrs, [2]string{"x-prop-source-port", strconv.FormatInt(port, 10)})
		}
		if v, err := proxywasm.GetProperty([]string{"metadata", "filter.name.with.dots", "key"}); err == nil {
			hdrs = append(hdrs, [2]string{"x-prop-dotted-segment", string(v)})
		}
		err := proxywasm.SetProperty([]string{"sluice_custom"}, []byte("set-by-plugin"))
		hdrs = append(hdrs, [2]string{"x-set-property", statusString(err)})
		if v, err := proxywasm.GetProperty([]string{"sluice_custom"}); err == nil {
			hdrs = append(hdrs, [2]string{"x-prop-after-set", string(v)})
		}
		return h.reply(200, hdrs, "")

	case "/deny":
		return h.reply(429, [][2]string{{"retry-after", "7"}, {"x-ratelimit-remaining", "0"}}, "slow down\n")

	case "/deny-continue":
		// Sends a local response but returns Continue: Envoy stops iteration anyway.
		if err := proxywasm.SendHttpResponse(403, nil, nil, -1); err != nil {
			proxywasm.LogErrorf("send response: %v", err)
		}
		return types.ActionContinue

	case "/deny-twice":
		_ = proxywasm.SendHttpResponse(429, nil, []byte("first"), -1)
		err := proxywasm.SendHttpResponse(500, nil, []byte("second"), -1)
		proxywasm.LogInfof("second local response: %s", statusString(err))
		return types.ActionPause

	case "/pause":
		what := q["on_tick"]
		if what == "" {
			what = "resume"
		}
		h.plugin.paused[h.id] = what
		h.plugin.inflight.Add(1)
		return types.ActionPause

	case "/metrics":
		h.plugin.sizes.Record(uint64(len(fullPath)))
		h.plugin.inflight.Add(5)
		h.plugin.inflight.Add(-2)
		return h.reply(200, [][2]string{
			{"x-requests", strconv.FormatUint(h.plugin.requests.Value(), 10)},
			{"x-gauge", strconv.FormatInt(h.plugin.inflight.Value(), 10)},
		}, "")

	case "/log":
		proxywasm.LogTrace("a trace line")
		proxywasm.LogDebug("a debug line")
		proxywasm.LogInfo("an info line")
		proxywasm.LogWarn("a warn line")
		proxywasm.LogError("an error line")
		proxywasm.LogCritical("a critical line")
		println("hello from println")
		return h.reply(204, nil, "")

	case "/time":
		now := time.Now()
		return h.reply(200, [][2]string{
			{"x-now-unix-nano", strconv.FormatInt(now.UnixNano(), 10)},
			{"x-now", now.UTC().Format(time.RFC3339Nano)},
		}, "")

	case "/config":
		return h.reply(200, [][2]string{{"x-config", h.plugin.rawCfg}, {"x-name", h.plugin.cfg.Name}}, "")

	case "/effective":
		id, _ := strconv.ParseUint(q["id"], 10, 32)
		err := proxywasm.SetEffectiveContext(uint32(id))
		// Switch back so the reply goes to this stream.
		_ = proxywasm.SetEffectiveContext(h.id)
		return h.reply(200, [][2]string{{"x-status", statusString(err)}}, "")

	case "/vmconfig-in-request":
		v, err := proxywasm.GetVMConfiguration()
		_, perr := proxywasm.GetPluginConfiguration()
		return h.reply(200, [][2]string{{"x-vm-config", string(v)}, {"x-vm-status", statusString(err)}, {"x-plugin-config-status", statusString(perr)}}, "")

	case "/big":
		n, _ := strconv.Atoi(q["n"])
		buf := make([]byte, n)
		for i := range buf {
			buf[i] = 'x'
		}
		return h.reply(200, nil, string(buf))

	case "/callout":
		cluster := q["cluster"]
		if cluster == "" {
			cluster = "auth"
		}
		_, err := proxywasm.DispatchHttpCall(cluster, [][2]string{{":method", "GET"}, {":path", "/check"}, {":authority", "auth.local"}}, nil, nil, 500,
			func(numHeaders, bodySize, numTrailers int) {
				hs, err := proxywasm.GetHttpCallResponseHeaders()
				status := ""
				for _, kv := range hs {
					if kv[0] == ":status" {
						status = kv[1]
					}
				}
				if err != nil {
					_ = proxywasm.SendHttpResponse(502, [][2]string{{"x-callout", "failed"}}, nil, -1)
					return
				}
				body, _ := proxywasm.GetHttpCallResponseBody(0, bodySize)
				if status != "200" {
					_ = proxywasm.SendHttpResponse(403, [][2]string{{"x-callout-status", status}}, body, -1)
					return
				}
				must(proxywasm.AddHttpRequestHeader("x-auth-user", string(body)))
				must(proxywasm.ResumeHttpRequest())
			})
		if err != nil {
			return h.reply(500, [][2]string{{"x-status", statusString(err)}}, "")
		}
		return types.ActionPause

	case "/enqueue":
		qid, err := proxywasm.ResolveSharedQueue("", "work")
		if err == nil {
			err = proxywasm.EnqueueSharedQueue(qid, []byte(q["v"]))
		}
		return h.reply(200, [][2]string{{"x-status", statusString(err)}}, "")

	case "/env":
		v, ok := syscall.Getenv("GREETING")
		return h.reply(200, [][2]string{{"x-greeting", v}, {"x-found", strconv.FormatBool(ok)}}, "")

	case "/panic":
		panic("boom: test plugin asked to panic")
	}
	return types.ActionContinue
}

func (h *httpContext) OnHttpResponseHeaders(numHeaders int, endOfStream bool) types.Action {
	status, err := proxywasm.GetHttpResponseHeader(":status")
	if err != nil {
		status = "<" + statusString(err) + ">"
	}
	must(proxywasm.AddHttpResponseHeader("x-plugin-saw-status", status))
	_, err = proxywasm.GetHttpRequestHeader(":path")
	must(proxywasm.AddHttpResponseHeader("x-request-map-in-response-phase", statusString(err)))
	for _, kv := range h.respHeaders {
		must(proxywasm.AddHttpResponseHeader(kv[0], kv[1]))
	}
	if h.path == "/headers" {
		must(proxywasm.ReplaceHttpResponseHeader("server", "sluice-test"))
		must(proxywasm.RemoveHttpResponseHeader("x-upstream-secret"))
		must(proxywasm.AddHttpResponseHeader("x-resp-num-headers-arg", strconv.Itoa(numHeaders)))
		must(proxywasm.AddHttpResponseHeader("x-resp-end-of-stream-arg", strconv.FormatBool(endOfStream)))
	}
	if h.path == "/deny-in-response" {
		if err := proxywasm.SendHttpResponse(502, [][2]string{{"x-replaced", "yes"}}, []byte("replaced upstream response"), -1); err != nil {
			proxywasm.LogErrorf("send response: %v", err)
		}
		return types.ActionPause
	}
	return types.ActionContinue
}

func (h *httpContext) OnHttpRequestBody(bodySize int, endOfStream bool) types.Action {
	if h.path == "/pause" && h.query["body"] == "hold" {
		proxywasm.LogInfo("request body held")
		return types.ActionPause // the body waits with the headers
	}
	if h.path == "/rewrite" {
		body, err := proxywasm.GetHttpRequestBody(0, bodySize)
		if err != nil {
			proxywasm.LogErrorf("request body: %v", err)
		}
		must(proxywasm.PrependHttpRequestBody([]byte("<")))
		must(proxywasm.AppendHttpRequestBody([]byte(">")))
		h.respHeaders = append(h.respHeaders, [2]string{"x-request-body-seen", string(body)})
		h.respHeaders = append(h.respHeaders, [2]string{"x-request-body-eos", strconv.FormatBool(endOfStream)})
	}
	return types.ActionContinue
}

// OnHttpRequestTrailers adds a trailer (the map is writable here) that
// counts the trailers it was told of; /pause?trailers=hold holds the
// request there (the tick resumes it).
func (h *httpContext) OnHttpRequestTrailers(numTrailers int) types.Action {
	must(proxywasm.AddHttpRequestTrailer("x-plugin-trailer", strconv.Itoa(numTrailers)))
	if h.path == "/pause" && h.query["trailers"] == "hold" {
		proxywasm.LogInfo("request trailers held")
		h.plugin.paused[h.id] = "resume"
		h.plugin.inflight.Add(1)
		return types.ActionPause
	}
	return types.ActionContinue
}

// OnHttpResponseTrailers adds a trailer; ?resp_trailers=hold holds the
// response there.
func (h *httpContext) OnHttpResponseTrailers(numTrailers int) types.Action {
	must(proxywasm.AddHttpResponseTrailer("x-plugin-trailer", strconv.Itoa(numTrailers)))
	if h.query["resp_trailers"] == "hold" {
		return types.ActionPause
	}
	return types.ActionContinue
}

func (h *httpContext) OnHttpResponseBody(bodySize int, endOfStream bool) types.Action {
	if h.query["resp_body"] == "hold" {
		proxywasm.LogInfof("response body held, end_of_stream %v", endOfStream)
		return types.ActionPause // the response waits (nothing resumes it)
	}
	if h.path == "/rewrite" {
		body, _ := proxywasm.GetHttpResponseBody(0, bodySize)
		must(proxywasm.ReplaceHttpResponseBody([]byte("rewritten:" + string(body))))
		// Headers are no longer writable once they went downstream.
		if err := proxywasm.AddHttpResponseHeader("x-too-late", "1"); err != nil {
			proxywasm.LogInfof("add header in response body: %s", statusString(err))
		}
	}
	return types.ActionContinue
}

func (h *httpContext) OnHttpStreamDone() {
	if _, ok := h.plugin.paused[h.id]; ok {
		delete(h.plugin.paused, h.id)
		h.plugin.inflight.Add(-1)
	}
	_, err := proxywasm.GetHttpRequestHeader(":path")
	proxywasm.LogInfof("stream done: %d %s (request headers in log: %s)", h.id, h.path, statusString(err))
}

func must(err error) {
	if err != nil {
		proxywasm.LogErrorf("host call failed: %v", err)
	}
}
