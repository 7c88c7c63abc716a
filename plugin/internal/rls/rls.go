// Package rls speaks the wire protocol of Envoy's rate-limit service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, e.g.
// envoyproxy/ratelimit) without generated code: the plugin sends the gRPC
// unary call through proxy-wasm's DispatchHttpCall, so it needs the request
// message framed as gRPC and the reply decoded from the HTTP/2 response.
// Hand-encoding (wire.go) keeps the wasm module free of the protobuf
// runtime and reflection.
//
// Only what Sluice uses is encoded: one descriptor with entries, the limit
// override (so limits live in Sluice's configuration alone) and a per-call
// hits_addend (the lease size). The decoder reads the overall code and the
// first descriptor status and skips every other field, known or not.
package rls

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/sluicehq/sluice/plugin/internal/sprintf"
	"github.com/sluicehq/sluice/plugin/internal/textnum"
)

// Path is the HTTP/2 :path of the ShouldRateLimit call.
const Path = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// Unit is envoy.type.v3.RateLimitUnit.
type Unit uint8

const (
	UnitUnknown Unit = 0
	UnitSecond  Unit = 1
	UnitMinute  Unit = 2
	UnitHour    Unit = 3
	UnitDay     Unit = 4
)

// UnitOf returns the unit of a fixed window of exactly one second, minute,
// hour or day, the only windows the service counts in.
func UnitOf(window time.Duration) (Unit, bool) {
	switch window {
	case time.Second:
		return UnitSecond, true
	case time.Minute:
		return UnitMinute, true
	case time.Hour:
		return UnitHour, true
	case 24 * time.Hour:
		return UnitDay, true
	}
	return UnitUnknown, false
}

// Entry is one key/value of a descriptor.
type Entry struct{ Key, Value string }

// Request is a ShouldRateLimit call for one descriptor.
type Request struct {
	Domain  string
	Entries []Entry
	// Limit and Unit are the descriptor's limit override
	// (requests_per_unit per unit). Limit 0: no override.
	Limit uint32
	Unit  Unit
	// Hits is how many hits this call adds (the request's hits_addend; at
	// least 1: the service takes 0 as 1).
	Hits uint32
}

// AppendFrame appends r as a gRPC message (the 5-byte length-prefixed frame
// and the protobuf RateLimitRequest) to b.
func AppendFrame(b []byte, r *Request) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0, 0) // uncompressed, length patched below
	// RateLimitRequest: domain = 1, descriptors = 2, hits_addend = 3.
	b = appendTag(b, 1, bytesType)
	b = appendString(b, r.Domain)
	b = appendTag(b, 2, bytesType)
	b = appendVarint(b, uint64(descriptorSize(r)))
	// RateLimitDescriptor: entries = 1 (Entry: key = 1, value = 2),
	// limit = 2 (RateLimitOverride: requests_per_unit = 1, unit = 2).
	for _, e := range r.Entries {
		b = appendTag(b, 1, bytesType)
		b = appendVarint(b, uint64(entrySize(e)))
		b = appendTag(b, 1, bytesType)
		b = appendString(b, e.Key)
		b = appendTag(b, 2, bytesType)
		b = appendString(b, e.Value)
	}
	if r.Limit > 0 {
		b = appendTag(b, 2, bytesType)
		b = appendVarint(b, uint64(overrideSize(r)))
		b = appendTag(b, 1, varintType)
		b = appendVarint(b, uint64(r.Limit))
		b = appendTag(b, 2, varintType)
		b = appendVarint(b, uint64(r.Unit))
	}
	if r.Hits > 0 {
		b = appendTag(b, 3, varintType)
		b = appendVarint(b, uint64(r.Hits))
	}
	binary.BigEndian.PutUint32(b[start+1:start+5], uint32(len(b)-start-5))
	return b
}

func entrySize(e Entry) int {
	return 2 + sizeBytes(len(e.Key)) + sizeBytes(len(e.Value))
}

func overrideSize(r *Request) int {
	return 2 + sizeVarint(uint64(r.Limit)) + sizeVarint(uint64(r.Unit))
}

func descriptorSize(r *Request) int {
	n := 0
	for _, e := range r.Entries {
		n += 1 + sizeBytes(entrySize(e))
	}
	if r.Limit > 0 {
		n += 1 + sizeBytes(overrideSize(r))
	}
	return n
}

// Code is RateLimitResponse.Code.
type Code uint8

const (
	CodeUnknown   Code = 0
	CodeOK        Code = 1
	CodeOverLimit Code = 2
)

func (c Code) String() string {
	switch c {
	case CodeOK:
		return "OK"
	case CodeOverLimit:
		return "OVER_LIMIT"
	}
	return "UNKNOWN"
}

// Response is what Sluice reads of a RateLimitResponse.
type Response struct {
	// Code is the overall code.
	Code Code
	// Remaining is limit_remaining of the first descriptor status: what is
	// left in the window after this call's hits (omitted on the wire, so 0,
	// when nothing is left).
	Remaining uint32
	// Reset is duration_until_reset of the first status: the time to the
	// end of the service's fixed window (0 when absent).
	Reset time.Duration
	// Statuses is the number of descriptor statuses in the reply.
	Statuses int
}

// Errors of DecodeFrame.
var (
	ErrShort      = errors.New("rls: truncated gRPC frame")
	ErrCompressed = errors.New("rls: compressed gRPC message (not requested)")
	ErrMalformed  = errors.New("rls: malformed RateLimitResponse")
)

// maxMessage bounds the reply Sluice accepts: a RateLimitResponse for one
// descriptor is tens of bytes.
const maxMessage = 1 << 16

// DecodeFrame decodes a gRPC response body holding one RateLimitResponse.
// It never panics, whatever the bytes.
func DecodeFrame(body []byte) (Response, error) {
	if len(body) < 5 {
		return Response{}, ErrShort
	}
	if body[0] != 0 {
		return Response{}, ErrCompressed
	}
	n := binary.BigEndian.Uint32(body[1:5])
	if n > maxMessage || int(n) > len(body)-5 {
		return Response{}, ErrShort
	}
	return Decode(body[5 : 5+int(n)])
}

// Decode decodes a protobuf RateLimitResponse.
func Decode(b []byte) (Response, error) {
	var r Response
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return r, ErrMalformed
		}
		b = b[n:]
		switch {
		case num == 1 && typ == varintType:
			v, n := consumeVarint(b)
			if n < 0 {
				return r, ErrMalformed
			}
			r.Code = code(v)
			b = b[n:]
		case num == 2 && typ == bytesType:
			v, n := consumeBytes(b)
			if n < 0 {
				return r, ErrMalformed
			}
			if r.Statuses == 0 {
				if err := decodeStatus(v, &r); err != nil {
					return r, err
				}
			}
			r.Statuses++
			b = b[n:]
		default:
			n := consumeFieldValue(num, typ, b)
			if n < 0 {
				return r, ErrMalformed
			}
			b = b[n:]
		}
	}
	return r, nil
}

func code(v uint64) Code {
	if v == 1 || v == 2 {
		return Code(v)
	}
	return CodeUnknown
}

// decodeStatus reads a DescriptorStatus: limit_remaining = 3,
// duration_until_reset = 4 (google.protobuf.Duration: seconds = 1,
// nanos = 2).
func decodeStatus(b []byte, r *Response) error {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return ErrMalformed
		}
		b = b[n:]
		switch {
		case num == 3 && typ == varintType:
			v, n := consumeVarint(b)
			if n < 0 {
				return ErrMalformed
			}
			r.Remaining = uint32(min(v, 1<<32-1))
			b = b[n:]
		case num == 4 && typ == bytesType:
			v, n := consumeBytes(b)
			if n < 0 {
				return ErrMalformed
			}
			d, err := decodeDuration(v)
			if err != nil {
				return err
			}
			r.Reset = d
			b = b[n:]
		default:
			n := consumeFieldValue(num, typ, b)
			if n < 0 {
				return ErrMalformed
			}
			b = b[n:]
		}
	}
	return nil
}

// maxReset caps a decoded duration_until_reset: the longest window is a
// day, and a hostile or broken reply must not overflow time.Duration.
const maxReset = 48 * time.Hour

func decodeDuration(b []byte) (time.Duration, error) {
	var sec, nanos int64
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return 0, ErrMalformed
		}
		b = b[n:]
		if typ == varintType && (num == 1 || num == 2) {
			v, n := consumeVarint(b)
			if n < 0 {
				return 0, ErrMalformed
			}
			if num == 1 {
				sec = int64(v)
			} else {
				nanos = int64(int32(v))
			}
			b = b[n:]
			continue
		}
		n = consumeFieldValue(num, typ, b)
		if n < 0 {
			return 0, ErrMalformed
		}
		b = b[n:]
	}
	if sec < 0 || nanos < 0 {
		return 0, nil
	}
	if sec >= int64(maxReset/time.Second) {
		return maxReset, nil
	}
	return time.Duration(sec)*time.Second + time.Duration(min(nanos, 999999999)), nil
}

// GRPCStatus interprets the grpc-status of a reply: the call succeeded only
// with "0". Empty means the header was absent.
func GRPCStatus(s string) (int, bool) {
	s = textnum.TrimSpace(s)
	if s == "" {
		return 0, false
	}
	n, ok := textnum.Atoi(s)
	if !ok || n < 0 {
		return -1, true
	}
	return n, true
}

// CallError describes a failed call for logs.
type CallError struct {
	HTTPStatus string
	GRPCStatus int
	Msg        string
}

func (e *CallError) Error() string {
	if e.Msg != "" {
		return sprintf.Sprintf("rate-limit service: %s (:status %s, grpc-status %d)", e.Msg, e.HTTPStatus, e.GRPCStatus)
	}
	return sprintf.Sprintf("rate-limit service: :status %s, grpc-status %d", e.HTTPStatus, e.GRPCStatus)
}

// Reply interprets a complete reply of DispatchHttpCall: headers (":status",
// "grpc-status" for a trailers-only reply), trailers ("grpc-status"), body.
// A reply with no headers at all is Envoy's way to report a timeout or a
// reset.
func Reply(headers, trailers [][2]string, body []byte) (Response, error) {
	if len(headers) == 0 {
		return Response{}, &CallError{Msg: "no reply (timeout, reset or no healthy upstream)"}
	}
	status, gs, have := "", "", false
	for _, h := range headers {
		switch h[0] {
		case ":status":
			status = h[1]
		case "grpc-status":
			gs, have = h[1], true
		}
	}
	if !have {
		for _, t := range trailers {
			if t[0] == "grpc-status" {
				gs, have = t[1], true
			}
		}
	}
	if status != "200" {
		return Response{}, &CallError{HTTPStatus: status, GRPCStatus: -1, Msg: "HTTP error"}
	}
	code, ok := GRPCStatus(gs)
	if !have || !ok {
		return Response{}, &CallError{HTTPStatus: status, GRPCStatus: -1, Msg: "no grpc-status"}
	}
	if code != 0 {
		msg := ""
		for _, hs := range [2][][2]string{headers, trailers} {
			for _, t := range hs {
				if t[0] == "grpc-message" {
					msg = t[1]
				}
			}
		}
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return Response{}, &CallError{HTTPStatus: status, GRPCStatus: code, Msg: msg}
	}
	r, err := DecodeFrame(body)
	if err != nil {
		return Response{}, err
	}
	if r.Code == CodeUnknown {
		return r, ErrMalformed
	}
	return r, nil
}
