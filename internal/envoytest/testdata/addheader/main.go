// Command addheader is a minimal proxy-wasm plugin used by the envoytest
// harness to prove that Envoy really loads and runs a Go wasm filter.
//
// It adds the response header "x-envoytest-wasm: <value>", where <value> is
// the plugin configuration (a plain string) or "loaded" when there is none,
// and the header "x-envoytest-route" with the xds.route_name property.
// A configuration of "fail" makes OnPluginStart fail, so that Envoy refuses
// the configuration.
package main

import (
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

func main() {}

func init() {
	proxywasm.SetPluginContext(func(uint32) types.PluginContext { return &pluginContext{value: "loaded"} })
}

type pluginContext struct {
	types.DefaultPluginContext
	value string
}

func (p *pluginContext) OnPluginStart(int) types.OnPluginStartStatus {
	cfg, err := proxywasm.GetPluginConfiguration()
	if err == nil && len(cfg) > 0 {
		p.value = string(cfg)
	}
	if p.value == "fail" {
		proxywasm.LogCritical("addheader: configuration: refusing to start (value \"fail\")")
		return types.OnPluginStartStatusFailed
	}
	proxywasm.LogInfof("addheader: plugin started with %q", p.value)
	return types.OnPluginStartStatusOK
}

func (p *pluginContext) NewHttpContext(uint32) types.HttpContext {
	return &httpContext{value: p.value}
}

type httpContext struct {
	types.DefaultHttpContext
	value string
	route string
}

func (h *httpContext) OnHttpRequestHeaders(int, bool) types.Action {
	if b, err := proxywasm.GetProperty([]string{"xds", "route_name"}); err == nil {
		h.route = string(b)
	}
	return types.ActionContinue
}

func (h *httpContext) OnHttpResponseHeaders(int, bool) types.Action {
	_ = proxywasm.AddHttpResponseHeader("x-envoytest-wasm", h.value)
	if h.route != "" {
		_ = proxywasm.AddHttpResponseHeader("x-envoytest-route", h.route)
	}
	return types.ActionContinue
}
