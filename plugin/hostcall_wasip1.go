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

// sourceAddressBuf receives source.address (see sluiceOnMemoryAllocate):
// an address with port and IPv6 zone is shorter (ParseHostPort refuses
// anything longer than 64 bytes); a longer value gets a buffer of its own.
var sourceAddressBuf [64]byte

// SourceAddress implements engine.Request: Envoy's source.address, in
// sourceAddressBuf when it fits, a view valid until the next call (the
// engine only parses it, so a string view saves a copy).
func (*httpContext) SourceAddress() string {
	out := &hostOut
	*out = hostResult{}
	allocInto = sourceAddressBuf[:]
	st := proxyGetProperty(&sourceAddressPath[0], int32(len(sourceAddressPath)), unsafe.Pointer(&out.ret), &out.size)
	allocInto = nil
	ret, size := out.ret, out.size
	if st != 0 || ret == nil || size <= 0 {
		return ""
	}
	b := viewOf(sourceAddressBuf[:], ret, size)
	return unsafe.String(&b[0], len(b))
}

// viewOf is the value of size bytes at ret that a host call returned: a
// slice of buf when the host wrote it there (sluiceOnMemoryAllocate),
// without unsafe.Slice's checks, which are calls in the module.
func viewOf(buf []byte, ret *byte, size int32) []byte {
	if len(buf) > 0 && ret == &buf[0] && size >= 0 && int(size) <= len(buf) {
		return buf[:size]
	}
	return unsafe.Slice(ret, size)
}

// routeNamePath is the property path xds.route_name (the name of the
// Envoy route that routed the request), prepared once.
var routeNamePath = []byte("xds\x00route_name")

// routeNameBuf receives xds.route_name as sourceAddressBuf does
// source.address: a longer name gets a buffer of its own.
var routeNameBuf [128]byte

// getRouteName returns xds.route_name (empty when the request was not
// routed by a named route), in routeNameBuf when it fits: valid until the
// next call.
func getRouteName() []byte {
	out := &hostOut
	*out = hostResult{}
	allocInto = routeNameBuf[:]
	st := proxyGetProperty(&routeNamePath[0], int32(len(routeNamePath)), unsafe.Pointer(&out.ret), &out.size)
	allocInto = nil
	ret, size := out.ret, out.size
	if st != 0 || ret == nil {
		return nil
	}
	return unsafe.Slice(ret, size)
}

// sendLocalResponse answers the request with status, headers and body.
// The headers are encoded into *enc, a buffer the caller reuses (the host
// copies them during the call); same says that *enc holds their encoding
// already, from the caller's last local response.
// Small enough to be inlined (a call less per rejection).
func sendLocalResponse(status uint32, headers [][2]string, body []byte, enc *[]byte, same bool) error {
	if !same || len(*enc) == 0 {
		encodeHeaders(enc, headers)
	}
	// The encoding is never empty (it starts with the count of headers).
	if proxySendLocalResponse(status, nil, 0, unsafe.SliceData(body), int32(len(body)), unsafe.SliceData(*enc), int32(len(*enc)), -1) != 0 {
		return types.ErrorStatusBadArgument
	}
	return nil
}

// encodeHeaders encodes headers into *enc (sendLocalResponse).
func encodeHeaders(enc *[]byte, headers [][2]string) { *enc = appendHeaderMap((*enc)[:0], headers) }

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

// Not inlined: a copy at each call site costs more wasm code than
// the call (docs/design/memory.md, "Inlining").
//
//go:noinline
func defineCounter(name string) counter { return counter(defineMetric(metricTypeCounter, name)) }

// defineCounterChecked is defineCounter reporting a failure instead of
// panicking.
func defineCounterChecked(name string) (counter, bool) {
	var id uint32
	if proxyDefineMetric(metricTypeCounter, unsafe.StringData(name), int32(len(name)), &id) != 0 {
		return 0, false
	}
	return counter(id), true
}

// read reads the counter.
func (c counter) read() (uint64, bool) {
	var v uint64
	if proxyGetMetric(uint32(c), &v) != 0 {
		return 0, false
	}
	return v, true
}

// add adds 1 to the counter.
func (c counter) add() bool { return proxyIncrementMetric(uint32(c), 1) == 0 }

// defineGauge defines gauge name. Not inlined: its call sites run once per
// configuration, and each inlined copy is module size.
//
//go:noinline
func defineGauge(name string) gauge { return gauge(defineMetric(metricTypeGauge, name)) }

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

// Shared-data reads without garbage. The host returns a value by calling
// the module's proxy_on_memory_allocate for a buffer and copying into it;
// the SDK's allocator makes a new slice each time, so every bucket read
// (288 bytes, one or more per request) was garbage: mallocgc plus a share
// of GC. `make build` (internal/wasmexports) exports
// sluiceOnMemoryAllocate as proxy_on_memory_allocate in place of the SDK's.
// It does what the SDK's does, except right after GetInto or
// SourceAddress armed it with a buffer: then the one allocation of that
// host call (cpp-host's getSharedData and getProperty each copy the value
// with one allocate) gets that buffer if the value fits. Arming lasts for one allocation and is always
// undone when the host call returns, so no other host call (nor one that
// found no key) ever sees it. A plain `go build` keeps the SDK's allocator
// and reads into a new buffer as before.

//go:wasmimport env proxy_get_shared_data
//go:noescape
func proxyGetSharedData(keyData *byte, keySize int32, returnValueData unsafe.Pointer, returnValueSize *int32, returnCas *uint32) uint32

// allocInto is the buffer armed for the next allocation, nil when unarmed.
var allocInto []byte

//go:wasmexport sluice_on_memory_allocate
func sluiceOnMemoryAllocate(size uint32) *byte {
	if b := allocInto; b != nil {
		allocInto = nil
		if size > 0 && int(size) <= len(b) {
			return &b[0]
		}
	}
	buf := make([]byte, size)
	return &buf[0]
}

// Statuses of proxy_get_shared_data (proxy-wasm ABI 0.2.1).
const (
	statusOK       = 0
	statusNotFound = 1
)

// sdkStatusToError is the SDK's mapping of a status to its error, so that
// errors read as those of proxywasm.GetSharedData.
//
//go:linkname sdkStatusToError github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/internal.StatusToError
func sdkStatusToError(status uint32) error

// GetInto implements engine.BufferStore: the value lands in buf when it fits.
func (*sharedData) GetInto(key string, buf []byte) ([]byte, uint32, bool, error) {
	out := &hostOut
	*out = hostResult{}
	allocInto = buf
	st := proxyGetSharedData(unsafe.StringData(key), int32(len(key)), unsafe.Pointer(&out.ret), &out.size, &out.cas)
	allocInto = nil
	ret, size, cas := out.ret, out.size, out.cas
	switch {
	case st == statusNotFound:
		return nil, 0, false, nil
	case st != statusOK:
		return nil, 0, false, sdkStatusToError(st)
	case ret == nil || size == 0:
		return nil, cas, true, nil
	}
	return viewOf(buf, ret, size), cas, true, nil
}

//go:wasmimport env proxy_set_shared_data
//go:noescape
func proxySetSharedData(keyData *byte, keySize int32, valueData *byte, valueSize int32, cas uint32) uint32

// statusCasMismatch: proxy_set_shared_data found the key changed since the
// read (proxy-wasm ABI 0.2.1).
const statusCasMismatch = 8

// Set implements engine.Store with one host call (the SDK's SetSharedData
// and the error mapping are three calls more in the module per write).
func (*sharedData) Set(key string, value []byte, cas uint32) (bool, error) {
	var vp *byte
	if len(value) > 0 {
		vp = &value[0]
	}
	switch st := proxySetSharedData(unsafe.StringData(key), int32(len(key)), vp, int32(len(value)), cas); st {
	case statusOK:
		return false, nil
	case statusCasMismatch:
		return true, nil
	default:
		return false, sdkStatusToError(st)
	}
}

//go:wasmimport env proxy_replace_header_map_value
//go:noescape
func proxyReplaceHeaderMapValue(mapType uint32, keyData *byte, keySize int32, valueData *byte, valueSize int32) uint32

// mapTypeResponseHeaders is the response header map (proxy-wasm ABI 0.2.1).
const mapTypeResponseHeaders = 2

// replaceResponseHeader sets a response header: one host call (the SDK's
// wrapper and its error mapping are two more calls in the module per
// header); a failure is ignored, as the SDK's error was.
func replaceResponseHeader(name, value string) {
	_ = proxyReplaceHeaderMapValue(mapTypeResponseHeaders, unsafe.StringData(name), int32(len(name)), unsafe.StringData(value), int32(len(value)))
}

//go:wasmimport env proxy_set_property
//go:noescape
func proxySetProperty(pathData *byte, pathSize int32, valueData *byte, valueSize int32) uint32

// setProperty sets the stream's property path (one segment) to value: one
// host call, nothing allocated (Envoy copies both).
// Small enough to be inlined (a call less per property).
func setProperty(path, value string) {
	if value == "" {
		value = path[:0] // any valid pointer for an empty value
	}
	_ = proxySetProperty(unsafe.StringData(path), int32(len(path)), unsafe.StringData(value), int32(len(value)))
}

//go:wasmimport env proxy_get_header_map_pairs
//go:noescape
func proxyGetHeaderMapPairs(mapType uint32, returnData unsafe.Pointer, returnSize *int32) uint32

// mapTypeRequestHeaders is the request header map (proxy-wasm ABI 0.2.1).
const mapTypeRequestHeaders = 0

// headerPairsBuf receives the request's header map (see
// sluiceOnMemoryAllocate): a map that does not fit gets a buffer of its own,
// which is kept for the next requests if it is at most maxHeaderPairsBuf
// (Envoy's default max_request_headers_kb is 60).
var headerPairsBuf = make([]byte, 2048)

const maxHeaderPairsBuf = 64 << 10

// getRequestHeaderPairs returns the request's header map in the ABI's
// encoding (headerFields reads it): one host call, nothing allocated once
// the buffer fits the maps seen. Valid until the next call.
func getRequestHeaderPairs() []byte {
	out := &hostOut
	*out = hostResult{}
	allocInto = headerPairsBuf
	st := proxyGetHeaderMapPairs(mapTypeRequestHeaders, unsafe.Pointer(&out.ret), &out.size)
	allocInto = nil
	ret, size := out.ret, out.size
	if st != statusOK || ret == nil || size <= 0 {
		return nil
	}
	b := unsafe.Slice(ret, size)
	if ret != &headerPairsBuf[0] && int(size) > len(headerPairsBuf) && int(size) <= maxHeaderPairsBuf {
		headerPairsBuf = b
	}
	return b
}

// hostResult receives the out-parameters of the direct host calls above
// (the value's address and size, a shared-data CAS). They live in a
// package variable, not on the calling goroutine's stack: the host calls
// back into the module (proxy_on_memory_allocate) before it writes them,
// and that call may grow the stack, which moves it. With the variables on
// the stack (go:noescape lets them stay there) the host then wrote the
// answer to where the stack was: the read looked empty (a shared-data
// bucket read as damaged and started over: an adaptive rule's learnt
// limit read as cold in a new VM, TestReconfigAdaptiveLearntLimit).
// The module is single-threaded, and every call copies them out before
// any other host call.
type hostResult struct {
	ret  *byte
	size int32
	cas  uint32
}

var hostOut hostResult
