package wasmhost

import (
	"encoding/binary"
	"math"
	"strings"
)

// Properties map a property path to its serialized value, e.g.
//
//	wasmhost.Properties{"source.address": "10.0.0.1:5555", "xds.route_name": "r1"}
//
// A key is either dotted ("source.address", split on every '.') or already
// in the wire form proxy_get_property receives: segments separated by NUL
// bytes. Use PropertyPath to build a key whose segments contain dots, such as
// metadata filter names.
//
// Values are the bytes Envoy would serialize: strings as-is, int64/uint64/
// double/bool as 8/8/8/1 little-endian bytes (use PropertyInt64 and friends),
// maps as serialized pairs (PropertyMap).
type Properties map[string]string

// PropertyPath joins path segments into a Properties key (NUL-separated),
// for segments that contain dots: PropertyPath("metadata", "envoy.lb", "x").
func PropertyPath(segments ...string) string {
	return strings.Join(segments, "\x00")
}

// PropertyInt64 serializes an int64 property (e.g. source.port) as Envoy does.
func PropertyInt64(v int64) string {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(v))
	return string(b[:])
}

// PropertyUint64 serializes a uint64 property (e.g. connection_id).
func PropertyUint64(v uint64) string {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	return string(b[:])
}

// PropertyFloat64 serializes a double property.
func PropertyFloat64(v float64) string { return PropertyUint64(math.Float64bits(v)) }

// PropertyBool serializes a bool property (one byte).
func PropertyBool(v bool) string {
	if v {
		return "\x01"
	}
	return "\x00"
}

// PropertyMap serializes a map-valued property (pairs serialization).
func PropertyMap(h Headers) string {
	b := make([]byte, pairsSize(h))
	marshalPairs(b, h)
	return string(b)
}

// wirePath converts a Properties key to the NUL-separated wire form.
func wirePath(key string) string {
	if strings.IndexByte(key, 0) >= 0 {
		return key
	}
	return strings.ReplaceAll(key, ".", "\x00")
}

func normalizeProperties(p Properties) map[string]string {
	if len(p) == 0 {
		return nil
	}
	out := make(map[string]string, len(p))
	for k, v := range p {
		out[wirePath(k)] = v
	}
	return out
}

// derivedRequestProperty computes the request.* attributes Envoy derives from
// the request headers (Envoy's CEL RequestWrapper).
func derivedRequestProperty(h Headers, path string) (string, bool) {
	if h == nil {
		return "", false
	}
	switch path {
	case "request\x00path":
		return h.Get(":path")
	case "request\x00url_path":
		p, ok := h.Get(":path")
		if !ok {
			return "", false
		}
		if i := strings.IndexByte(p, '?'); i >= 0 {
			p = p[:i]
		}
		return p, true
	case "request\x00query":
		p, ok := h.Get(":path")
		if !ok {
			return "", false
		}
		if i := strings.IndexByte(p, '?'); i >= 0 {
			return p[i+1:], true
		}
		return "", true
	case "request\x00host":
		return h.Get(":authority")
	case "request\x00scheme":
		return h.Get(":scheme")
	case "request\x00method":
		return h.Get(":method")
	case "request\x00referer":
		return h.Get("referer")
	case "request\x00useragent":
		return h.Get("user-agent")
	case "request\x00id":
		return h.Get("x-request-id")
	}
	return "", false
}
