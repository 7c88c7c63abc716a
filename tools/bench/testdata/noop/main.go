// Command noop is a proxy-wasm HTTP filter that does nothing: every callback
// is the Go SDK's default. The bench runs it in the in-process host to
// measure the floor every Go plugin pays (the host's stream emulation, the
// ABI dispatch and the SDK's context bookkeeping), so that the rest of
// Sluice's per-request time can be attributed to Sluice itself.
package main

import (
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

func main() {}

func init() {
	proxywasm.SetPluginContext(func(uint32) types.PluginContext { return &pluginContext{} })
}

type pluginContext struct{ types.DefaultPluginContext }

func (*pluginContext) NewHttpContext(uint32) types.HttpContext { return &types.DefaultHttpContext{} }
