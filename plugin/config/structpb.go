package config

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
)

// Envoy passes a configuration given as google.protobuf.StringValue to the
// plugin as the string itself (JSON here), but one given as a
// google.protobuf.Struct as the Struct's protobuf wire encoding. The plugin
// links no protobuf library (it would add to every VM), so this is a small
// decoder for exactly Struct, Value and ListValue, which turns the Struct
// into the equivalent JSON for Parse.

var errWire = errors.New("not a protobuf Struct")

// structToJSON converts a wire-encoded google.protobuf.Struct to JSON.
func structToJSON(b []byte) ([]byte, error) {
	m, err := decodeStruct(b, 0)
	if err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// maxDepth bounds nesting, so a hostile document cannot exhaust the stack.
const maxDepth = 32

func decodeStruct(b []byte, depth int) (map[string]any, error) {
	if depth > maxDepth {
		return nil, errWire
	}
	m := map[string]any{}
	for len(b) > 0 {
		num, typ, v, rest, err := field(b)
		if err != nil {
			return nil, err
		}
		b = rest
		if num != 1 || typ != 2 { // fields: map<string, Value>
			continue
		}
		var key string
		var val any
		for e := v; len(e) > 0; {
			n, t, ev, r, err := field(e)
			if err != nil {
				return nil, err
			}
			e = r
			switch {
			case n == 1 && t == 2:
				key = string(ev)
			case n == 2 && t == 2:
				if val, err = decodeValue(ev, depth+1); err != nil {
					return nil, err
				}
			}
		}
		m[key] = val
	}
	return m, nil
}

func decodeValue(b []byte, depth int) (any, error) {
	if depth > maxDepth {
		return nil, errWire
	}
	var out any
	for len(b) > 0 {
		num, typ, v, rest, err := field(b)
		if err != nil {
			return nil, err
		}
		b = rest
		switch {
		case num == 1 && typ == 0: // null_value
			out = nil
		case num == 2 && typ == 1: // number_value
			out = math.Float64frombits(binary.LittleEndian.Uint64(v))
		case num == 3 && typ == 2: // string_value
			out = string(v)
		case num == 4 && typ == 0: // bool_value
			out = len(v) > 0 && v[0] != 0
		case num == 5 && typ == 2: // struct_value
			if out, err = decodeStruct(v, depth+1); err != nil {
				return nil, err
			}
		case num == 6 && typ == 2: // list_value
			list := []any{}
			for l := v; len(l) > 0; {
				n, t, lv, r, err := field(l)
				if err != nil {
					return nil, err
				}
				l = r
				if n == 1 && t == 2 {
					x, err := decodeValue(lv, depth+1)
					if err != nil {
						return nil, err
					}
					list = append(list, x)
				}
			}
			out = list
		}
	}
	return out, nil
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
