package config

import (
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sdk/header"
	"github.com/sluicehq/sluice/shared/limit"
)

func TestParseFullExample(t *testing.T) {
	doc := `{
	  "rules": [
	    {"name": "checkout", "match": {"path_prefix": "/checkout", "methods": ["POST"]},
	     "key": ["client_ip"], "algorithm": "token_bucket", "limit": 10, "window": "1m",
	     "burst": 10, "max_delay": "0s", "shadow": false},
	    {"name": "api", "key": ["header:X-Api-Key", "path", "method"], "algorithm": "sliding_window", "limit": 5.0, "window": "250ms"}
	  ],
	  "client_ip": {"xff_trusted_hops": 0, "ipv6_prefix": 64},
	  "exempt_cidrs": ["127.0.0.0/8", "::1"],
	  "headers": "both", "status": 429, "max_keys": 100000, "on_error": "allow"
	}`
	c, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Rules[0]
	if r.Name != "checkout" || r.Limit.Limit() != 10 || r.Limit.Window() != time.Minute || r.Limit.Burst() != 10 ||
		r.Match.PathPrefix != "/checkout" || r.Match.Methods[0] != "POST" || r.Key[0].Kind != KeyClientIP {
		t.Errorf("rule 0 = %+v", r)
	}
	a := c.Rules[1]
	if a.Limit.Algorithm() != limit.SlidingWindow || a.Limit.Window() != 250*time.Millisecond || a.Limit.Limit() != 5 {
		t.Errorf("rule 1 limit = %+v", a.Limit)
	}
	if a.Key[0].Kind != KeyHeader || a.Key[0].Header != "x-api-key" || a.Key[1].Kind != KeyPath || a.Key[2].Kind != KeyMethod {
		t.Errorf("rule 1 key = %+v", a.Key)
	}
	if c.Headers != header.Both || c.Status != 429 || c.MaxKeys != 100000 || c.OnErrorDeny || len(c.Exempt) != 2 {
		t.Errorf("config = %+v", c)
	}
	if c.Rules[0].ID == c.Rules[1].ID {
		t.Error("different rules share an ID")
	}
}

func TestDefaults(t *testing.T) {
	c, err := Parse([]byte(`{"rules":[{"name":"r","limit":3,"window":"1s"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Rules[0]
	if r.Limit.Algorithm() != limit.TokenBucket || r.Limit.Burst() != 3 || len(r.Key) != 1 || r.Key[0].Kind != KeyClientIP || r.MaxDelay != 0 {
		t.Errorf("rule defaults: %+v", r)
	}
	if c.Headers != header.Both || c.Status != 429 || c.MaxKeys != DefaultMaxKeys || c.ClientIP.IPv6Prefix != 64 || c.OnErrorDeny {
		t.Errorf("config defaults: %+v", c)
	}
}

func TestRuleIDStableAcrossUnrelatedChanges(t *testing.T) {
	a, _ := Parse([]byte(`{"rules":[{"name":"r","limit":3,"window":"1s"},{"name":"s","limit":1,"window":"1s"}]}`))
	b, _ := Parse([]byte(`{"rules":[{"name":"r","limit":3,"window":"1s"},{"name":"s","limit":2,"window":"1s"}],"status":503}`))
	if a.Rules[0].ID != b.Rules[0].ID {
		t.Error("unchanged rule changed ID")
	}
	if a.Rules[1].ID == b.Rules[1].ID {
		t.Error("changed rule kept its ID")
	}
}

func TestInvalidNamesTheField(t *testing.T) {
	ok := `"name":"r","limit":1,"window":"1s"`
	cases := []struct{ doc, field string }{
		{``, ""},
		{`[]`, "configuration must be a JSON object"},
		{`{"rules":[{` + ok + `}],}`, "not valid JSON"},
		{`{}`, "rules:"},
		{`{"rules":[]}`, "rules:"},
		{`{"rules":{}}`, "rules:"},
		{`{"rules":[{` + ok + `}],"bogus":1}`, "bogus: unknown field"},
		{`{"rules":[{` + ok + `,"colour":"red"}]}`, "rules[0].colour: unknown field"},
		{`{"rules":[{"limit":1,"window":"1s"}]}`, "rules[0].name: required"},
		{`{"rules":[{"name":"Bad Name","limit":1,"window":"1s"}]}`, "rules[0].name:"},
		{`{"rules":[{` + ok + `},{` + ok + `}]}`, "rules[1].name: duplicate"},
		{`{"rules":[{"name":"r","window":"1s"}]}`, "rules[0].limit: required"},
		{`{"rules":[{"name":"r","limit":0,"window":"1s"}]}`, "rules[0].limit: must be > 0"},
		{`{"rules":[{"name":"r","limit":1.5,"window":"1s"}]}`, "rules[0].limit:"},
		{`{"rules":[{"name":"r","limit":"10","window":"1s"}]}`, "rules[0].limit:"},
		{`{"rules":[{"name":"r","limit":1}]}`, "rules[0].window: required"},
		{`{"rules":[{"name":"r","limit":1,"window":"1 minute"}]}`, "rules[0].window:"},
		{`{"rules":[{"name":"r","limit":1,"window":"-1s"}]}`, "rules[0].window: must be > 0"},
		{`{"rules":[{"name":"r","limit":1,"window":60}]}`, "rules[0].window:"},
		{`{"rules":[{"name":"r","limit":1,"window":"1000000h","burst":100000}]}`, "rules[0].window:"},
		{`{"rules":[{` + ok + `,"burst":0}]}`, "rules[0].burst:"},
		{`{"rules":[{` + ok + `,"algorithm":"fixed_window","burst":5}]}`, "rules[0].burst:"},
		{`{"rules":[{` + ok + `,"algorithm":"gcra"}]}`, "rules[0].algorithm:"},
		{`{"rules":[{` + ok + `,"max_delay":"2m"}]}`, "rules[0].max_delay:"},
		{`{"rules":[{` + ok + `,"max_delay":"1s","algorithm":"sliding_window"}]}`, "rules[0].max_delay:"},
		{`{"rules":[{` + ok + `,"shadow":"yes"}]}`, "rules[0].shadow:"},
		{`{"rules":[{` + ok + `,"key":["cookie"]}]}`, "rules[0].key[0]:"},
		{`{"rules":[{` + ok + `,"key":["client_ip","header:"]}]}`, "rules[0].key[1]:"},
		{`{"rules":[{` + ok + `,"match":{"path":"/x"}}]}`, "rules[0].match.path: unknown field"},
		{`{"rules":[{` + ok + `,"match":{"path_prefix":"x"}}]}`, "rules[0].match.path_prefix:"},
		{`{"rules":[{` + ok + `,"match":{"methods":["GET",""]}}]}`, "rules[0].match.methods[1]:"},
		{`{"rules":[{` + ok + `,"match":{"case_sensitive":"no"}}]}`, "rules[0].match.case_sensitive:"},
		{`{"rules":[{` + ok + `,"match":{"route":[]}}]}`, "rules[0].match.route:"},
		{`{"rules":[{` + ok + `,"match":{"route":"checkout"}}]}`, "rules[0].match.route:"},
		{`{"rules":[{` + ok + `,"match":{"route":["a",""]}}]}`, "rules[0].match.route[1]:"},
		{`{"rules":[{` + ok + `}],"client_ip":{"xff_trusted_hops":-1}}`, "client_ip.xff_trusted_hops:"},
		{`{"rules":[{` + ok + `}],"client_ip":{"ipv6_prefix":129}}`, "client_ip.ipv6_prefix:"},
		{`{"rules":[{` + ok + `}],"client_ip":{"hops":1}}`, "client_ip.hops: unknown field"},
		{`{"rules":[{` + ok + `}],"exempt_cidrs":["10.0.0.0/33"]}`, "exempt_cidrs[0]:"},
		{`{"rules":[{` + ok + `}],"exempt_cidrs":["10.0.0.0/8","fe80::%eth0/64"]}`, "exempt_cidrs[1]: \"fe80::%eth0/64\": IPv6 zones are not allowed"},
		{`{"rules":[{` + ok + `}],"headers":"all"}`, "headers:"},
		{`{"rules":[{` + ok + `}],"status":200}`, "status:"},
		{`{"rules":[{` + ok + `}],"max_keys":0}`, "max_keys:"},
		{`{"rules":[{` + ok + `}],"on_error":"ignore"}`, "on_error:"},
		{`{"rules":[{` + ok + `}],"body":"json"}`, "body:"},
		{`{"rules":[{` + ok + `}],"body":true}`, "body:"},
		{`{"rules":[{` + ok + `}],"rule_metrics":"r"}`, "rule_metrics:"},
		{`{"rules":[{` + ok + `}],"rule_metrics":["r","nope"]}`, "rule_metrics[1]: no rule is named \"nope\""},
		{`{"rules":[{` + ok + `}],"status":null}`, "status:"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.doc))
		if err == nil {
			t.Errorf("%s: accepted", c.doc)
			continue
		}
		if !strings.Contains(err.Error(), c.field) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s:\n  error %q does not name %q on one line", c.doc, err, c.field)
		}
	}
}

func TestMatch(t *testing.T) {
	m := Match{PathPrefix: "/api", Methods: []string{"GET"}}
	if !m.Applies("/api/x?y=1", "GET") || m.Applies("/apx", "GET") || m.Applies("/api", "POST") {
		t.Error("prefix/method match wrong")
	}
	e := Match{PathExact: "/login"}
	if !e.Applies("/login?next=/", "POST") || e.Applies("/login/x", "POST") {
		t.Error("exact match wrong")
	}
	var all Match
	if !all.Applies("", "") {
		t.Error("empty match must apply to everything")
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"rules":[{"name":"r","limit":1,"window":"1s"}]}`))
	f.Add([]byte(`{"rules":[{"name":"a","match":{"path_prefix":"/"},"key":["header:x"],"algorithm":"leaky_bucket","limit":5,"window":"10ms","burst":2,"max_delay":"1s"}],"exempt_cidrs":["::/0"]}`))
	// A google.protobuf.Struct in its wire encoding ({"rules":[{"name":"r"}]}).
	f.Add([]byte("\x0a\x1c\x0a\x05rules\x12\x13\x32\x11\x0a\x0f\x2a\x0d\x0a\x0b\x0a\x04name\x12\x03\x1a\x01r"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		c, err := Parse(doc)
		if err != nil {
			if fe, ok := err.(*FieldError); !ok || strings.Contains(fe.Error(), "\n") {
				t.Fatalf("error is not a one-line FieldError: %T %q", err, err)
			}
			return
		}
		if len(c.Rules) == 0 || c.MaxKeys < 1 || c.Status < 400 {
			t.Fatalf("accepted invalid config %+v", c)
		}
	})
}

// TestRuleIDUnchanged: rule IDs are those the plugin computed with
// fmt.Fprintf, so that an upgrade keeps the client state of unchanged rules.
func TestRuleIDUnchanged(t *testing.T) {
	files, _ := filepath.Glob("testdata/corpus/valid/*.json")
	n := 0
	for _, f := range files {
		doc, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c, err := Parse(doc)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for i := range c.Rules {
			r := &c.Rules[i]
			h := fnv.New64a()
			fmt.Fprintf(h, "%s|%t|%s|%q|%q|%v|", r.Name, r.Global, r.Limit.Algorithm(), r.Match.PathPrefix, r.Match.PathExact, r.Match.Methods)
			for _, k := range r.Key {
				fmt.Fprintf(h, "%d:%s,", k.Kind, k.Header)
			}
			fmt.Fprintf(h, "|%d|%d|%d", r.Limit.Limit(), r.Limit.Window(), r.Limit.Burst())
			if c := r.Cost; c.Set() {
				fmt.Fprintf(h, "|cost|%s|%s|%d", c.RequestHeader, c.ResponseHeader, c.Max)
				for _, s := range c.OnStatus {
					fmt.Fprintf(h, ",%d", s)
				}
			}
			// Match fields added later are hashed only when set: rules
			// without them keep their IDs.
			if r.Match.IgnoreCase {
				fmt.Fprint(h, "|ci")
			}
			for _, rt := range r.Match.Routes {
				fmt.Fprintf(h, "|route|%q", rt)
			}
			// Classes after the match fields (and never with a cost).
			if len(r.Classes) > 0 {
				fmt.Fprint(h, "|classes")
				for _, c := range r.Classes {
					fmt.Fprintf(h, "|%s|%q|%q|%v|%v|%x", c.Name, c.Match.PathPrefix, c.Match.PathExact, c.Match.Methods, c.Match.Routes, math.Float64bits(c.Reserve))
				}
			}
			if r.ID != h.Sum64() {
				t.Errorf("%s: rule %s: ID %x, fmt gives %x", f, r.Name, r.ID, h.Sum64())
			}
			n++
		}
	}
	if n < 20 {
		t.Fatalf("only %d rules checked", n)
	}
}

// TestUnknownFieldIsOneLine: an unknown key with a newline or another
// control character (JSON escapes it; a Struct carries it raw) is quoted in
// the error, which Envoy logs as one line; other keys are shown as they are.
func TestUnknownFieldIsOneLine(t *testing.T) {
	ok := `{"name":"a","limit":1,"window":"1s"}`
	for _, c := range []struct{ doc, want string }{
		{`{"rules":[` + ok + `],"a\nb":1}`, `"a\nb": unknown field (known: `},
		{`{"rules":[{"name":"a","limit":1,"window":"1s","x\u0000\r":1}]}`, `rules[0]."x\x00\r": unknown field (known: `},
		{`{"rules":[` + ok + `],"client_ip":{"\u2028":1}}`, `client_ip."\u2028": unknown field (known: `},
		{`{"rules":[` + ok + `],"héllo wörld":1}`, `héllo wörld: unknown field (known: `},
		// The Struct of FuzzParse's corpus entry 5a3ad462af7ff59c: one
		// key, "\n0000000000", with no value.
		{"\n\r\n\v\n0000000000", `"\n0000000000": unknown field (known: `},
	} {
		_, err := Parse([]byte(c.doc))
		if err == nil || !strings.HasPrefix(err.Error(), c.want) || strings.ContainsAny(err.Error(), "\n\r\x00\u2028") {
			t.Errorf("Parse(%q) = %q, want one line starting %q", c.doc, err, c.want)
		}
	}
}
