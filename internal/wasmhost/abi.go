package wasmhost

import (
	"fmt"
	"time"
)

// ABIVersion is the Proxy-Wasm ABI version a module declares by exporting one
// of the functions proxy_abi_version_0_1_0, proxy_abi_version_0_2_0 or
// proxy_abi_version_0_2_1 (cpp-host: src/bytecode_util.cc, getAbiVersion).
// The ABI version decides which env.proxy_* functions Envoy links.
type ABIVersion int

const (
	// ABIUnknown means the module exports none of the ABI version markers;
	// Envoy refuses such a module ("Missing or unknown Proxy-Wasm ABI version").
	ABIUnknown ABIVersion = iota
	// ABI010 is Proxy-Wasm ABI 0.1.0 (not supported by this host).
	ABI010
	// ABI020 is Proxy-Wasm ABI 0.2.0. The proxy-wasm Go SDK declares this one.
	ABI020
	// ABI021 is Proxy-Wasm ABI 0.2.1 (adds proxy_get_log_level).
	ABI021
)

func (v ABIVersion) String() string {
	switch v {
	case ABI010:
		return "0.1.0"
	case ABI020:
		return "0.2.0"
	case ABI021:
		return "0.2.1"
	}
	return "unknown"
}

// Status is a proxy_status_t value returned by host functions.
type Status uint32

// proxy_status_t values (spec v0.2.1 "Types"; cpp-host WasmResult).
const (
	StatusOK                   Status = 0
	StatusNotFound             Status = 1
	StatusBadArgument          Status = 2
	StatusSerializationFailure Status = 3
	StatusParseFailure         Status = 4
	StatusInvalidMemoryAccess  Status = 6
	StatusEmpty                Status = 7
	StatusCasMismatch          Status = 8
	StatusInternalFailure      Status = 10
	StatusBrokenConnection     Status = 11
	StatusUnimplemented        Status = 12
)

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "Ok"
	case StatusNotFound:
		return "NotFound"
	case StatusBadArgument:
		return "BadArgument"
	case StatusSerializationFailure:
		return "SerializationFailure"
	case StatusParseFailure:
		return "ParseFailure"
	case StatusInvalidMemoryAccess:
		return "InvalidMemoryAccess"
	case StatusEmpty:
		return "Empty"
	case StatusCasMismatch:
		return "CasMismatch"
	case StatusInternalFailure:
		return "InternalFailure"
	case StatusBrokenConnection:
		return "BrokenConnection"
	case StatusUnimplemented:
		return "Unimplemented"
	}
	return fmt.Sprintf("Status(%d)", uint32(s))
}

// Action is the verdict Envoy applies to a stream after an HTTP callback.
type Action int

const (
	// Continue means the filter chain goes on (the plugin returned 0, or 2
	// "continue and end stream").
	Continue Action = iota
	// Pause means the stream is held: the plugin returned Pause (1) or any
	// other stop value, or it sent a local response during the callback
	// (cpp-host stops iteration after proxy_send_local_response whatever
	// the callback returns; src/exports.cc send_local_response and
	// src/context.cc convertVmCallResultToFilterHeadersStatus).
	Pause
)

func (a Action) String() string {
	if a == Continue {
		return "Continue"
	}
	return "Pause"
}

// LogLevel is a proxy_log_level_t value.
type LogLevel uint32

// proxy_log_level_t values.
const (
	LogTrace    LogLevel = 0
	LogDebug    LogLevel = 1
	LogInfo     LogLevel = 2
	LogWarn     LogLevel = 3
	LogError    LogLevel = 4
	LogCritical LogLevel = 5
)

func (l LogLevel) String() string {
	switch l {
	case LogTrace:
		return "trace"
	case LogDebug:
		return "debug"
	case LogInfo:
		return "info"
	case LogWarn:
		return "warn"
	case LogError:
		return "error"
	case LogCritical:
		return "critical"
	}
	return fmt.Sprintf("level(%d)", uint32(l))
}

// MapType is a proxy_map_type_t value.
type MapType uint32

// proxy_map_type_t values.
const (
	MapRequestHeaders           MapType = 0
	MapRequestTrailers          MapType = 1
	MapResponseHeaders          MapType = 2
	MapResponseTrailers         MapType = 3
	MapGrpcInitialMetadata      MapType = 4
	MapGrpcTrailingMetadata     MapType = 5
	MapHTTPCallResponseHeaders  MapType = 6
	MapHTTPCallResponseTrailers MapType = 7
	mapTypeMax                          = MapHTTPCallResponseTrailers
)

func (m MapType) String() string {
	switch m {
	case MapRequestHeaders:
		return "request_headers"
	case MapRequestTrailers:
		return "request_trailers"
	case MapResponseHeaders:
		return "response_headers"
	case MapResponseTrailers:
		return "response_trailers"
	case MapGrpcInitialMetadata:
		return "grpc_initial_metadata"
	case MapGrpcTrailingMetadata:
		return "grpc_trailing_metadata"
	case MapHTTPCallResponseHeaders:
		return "http_call_response_headers"
	case MapHTTPCallResponseTrailers:
		return "http_call_response_trailers"
	}
	return fmt.Sprintf("map(%d)", uint32(m))
}

// BufferType is a proxy_buffer_type_t value.
type BufferType uint32

// proxy_buffer_type_t values.
const (
	BufferHTTPRequestBody          BufferType = 0
	BufferHTTPResponseBody         BufferType = 1
	BufferDownstreamData           BufferType = 2
	BufferUpstreamData             BufferType = 3
	BufferHTTPCallResponseBody     BufferType = 4
	BufferGrpcReceive              BufferType = 5
	BufferVMConfiguration          BufferType = 6
	BufferPluginConfiguration      BufferType = 7
	BufferForeignFunctionArguments BufferType = 8
	bufferTypeMax                             = BufferForeignFunctionArguments
)

// MetricType is a proxy_metric_type_t value.
type MetricType uint32

// proxy_metric_type_t values.
const (
	MetricCounter   MetricType = 0
	MetricGauge     MetricType = 1
	MetricHistogram MetricType = 2
)

func (t MetricType) String() string {
	switch t {
	case MetricCounter:
		return "counter"
	case MetricGauge:
		return "gauge"
	case MetricHistogram:
		return "histogram"
	}
	return fmt.Sprintf("metric_type(%d)", uint32(t))
}

// proxy_stream_type_t values.
const (
	streamRequest    = 0
	streamResponse   = 1
	streamDownstream = 2
	streamUpstream   = 3
)

// Limits from cpp-host include/proxy-wasm/limits.h.
const (
	maxRandomGetBytes = 64 * 1024
	maxPairsBytes     = 1024 * 1024
	maxPairsCount     = 1024
	// maxMemoryPages is Envoy's cap on a VM's linear memory: 1 GiB.
	maxMemoryPages = 1024 * 1024 * 1024 / 65536
)

// WASI errno values used by cpp-host's WASI implementation.
const (
	errnoSuccess = 0
	errnoBadf    = 8
	errnoFault   = 21
	errnoInval   = 28
	errnoNoent   = 44
	errnoNosys   = 52
	errnoNotdir  = 20
	errnoNotsup  = 58
)

// defaultStart is the wall time a default ManualClock starts at.
var defaultStart = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)
