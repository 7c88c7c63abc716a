//go:build !wasip1

package main

import (
	"errors"
	"time"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

// The SDK's equivalents of hostcall_wasip1.go, so that the package builds
// (and vets) natively; the plugin only ever runs as wasip1.

func nowNanos() int64 { return time.Now().UnixNano() }

var sourceAddressPathList = []string{"source", "address"}

func (*httpContext) SourceAddress() string {
	b, err := proxywasm.GetProperty(sourceAddressPathList)
	if err != nil {
		return ""
	}
	return string(b)
}

var routeNamePathList = []string{"xds", "route_name"}

func getRouteName() []byte {
	b, err := proxywasm.GetProperty(routeNamePathList)
	if err != nil {
		return nil
	}
	return b
}

func sendLocalResponse(status uint32, headers [][2]string, body []byte, _ *[]byte, _ bool) error {
	return proxywasm.SendHttpResponse(status, headers, body, -1)
}

func defineCounter(name string) counter { return counter(proxywasm.DefineCounterMetric(name)) }
func defineGauge(name string) gauge     { return gauge(proxywasm.DefineGaugeMetric(name)) }

func (c counter) Increment(n uint64) { proxywasm.MetricCounter(c).Increment(n) }

func defineCounterChecked(name string) (counter, bool) { return defineCounter(name), true }
func (c counter) read() (uint64, bool)                 { return proxywasm.MetricCounter(c).Value(), true }
func (c counter) add() bool                            { c.Increment(1); return true }
func (g gauge) Add(n int64)                            { proxywasm.MetricGauge(g).Add(n) }
func (g gauge) Value() int64                           { return proxywasm.MetricGauge(g).Value() }

// GetInto implements engine.BufferStore with the SDK's read (a new buffer).
func (s *sharedData) GetInto(key string, _ []byte) ([]byte, uint32, bool, error) { return s.Get(key) }

func setProperty(path, value string) {
	_ = proxywasm.SetProperty([]string{path}, []byte(value))
}

func getRequestHeaderPairs() []byte {
	h, err := proxywasm.GetHttpRequestHeaders()
	if err != nil {
		return nil
	}
	return appendHeaderMap(nil, h)
}

func (*sharedData) Set(key string, value []byte, cas uint32) (bool, error) {
	err := proxywasm.SetSharedData(key, value, cas)
	if errors.Is(err, types.ErrorStatusCasMismatch) {
		return true, nil
	}
	return false, err
}

func replaceResponseHeader(name, value string) { _ = proxywasm.ReplaceHttpResponseHeader(name, value) }
