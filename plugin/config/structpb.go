package config

import (
	"encoding/binary"
	"errors"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/sluicehq/sluice/plugin/internal/jsonlite"
)

// Envoy passes a configuration given as google.protobuf.StringValue to the
// plugin as the string itself (JSON here), but one given as a
// google.protobuf.Struct as the Struct's protobuf wire encoding. The plugin
// links no protobuf library (it would add to every VM), so this is a small
// decoder for exactly Struct, Value and ListValue, which turns the Struct
// into the JSON value tree Parse reads.
//
// The tree is the one Parse saw when this decoder's output went through
// encoding/json (Marshal, then Unmarshal): keys in sorted order, the last of
// duplicate keys wins, numbers spelt as encoding/json spells a float64, each
// byte of invalid UTF-8 in a string or key becomes U+FFFD, and a NaN or
// infinite number makes the whole Struct unusable (Parse then reports the
// document as not JSON).

var errWire = errors.New("not a protobuf Struct")

// structToValue converts a wire-encoded google.protobuf.Struct to a JSON
// object.
func structToValue(b []byte) (jsonlite.Value, error) {
	v, err := decodeStruct(b, 0)
	if err != nil {
		return jsonlite.Value{}, err
	}
	if !finite(&v) {
		return jsonlite.Value{}, errWire
	}
	return v, nil
}

// maxDepth bounds nesting, so a hostile document cannot exhaust the stack.
const maxDepth = 32

// notFinite marks a NaN or infinite number_value: JSON cannot spell it, so
// it refuses the Struct unless a later duplicate key replaces it.
const notFinite = ""

func decodeStruct(b []byte, depth int) (jsonlite.Value, error) {
	obj := jsonlite.Value{Kind: jsonlite.Object}
	if depth > maxDepth {
		return obj, errWire
	}
	// Keys as they arrived (a protobuf map: the last entry of a key wins).
	index := map[string]int{}
	for len(b) > 0 {
		num, typ, v, rest, err := field(b)
		if err != nil {
			return obj, err
		}
		b = rest
		if num != 1 || typ != 2 { // fields: map<string, Value>
			continue
		}
		var key string
		var val jsonlite.Value
		for e := v; len(e) > 0; {
			n, t, ev, r, err := field(e)
			if err != nil {
				return obj, err
			}
			e = r
			switch {
			case n == 1 && t == 2:
				key = string(ev)
			case n == 2 && t == 2:
				if val, err = decodeValue(ev, depth+1); err != nil {
					return obj, err
				}
			}
		}
		if i, ok := index[key]; ok {
			obj.Members[i].Value = val
			continue
		}
		index[key] = len(obj.Members)
		obj.Members = append(obj.Members, jsonlite.Member{Key: key, Value: val})
	}
	sortByKey(obj.Members)
	for i := range obj.Members {
		obj.Members[i].Key = validUTF8(obj.Members[i].Key)
	}
	return obj, nil
}

func decodeValue(b []byte, depth int) (jsonlite.Value, error) {
	var out jsonlite.Value // null
	if depth > maxDepth {
		return out, errWire
	}
	for len(b) > 0 {
		num, typ, v, rest, err := field(b)
		if err != nil {
			return out, err
		}
		b = rest
		switch {
		case num == 1 && typ == 0: // null_value
			out = jsonlite.Value{}
		case num == 2 && typ == 1: // number_value
			out = jsonlite.Value{Kind: jsonlite.Number, Text: formatFloat(math.Float64frombits(binary.LittleEndian.Uint64(v)))}
		case num == 3 && typ == 2: // string_value
			out = jsonlite.Value{Kind: jsonlite.String, Text: validUTF8(string(v))}
		case num == 4 && typ == 0: // bool_value
			out = jsonlite.Value{Kind: jsonlite.False}
			if len(v) > 0 && v[0] != 0 {
				out.Kind = jsonlite.True
			}
		case num == 5 && typ == 2: // struct_value
			if out, err = decodeStruct(v, depth+1); err != nil {
				return out, err
			}
		case num == 6 && typ == 2: // list_value
			list := jsonlite.Value{Kind: jsonlite.Array, Elems: []jsonlite.Value{}}
			for l := v; len(l) > 0; {
				n, t, lv, r, err := field(l)
				if err != nil {
					return out, err
				}
				l = r
				if n == 1 && t == 2 {
					x, err := decodeValue(lv, depth+1)
					if err != nil {
						return out, err
					}
					list.Elems = append(list.Elems, x)
				}
			}
			out = list
		}
	}
	return out, nil
}

// sortByKey sorts members by key (keys are distinct here), with a merge
// sort: package sort would add about 60 KB to the module for this one use,
// and a Struct may have many keys.
func sortByKey(m []jsonlite.Member) {
	tmp := make([]jsonlite.Member, len(m))
	for width := 1; width < len(m); width *= 2 {
		for lo := 0; lo < len(m); lo += 2 * width {
			mid, hi := min(lo+width, len(m)), min(lo+2*width, len(m))
			i, j, k := lo, mid, lo
			for i < mid && j < hi {
				if m[j].Key < m[i].Key {
					tmp[k], j = m[j], j+1
				} else {
					tmp[k], i = m[i], i+1
				}
				k++
			}
			k += copy(tmp[k:], m[i:mid])
			copy(tmp[k:], m[j:hi])
		}
		copy(m, tmp)
	}
}

// formatFloat spells f as encoding/json does: the shortest decimal that
// round-trips, in exponent form below 1e-6 and from 1e21 on, with no
// leading zero in the exponent.
func formatFloat(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return notFinite
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b := strconv.AppendFloat(nil, f, format, -1, 64)
	if n := len(b); format == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		b[n-2] = b[n-1]
		b = b[:n-1]
	}
	return string(b)
}

// finite reports whether v holds no NaN or infinite number.
func finite(v *jsonlite.Value) bool {
	if v.Kind == jsonlite.Number && v.Text == notFinite {
		return false
	}
	for i := range v.Elems {
		if !finite(&v.Elems[i]) {
			return false
		}
	}
	for i := range v.Members {
		if !finite(&v.Members[i].Value) {
			return false
		}
	}
	return true
}

// validUTF8 replaces each byte of s that is not part of valid UTF-8 with
// U+FFFD.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	b := make([]byte, 0, len(s)+8)
	for _, r := range s {
		b = utf8.AppendRune(b, r)
	}
	return string(b)
}

// field reads one wire field: its number, wire type, payload (the varint's
// bytes, the 8 fixed bytes, or the length-delimited bytes) and the rest.
func field(b []byte) (num uint64, typ int, v, rest []byte, err error) {
	key, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, 0, nil, nil, errWire
	}
	b = b[n:]
	num, typ = key>>3, int(key&7)
	switch typ {
	case 0:
		_, m := binary.Uvarint(b)
		if m <= 0 {
			return 0, 0, nil, nil, errWire
		}
		return num, typ, b[:m], b[m:], nil
	case 1:
		if len(b) < 8 {
			return 0, 0, nil, nil, errWire
		}
		return num, typ, b[:8], b[8:], nil
	case 2:
		l, m := binary.Uvarint(b)
		if m <= 0 || l > uint64(len(b)-m) {
			return 0, 0, nil, nil, errWire
		}
		return num, typ, b[m : m+int(l)], b[m+int(l):], nil
	case 5:
		if len(b) < 4 {
			return 0, 0, nil, nil, errWire
		}
		return num, typ, b[:4], b[4:], nil
	}
	return 0, 0, nil, nil, errWire
}
