package config

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestStructConfiguration feeds Parse the wire encoding of a
// google.protobuf.Struct, as Envoy passes a Struct configuration.
func TestStructConfiguration(t *testing.T) {
	s, err := structpb.NewStruct(map[string]any{
		"rules": []any{
			map[string]any{"name": "s", "limit": 3, "window": "1h", "burst": 3, "shadow": false,
				"match": map[string]any{"path_prefix": "/a", "methods": []any{"GET"}}},
		},
		"status": 503, "max_keys": 1000, "exempt_cidrs": []any{"10.0.0.0/8"},
		"client_ip": map[string]any{"ipv6_prefix": 48},
	})
	if err != nil {
		t.Fatal(err)
	}
	wire, err := proto.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(wire)
	if err != nil {
		t.Fatal(err)
	}
	r := c.Rules[0]
	if r.Name != "s" || r.Limit.Limit() != 3 || r.Limit.Burst() != 3 || r.Match.PathPrefix != "/a" || r.Match.Methods[0] != "GET" ||
		c.Status != 503 || c.MaxKeys != 1000 || c.ClientIP.IPv6Prefix != 48 || len(c.Exempt) != 1 {
		t.Errorf("parsed %+v / %+v", c, r)
	}
	// An invalid Struct still names the field.
	bad, _ := structpb.NewStruct(map[string]any{"rules": []any{map[string]any{"name": "s", "limit": 3, "window": "soon"}}})
	wire, _ = proto.Marshal(bad)
	if _, err := Parse(wire); err == nil || err.Error()[:15] != "rules[0].window" {
		t.Errorf("bad Struct: %v", err)
	}
	// Garbage that is neither JSON nor a Struct is refused.
	if _, err := Parse([]byte{0x0a, 0xff, 0xff}); err == nil {
		t.Error("garbage accepted")
	}
}
