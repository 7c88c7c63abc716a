//go:build wasip1

package main

import (
	"unsafe"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

// Direct host calls for the request path. The SDK's wrappers are right but
// pay for generality on every request: time.Now() reads two clocks (wall and
// monotonic: two host calls), GetProperty serializes its path into a new
// buffer, SendHttpResponse serializes the headers into another. These call
// the same Envoy imports with what Sluice can prepare once. Every other call
// goes through the SDK.

//go:wasmimport wasi_snapshot_preview1 clock_time_get
//go:noescape
func wasiClockTimeGet(id uint32, precision uint64, time *uint64) uint32

//go:wasmimport env proxy_get_property
//go:noescape
func proxyGetProperty(pathData *byte, pathSize int32, returnValueData unsafe.Pointer, returnValueSize *int32) uint32

//go:wasmimport env proxy_send_local_response
//go:noescape
func proxySendLocalResponse(statusCode uint32, statusCodeDetailData *byte, statusCodeDetailsSize int32,
	bodyData *byte, bodySize int32, headersData *byte, headersSize int32, grpcStatus int32) uint32

// nowNanos reads the wall clock once (WASI REALTIME, as time.Now's wall
// part): the one clock read of a request.
func nowNanos() int64 {
	var t uint64
	if wasiClockTimeGet(0, 1, &t) != 0 {
		return 0
	}
	return int64(t)
}

// sourceAddressPath is the property path source.address in the ABI's
// encoding (segments separated by NUL), prepared once.
var sourceAddressPath = []byte("source\x00address")

// getSourceAddress returns Envoy's source.address in a buffer the host
// allocated for this call.
func getSourceAddress() []byte {
	var ret *byte
	var size int32
	if proxyGetProperty(&sourceAddressPath[0], int32(len(sourceAddressPath)), unsafe.Pointer(&ret), &size) != 0 || ret == nil {
		return nil
	}
	return unsafe.Slice(ret, size)
}

// localResponseBuf is reused by every local response of this VM (the host
// copies the headers during the call).
var localResponseBuf []byte

// sendLocalResponse answers the request with status, headers and body.
func sendLocalResponse(status uint32, headers [][2]string, body []byte) error {
	localResponseBuf = appendHeaderMap(localResponseBuf[:0], headers)
	var bp *byte
	if len(body) > 0 {
		bp = &body[0]
	}
	st := proxySendLocalResponse(status, nil, 0, bp, int32(len(body)), &localResponseBuf[0], int32(len(localResponseBuf)), -1)
	if st != 0 {
		return types.ErrorStatusBadArgument
	}
	return nil
}

// Metrics, through the ABI too: the SDK's metric wrappers format their
// panics with fmt, and those calls alone link fmt and reflect into the
// module (about 350 KB, which Envoy's V8 keeps resident). Same imports,
// same meaning: a failure panics, as in the SDK.

//go:wasmimport env proxy_define_metric
//go:noescape
func proxyDefineMetric(metricType uint32, nameData *byte, nameSize int32, returnID *uint32) uint32

//go:wasmimport env proxy_increment_metric
func proxyIncrementMetric(id uint32, offset int64) uint32

//go:wasmimport env proxy_get_metric
//go:noescape
func proxyGetMetric(id uint32, returnValue *uint64) uint32

// Metric types of proxy_define_metric.
const (
	metricTypeCounter = 0
	metricTypeGauge   = 1
)

func defineMetric(typ uint32, name string) uint32 {
	b := []byte(name)
	var id uint32
	var p *byte
	if len(b) > 0 {
		p = &b[0]
	}
	if proxyDefineMetric(typ, p, int32(len(b)), &id) != 0 {
		panic("sluice: cannot define metric " + name)
	}
	return id
}

func defineCounter(name string) counter { return counter(defineMetric(metricTypeCounter, name)) }
func defineGauge(name string) gauge     { return gauge(defineMetric(metricTypeGauge, name)) }

// Increment adds n to the counter.
func (c counter) Increment(n uint64) {
	if proxyIncrementMetric(uint32(c), int64(n)) != 0 {
		panic("sluice: cannot increment a counter")
	}
}

// Add adds n (which may be negative) to the gauge.
func (g gauge) Add(n int64) {
	if proxyIncrementMetric(uint32(g), n) != 0 {
		panic("sluice: cannot add to a gauge")
	}
}

// Value reads the gauge.
func (g gauge) Value() int64 {
	var v uint64
	if proxyGetMetric(uint32(g), &v) != 0 {
		panic("sluice: cannot read a gauge")
	}
	return int64(v)
}
