//go:build wasip1

// Command streamorder is a proxy-wasm HTTP filter that logs, at warn level,
// the end-of-stream callbacks Envoy makes: "streamorder: <id> on_log" from
// OnHttpStreamDone (the SDK's proxy_on_log), and "<id> on_done" and
// "<id> on_delete" from order_on_done and order_on_delete, which the test
// exports as proxy_on_done and proxy_on_delete in place of the SDK's
// (internal/wasmexports) after logging. TestStreamEndInEnvoy reads the
// order and which callbacks Envoy skips when they are not exported.
package main

import (
	_ "unsafe" // go:linkname

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

func main() {}

func init() {
	proxywasm.SetPluginContext(func(uint32) types.PluginContext { return &pluginContext{} })
}

type pluginContext struct{ types.DefaultPluginContext }

func (*pluginContext) NewHttpContext(id uint32) types.HttpContext { return &httpContext{id: id} }

type httpContext struct {
	types.DefaultHttpContext
	id uint32
}

func (h *httpContext) OnHttpRequestBody(int, bool) types.Action {
	proxywasm.LogWarnf("streamorder: %d on_request_body", h.id)
	return types.ActionContinue
}

func (h *httpContext) OnHttpStreamDone() { proxywasm.LogWarnf("streamorder: %d on_log", h.id) }

//go:linkname sdkOnDone github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/internal.proxyOnDone
func sdkOnDone(contextID uint32) bool

//go:linkname sdkOnDelete github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/internal.proxyOnDelete
func sdkOnDelete(contextID uint32)

//go:wasmexport order_on_done
func orderOnDone(id uint32) bool {
	proxywasm.LogWarnf("streamorder: %d on_done", id)
	return sdkOnDone(id)
}

//go:wasmexport order_on_delete
func orderOnDelete(id uint32) {
	proxywasm.LogWarnf("streamorder: %d on_delete", id)
	sdkOnDelete(id)
}
