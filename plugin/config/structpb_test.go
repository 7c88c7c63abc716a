package config

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice/plugin/internal/jsonlite"
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

// TestStructAsJSON holds the Struct form to the JSON form of the same
// document: the configuration (or the error) must be the one Parse gives
// for the Struct converted to JSON by encoding/json, keys sorted, numbers
// spelt as encoding/json spells a float64.
func TestStructAsJSON(t *testing.T) {
	docs := []map[string]any{}
	files, _ := filepath.Glob("testdata/corpus/*/*.json")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if json.Unmarshal(b, &m) == nil && len(m) > 0 {
			docs = append(docs, m)
		}
	}
	rule := func(k string, v any) map[string]any {
		r := map[string]any{"name": "r", "limit": 10, "window": "1s"}
		r[k] = v
		return map[string]any{"rules": []any{r}}
	}
	for _, n := range []any{10.0, 4.29e2, 1e21, 1e-7, 0.1, math.Copysign(0, -1), 1.5, 1 << 53, 1<<53 + 2, 9.007199254740993e15, -1e300, nil, true, "10", []any{}} {
		docs = append(docs, rule("limit", n), rule("burst", n), map[string]any{"rules": []any{map[string]any{"name": "r", "limit": 1, "window": "1s"}}, "status": n})
	}
	docs = append(docs, rule("name", "caf\u00e9 \u2028<&>"), rule("match", map[string]any{"methods": []any{"get", nil}}), rule("key", []any{}))
	if len(docs) < 50 {
		t.Fatalf("only %d documents", len(docs))
	}
	for _, m := range docs {
		s, err := structpb.NewStruct(m)
		if err != nil {
			t.Fatal(err)
		}
		wire, err := proto.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		j, err := json.Marshal(s.AsMap())
		if err != nil {
			t.Fatal(err)
		}
		got, gerr := Parse(wire)
		want, werr := Parse(j)
		if fmt.Sprint(gerr) != fmt.Sprint(werr) || dump(got) != dump(want) {
			t.Errorf("%s:\nStruct: %+v %v\nJSON:   %+v %v", j, got, gerr, want, werr)
		}
	}
}

// TestStructEdgeCases covers what a well-formed protobuf library does not
// produce but Envoy could pass on: duplicate keys (the last wins), invalid
// UTF-8 (each bad byte is U+FFFD, as encoding/json had it), a NaN (no JSON
// for it: refused), and nesting beyond maxDepth (refused).
func TestStructEdgeCases(t *testing.T) {
	str := func(s string) []byte {
		return protowire.AppendString(protowire.AppendTag(nil, 3, protowire.BytesType), s)
	}
	num := func(f float64) []byte {
		return protowire.AppendFixed64(protowire.AppendTag(nil, 2, protowire.Fixed64Type), math.Float64bits(f))
	}
	entry := func(k string, v []byte) []byte {
		e := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), k)
		e = protowire.AppendBytes(protowire.AppendTag(e, 2, protowire.BytesType), v)
		return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), e)
	}
	obj := func(entries ...[]byte) []byte {
		var b []byte
		for _, e := range entries {
			b = append(b, e...)
		}
		return protowire.AppendBytes(protowire.AppendTag(nil, 5, protowire.BytesType), b)
	}
	list := func(vals ...[]byte) []byte {
		var b []byte
		for _, v := range vals {
			b = protowire.AppendBytes(protowire.AppendTag(b, 1, protowire.BytesType), v)
		}
		return protowire.AppendBytes(protowire.AppendTag(nil, 6, protowire.BytesType), b)
	}
	doc := func(name []byte, limit float64, extra ...[]byte) []byte {
		r := obj(append([][]byte{entry("name", name), entry("limit", num(limit)), entry("window", str("1s"))}, extra...)...)
		return entry("rules", list(r))
	}
	for _, c := range []struct {
		wire []byte
		want string // error, or "" for a valid configuration
	}{
		{doc(str("a"), 5), ""},
		{append(doc(str("a"), 5), entry("status", num(500))...), ""},
		{append(append(doc(str("a"), 5), entry("status", num(math.NaN()))...), entry("status", num(503))...), ""},
		{doc(str("a\xffb"), 5), "rules[0].name: \"a\uFFFDb\" must match [a-z0-9_-]+ (at most 64 characters)"},
		{doc(str("a"), 5, entry("x\xc3", str("y"))), `rules[0].x` + "\ufffd" + `: unknown field (known: name, match, key, algorithm, limit, window, burst, max_delay, shadow, scope, min_limit, max_limit, cost, max_keys)`},
		{doc(str("a"), 1.5), `rules[0].limit: 1.5 is not a whole number`},
		{doc(str("a"), 1e21), `rules[0].limit: 1e+21 is not a whole number`},
		{doc(str("a"), 1e-7), `rules[0].limit: 1e-7 is not a whole number`},
	} {
		_, err := Parse(c.wire)
		if got := fmt.Sprint(err); c.want == "" && err != nil || c.want != "" && got != c.want {
			t.Errorf("%q: %v, want %q", c.wire, err, c.want)
		}
	}
	// A Struct whose first entry is 91 or 123 bytes long begins with
	// "\n[" or "\n{", which looks like JSON once white space is trimmed.
	for _, want := range []byte{'[', '{'} {
		found := false
		for n := 1; n < 100 && !found; n++ {
			wire := doc(str(strings.Repeat("a", n)), 5)
			if wire[1] == want {
				found = true
				if c, err := Parse(wire); err != nil || c.Rules[0].Name != strings.Repeat("a", n) {
					t.Errorf("%q: %v", wire, err)
				}
			}
		}
		if !found {
			t.Errorf("no Struct beginning with %q", []byte{'\n', want})
		}
	}
	// A NaN that stays refuses the Struct; so does nesting beyond maxDepth.
	nan := append(doc(str("a"), 5), entry("status", num(math.NaN()))...)
	deep := str("x")
	for i := 0; i < maxDepth+2; i++ {
		deep = list(deep)
	}
	for _, wire := range [][]byte{nan, append(doc(str("a"), 5), entry("exempt_cidrs", deep)...)} {
		if _, err := Parse(wire); err == nil {
			t.Errorf("%q accepted", wire)
		} else if _, ok := err.(*FieldError); !ok {
			t.Errorf("%q: %T %v", wire, err, err)
		}
	}
}

// dump spells a configuration for comparison (the Global pointer by value).
func dump(c *Config) string {
	if c == nil {
		return "nil"
	}
	g := "nil"
	if c.Global != nil {
		g = fmt.Sprintf("%+v", *c.Global)
	}
	d := *c
	d.Global = nil
	d.Index = nil // derived from the rules
	return fmt.Sprintf("%+v global=%s", d, g)
}

func TestSortByKey(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for n := 0; n < 200; n++ {
		var m []jsonlite.Member
		seen := map[string]bool{}
		for len(m) < n {
			k := strconv.Itoa(rng.IntN(10 * (n + 1)))
			if !seen[k] {
				seen[k] = true
				m = append(m, jsonlite.Member{Key: k})
			}
		}
		sortByKey(m)
		if !slices.IsSortedFunc(m, func(a, b jsonlite.Member) int { return strings.Compare(a.Key, b.Key) }) || len(m) != n {
			t.Fatalf("%d keys not sorted: %v", n, m)
		}
	}
}
