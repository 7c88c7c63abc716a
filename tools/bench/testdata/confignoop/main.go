// Command confignoop is the no-op Go filter (tools/bench/testdata/noop) plus
// Sluice's configuration parsing at start: it links the packages that
// parsing needs (plugin/internal/jsonlite, plugin/internal/sprintf, net/netip, strconv, time,
// ...) and builds the same configuration, and does nothing per request. The bench's memory
// section runs it to tell what Sluice's extra memory in Envoy comes from:
// the code those packages add to the module (compiled by V8 once per
// module) and what parsing leaves in each VM's heap, against Sluice's
// request path.
package main

import (
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluicehq/sluice/plugin/config"
)

func main() {}

func init() {
	proxywasm.SetPluginContext(func(uint32) types.PluginContext { return &pluginContext{} })
}

type pluginContext struct {
	types.DefaultPluginContext
	cfg *config.Config
}

func (p *pluginContext) OnPluginStart(int) types.OnPluginStartStatus {
	doc, err := proxywasm.GetPluginConfiguration()
	if err != nil {
		return types.OnPluginStartStatusFailed
	}
	if p.cfg, err = config.Parse(doc); err != nil {
		return types.OnPluginStartStatusFailed
	}
	return types.OnPluginStartStatusOK
}

func (*pluginContext) NewHttpContext(uint32) types.HttpContext { return &types.DefaultHttpContext{} }
