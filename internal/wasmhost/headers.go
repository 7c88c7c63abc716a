package wasmhost

import (
	"encoding/binary"
	"strings"
)

// Headers is an ordered list of HTTP header fields, pseudo-headers
// (":path", ":status", ...) included, as Envoy's header maps hold them.
// Names given to the host are lowercased when they enter a header map.
type Headers [][2]string

// Get returns the first value of name (case-insensitive), as Envoy's
// proxy_get_header_map_value does, and whether it exists.
func (h Headers) Get(name string) (string, bool) {
	for _, kv := range h {
		if strings.EqualFold(kv[0], name) {
			return kv[1], true
		}
	}
	return "", false
}

// Value returns the first value of name, or "" if absent.
func (h Headers) Value(name string) string {
	v, _ := h.Get(name)
	return v
}

// Values returns every value of name, in order.
func (h Headers) Values(name string) []string {
	var out []string
	for _, kv := range h {
		if strings.EqualFold(kv[0], name) {
			out = append(out, kv[1])
		}
	}
	return out
}

// Has reports whether name is present.
func (h Headers) Has(name string) bool {
	_, ok := h.Get(name)
	return ok
}

// Clone returns a copy of h.
func (h Headers) Clone() Headers {
	if h == nil {
		return nil
	}
	return append(Headers(nil), h...)
}

// HeaderOp records one change a plugin made to a header map.
type HeaderOp struct {
	Map MapType
	// Op is "add", "replace", "remove" or "set_pairs" (the whole map was
	// replaced; Value then holds nothing and Pairs the new map).
	Op    string
	Name  string
	Value string
	Pairs Headers
}

// headerMap is a mutable header map with Envoy's HeaderMapImpl semantics
// that matter to plugins:
//   - keys are lowercased (Http::LowerCaseString) on every operation;
//   - pseudo-headers are kept in front of regular headers;
//   - add appends another entry (Envoy coalesces a second value of some
//     "inline" headers such as content-length into "a,b"; this map keeps
//     separate entries instead);
//   - replace (setCopy) changes the value of the FIRST entry only and adds
//     the header when absent;
//   - remove deletes every entry of the name;
//   - get returns the first value.
type headerMap struct {
	kv Headers
}

func newHeaderMap(h Headers) *headerMap {
	m := &headerMap{kv: make(Headers, 0, len(h)+4)}
	for _, e := range h {
		m.add(e[0], e[1])
	}
	return m
}

func lower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			return strings.ToLower(s)
		}
	}
	return s
}

func (m *headerMap) get(name string) (string, bool) {
	name = lower(name)
	for _, e := range m.kv {
		if e[0] == name {
			return e[1], true
		}
	}
	return "", false
}

func (m *headerMap) add(name, value string) {
	name = lower(name)
	if strings.HasPrefix(name, ":") {
		// Insert after the last pseudo-header.
		i := 0
		for i < len(m.kv) && strings.HasPrefix(m.kv[i][0], ":") {
			i++
		}
		m.kv = append(m.kv, [2]string{})
		copy(m.kv[i+1:], m.kv[i:])
		m.kv[i] = [2]string{name, value}
		return
	}
	m.kv = append(m.kv, [2]string{name, value})
}

func (m *headerMap) replace(name, value string) {
	name = lower(name)
	for i, e := range m.kv {
		if e[0] == name {
			m.kv[i][1] = value
			return
		}
	}
	m.add(name, value)
}

func (m *headerMap) remove(name string) {
	name = lower(name)
	out := m.kv[:0]
	for _, e := range m.kv {
		if e[0] != name {
			out = append(out, e)
		}
	}
	for i := len(out); i < len(m.kv); i++ {
		m.kv[i] = [2]string{}
	}
	m.kv = out
}

func (m *headerMap) setPairs(h Headers) {
	m.kv = m.kv[:0]
	for _, e := range h {
		m.add(e[0], e[1])
	}
}

// byteSize is Envoy's HeaderMap::byteSize: the sum of key and value lengths.
func (m *headerMap) byteSize() int {
	n := 0
	for _, e := range m.kv {
		n += len(e[0]) + len(e[1])
	}
	return n
}

// pairsSize is the size of the serialized map (spec "Serialization").
func pairsSize(h Headers) int {
	n := 4
	for _, e := range h {
		n += 8 + len(e[0]) + 1 + len(e[1]) + 1
	}
	return n
}

// marshalPairs serializes h into dst, which must be pairsSize(h) long.
func marshalPairs(dst []byte, h Headers) {
	binary.LittleEndian.PutUint32(dst, uint32(len(h)))
	p := 4
	for _, e := range h {
		binary.LittleEndian.PutUint32(dst[p:], uint32(len(e[0])))
		binary.LittleEndian.PutUint32(dst[p+4:], uint32(len(e[1])))
		p += 8
	}
	for _, e := range h {
		p += copy(dst[p:], e[0])
		dst[p] = 0
		p++
		p += copy(dst[p:], e[1])
		dst[p] = 0
		p++
	}
}

// unmarshalPairs parses a serialized map the way cpp-host PairsUtil::toPairs
// does: any malformation (or more than 1 MiB / 1024 pairs) yields an empty
// map, not an error.
func unmarshalPairs(b []byte) Headers {
	if len(b) > maxPairsBytes || len(b) < 4 {
		return nil
	}
	n := binary.LittleEndian.Uint32(b)
	if n > maxPairsCount {
		return nil
	}
	pos := 4
	if pos+int(n)*8 > len(b) {
		return nil
	}
	sizes := make([][2]int, n)
	for i := range sizes {
		sizes[i][0] = int(binary.LittleEndian.Uint32(b[pos:]))
		sizes[i][1] = int(binary.LittleEndian.Uint32(b[pos+4:]))
		pos += 8
	}
	out := make(Headers, n)
	for i, s := range sizes {
		if s[0] < 0 || pos+s[0]+1 > len(b) || b[pos+s[0]] != 0 {
			return nil
		}
		out[i][0] = string(b[pos : pos+s[0]])
		pos += s[0] + 1
		if s[1] < 0 || pos+s[1]+1 > len(b) || b[pos+s[1]] != 0 {
			return nil
		}
		out[i][1] = string(b[pos : pos+s[1]])
		pos += s[1] + 1
	}
	if pos != len(b) {
		return nil
	}
	return out
}
