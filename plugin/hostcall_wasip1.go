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
