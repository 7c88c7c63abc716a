// Command probe is a proxy-wasm HTTP filter that does one or more single
// operations per request, chosen by its plugin configuration (a
// comma-separated list), so that the bench's probe section can price each
// operation in Envoy's V8 against the no-op filter (tools/bench/testdata/noop):
//
//	property  GetProperty(source.address) in OnHttpRequestHeaders
//	shared    GetSharedData of a 288-byte value and SetSharedData with its cas
//	header    GetHttpRequestHeader(":path")
//	clock     time.Now()
//	resp3     three ReplaceHttpResponseHeader calls in OnHttpResponseHeaders
//	alloc     a 300-byte object allocated per request, kept in the http context
//	recover   a deferred recover() in OnHttpRequestHeaders, as Sluice has
//	xN        (e.g. x20) do each of the other operations N times per request,
//	          to lift a single operation's cost above the measurement noise
//	vmctx     nothing per request (only SetVMContext and a 1s tick, as Sluice)
//	compute   pure Go work, no host call: 100 rounds of a 64-bit mix over
//	          a 64-byte buffer (a few µs natively), to compare V8 with wazero
//	reject    Sluice's reject path alone: GetProperty(source.address), a
//	          GetSharedData (no set: a rejection changes no state),
//	          time.Now() and SendHttpResponse 429 with the 4 headers and the
//	          body size Sluice sends with `headers: legacy` (the other
//	          operations are not done)
package main

import (
	"strconv"
	"strings"
	"time"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

func main() {}

func init() {
	proxywasm.SetVMContext(&vmContext{})
}

type vmContext struct{ types.DefaultVMContext }

func (*vmContext) NewPluginContext(uint32) types.PluginContext { return &pluginContext{} }

type ops struct {
	property, shared, header, clock, resp3, alloc, recover, tick, compute, reject bool
	n                                                                             int
}

type pluginContext struct {
	types.DefaultPluginContext
	ops ops
}

const sharedKey = "probe.shared"

var sourceAddress = []string{"source", "address"}

func (p *pluginContext) OnPluginStart(int) types.OnPluginStartStatus {
	b, err := proxywasm.GetPluginConfiguration()
	if err != nil && err != types.ErrorStatusNotFound {
		proxywasm.LogCriticalf("probe: configuration: %v", err)
		return types.OnPluginStartStatusFailed
	}
	p.ops.n = 1
	for _, w := range strings.Split(string(b), ",") {
		w = strings.TrimSpace(w)
		if n, err := strconv.Atoi(strings.TrimPrefix(w, "x")); strings.HasPrefix(w, "x") && err == nil && n > 0 {
			p.ops.n = n
			continue
		}
		switch w {
		case "":
		case "property":
			p.ops.property = true
		case "shared":
			p.ops.shared = true
		case "header":
			p.ops.header = true
		case "clock":
			p.ops.clock = true
		case "resp3":
			p.ops.resp3 = true
		case "alloc":
			p.ops.alloc = true
		case "recover":
			p.ops.recover = true
		case "vmctx":
			p.ops.tick = true
		case "compute":
			p.ops.compute = true
		case "reject":
			p.ops.reject = true
		default:
			proxywasm.LogCriticalf("probe: unknown operation %q", w)
			return types.OnPluginStartStatusFailed
		}
	}
	if p.ops.shared || p.ops.reject {
		if _, _, err := proxywasm.GetSharedData(sharedKey); err == types.ErrorStatusNotFound {
			_ = proxywasm.SetSharedData(sharedKey, make([]byte, 288), 0)
		}
	}
	if p.ops.tick {
		if err := proxywasm.SetTickPeriodMilliSeconds(1000); err != nil {
			return types.OnPluginStartStatusFailed
		}
	}
	return types.OnPluginStartStatusOK
}

func (p *pluginContext) OnTick() {}

func (p *pluginContext) NewHttpContext(uint32) types.HttpContext {
	return &httpContext{ops: &p.ops}
}

type blob struct {
	data [300]byte
}

type httpContext struct {
	types.DefaultHttpContext
	ops  *ops
	keep *blob
	sink int
}

func (h *httpContext) OnHttpRequestHeaders(int, bool) (action types.Action) {
	o := h.ops
	if o.recover {
		defer func() {
			if r := recover(); r != nil {
				action = types.ActionContinue
			}
		}()
	}
	if o.reject {
		h.reject()
		return types.ActionPause
	}
	for range o.n {
		h.once(o)
	}
	return types.ActionContinue
}

// rejectHeaders and rejectBody have the sizes of Sluice's rejection with
// `headers: legacy` (plugin/main.go, plugin/engine/headers.go).
var (
	rejectHeaders = [][2]string{
		{"retry-after", "3600"},
		{"x-ratelimit-limit", "1"},
		{"x-ratelimit-remaining", "0"},
		{"x-ratelimit-reset", "3600"},
	}
	rejectBody = []byte("Too Many Requests: rate limit exceeded, retry after the time in Retry-After.\n")
)

// reject does the host work of Sluice's reject path.
func (h *httpContext) reject() {
	b, _ := proxywasm.GetProperty(sourceAddress)
	h.sink += len(b)
	v, _, _ := proxywasm.GetSharedData(sharedKey)
	h.sink += len(v)
	h.sink += int(time.Now().UnixNano() & 1)
	_ = proxywasm.SendHttpResponse(429, rejectHeaders, rejectBody, -1)
}

func (h *httpContext) once(o *ops) {
	if o.clock {
		h.sink += int(time.Now().UnixNano() & 1)
	}
	if o.header {
		v, _ := proxywasm.GetHttpRequestHeader(":path")
		h.sink += len(v)
	}
	if o.property {
		b, _ := proxywasm.GetProperty(sourceAddress)
		h.sink += len(b)
	}
	if o.shared {
		v, cas, err := proxywasm.GetSharedData(sharedKey)
		if err == nil {
			if len(v) > 0 {
				v[0]++
			}
			_ = proxywasm.SetSharedData(sharedKey, v, cas) // a cas mismatch is fine
		}
	}
	if o.compute {
		h.sink += int(mix(uint64(h.sink)) & 1)
	}
	if o.alloc {
		h.keep = new(blob)
		h.keep.data[h.sink%300] = 1
	}
}

func (h *httpContext) OnHttpResponseHeaders(int, bool) types.Action {
	for i := 0; h.ops.resp3 && i < h.ops.n; i++ {
		_ = proxywasm.ReplaceHttpResponseHeader("x-ratelimit-limit", "1000000000")
		_ = proxywasm.ReplaceHttpResponseHeader("x-ratelimit-remaining", "999999999")
		_ = proxywasm.ReplaceHttpResponseHeader("x-ratelimit-reset", "1")
	}
	return types.ActionContinue
}

var buf [64]byte

// mix is CPU-bound Go code of the kind Sluice's engine runs (hashing,
// byte-slice encoding), with no host call and no allocation.
//
//go:noinline
func mix(seed uint64) uint64 {
	x := seed | 1
	for r := 0; r < 100; r++ {
		for i := 0; i < len(buf); i += 8 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			buf[i] ^= byte(x)
			x += uint64(buf[(i+int(x))&63]) * 0x9e3779b97f4a7c15
		}
	}
	return x
}
