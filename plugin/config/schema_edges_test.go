package config

import (
	"encoding/json"
	"strings"
	"testing"
)

// semanticReasons pairs a fragment of each Parse error that JSON Schema
// cannot express with the words of schema.json's description that list
// that reason: the description promises that a document passing the
// schema is refused only for the reasons it lists.
var semanticReasons = []struct{ parse, listed string }{
	{"duplicate rule name", "two rules with the same `name`"},
	{"is longer than 60s", "`max_delay` longer than 60s"},
	{"over the default max_limit", "`min_limit` is over its `max_limit` (default 1000)"},
	{"must be >= min_limit", "`min_limit` is over its `max_limit`"},
	{"is too small for", "a top-level `max_keys` too small for the rules"},
	{"does not fit: max_keys", "a rule's own `max_keys` that does not fit"},
	{"global.timeout: ", "a `global.timeout` outside 1ms..10s"},
}

// schemaDescription is schema.json's top-level description.
func schemaDescription(t *testing.T) string {
	var top struct{ Description string }
	if err := json.Unmarshal(Schema, &top); err != nil {
		t.Fatal(err)
	}
	return top.Description
}

// listedReason reports whether err, a refusal by Parse of a document the
// schema accepts, is one of the reasons schema.json's description lists.
func listedReason(t *testing.T, err error) bool {
	desc := schemaDescription(t)
	for _, r := range semanticReasons {
		if strings.Contains(err.Error(), r.parse) {
			if !strings.Contains(desc, r.listed) {
				t.Errorf("schema.json's description does not list %q", r.listed)
			}
			return true
		}
	}
	return false
}

// Parse and the schema agree on edge documents (white space, nulls, number
// spellings, bounds, combinations), except where Parse refuses for a reason
// the schema's description lists, or accepts the one case it lists the
// other way (a sliding_window max_delay that rounds down to 0 ns).
func TestSchemaAgreesOnEdgeDocuments(t *testing.T) {
	sch := compileSchema(t)
	r := `{"name":"a","limit":1,"window":"1s"}`
	g := `{"name":"a","scope":"global","limit":1,"window":"1m"}`
	docs := []string{
		"\ufeff{\"rules\":[" + r + "]}",
		`{"rules":[` + r + `],}`,
		`{"rules":[` + r + `]} // c`,
		`{"rules":[` + r + `],"status":NaN}`,
		`{"rules":[` + r + `],"status":4.29e2}`,
		`{"rules":[` + r + `],"status":-0}`,
		`{"rules":[` + r + `],"max_keys":1e400}`,
		`{"rules":[` + r + `],"max_keys":100000000.0000000001}`,
		`{"rules":[{"name":"a","limit":4294967295.0000001,"window":"1s"}]}`,
		`{"rules":[{"name":"a","limit":4294967295.00000001,"window":"1s"}]}`,
		`{"rules":[{"name":"a","limit":1.00000000000000001,"window":"1s"}]}`,
		`{"rules":[{"name":"a","limit":0.99999999999999999,"window":"1s"}]}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","burst":9007199254740993}]}`,
		`{"rules":[{"name":"a","limit":-0,"window":"1s"}]}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s"}],"rules":[]}`,
		`{"rules":[{"name":"a","name":"B","limit":1,"window":"1s"}]}`,
		`{"rules":[{"name":"\u0061","limit":1,"window":"1s"}]}`,
		`{"rules":[{"name":"a","limit":1,"window":"1\u0073"}]}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","max_delay":"60.001s"}]}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","max_delay":"60s"}]}`,
		`{"rules":[{"name":"a","limit":1,"window":"25h"}]}`,
		`{"rules":[{"name":"a","limit":1,"window":"1ns"}]}`,
		`{"rules":[` + g + `],"global":{"cluster":"rl","timeout":"11s"}}`,
		`{"rules":[` + g + `],"global":{"cluster":"rl","timeout":"999us"}}`,
		`{"rules":[` + g + `],"global":{"cluster":"rl","timeout":"10s"}}`,
		`{"rules":[` + g + `],"global":{"cluster":"rl","timeout":"1ms"}}`,
		`{"rules":[` + g + `],"global":{"cluster":"` + strings.Repeat("é", 150) + `"}}`,
		`{"rules":[` + g + `],"global":{"cluster":"` + strings.Repeat("x", 201) + `"}}`,
		`{"rules":[` + g + `],"global":{"cluster":"a\nb"}}`,
		`{"rules":[` + g + `],"global":{"cluster":"a\u2028b"}}`,
		`{"rules":[` + g + `],"global":{"cluster":"rl","domain":"a\nb"}}`,
		`{"rules":[` + g + `],"global":{"cluster":"rl","domain":"` + strings.Repeat("é", 150) + `"}}`,
		`{"rules":[` + g + `],"global":{"cluster":"rl","domain":null}}`,
		`{"rules":[` + g + `],"global":{"cluster":"rl","timeout":null}}`,
		`{"rules":[` + g + `],"global":null}`,
		`{"rules":[` + r + `],"global":{"cluster":"rl"}}`,
		`{"rules":[` + g + `],"global":{"cluster":"rl"},"max_keys":9}`,
		`{"rules":[{"name":"a","scope":"global","algorithm":"fixed_window","limit":1,"window":"1d","cost":{"request_header":"x"}}],"global":{"cluster":"rl"}}`,
		`{"rules":[{"name":"a","scope":"local","limit":1,"window":"1d"}]}`,
		`{"rules":[{"name":"a","scope":"global","limit":1,"window":"1m","min_limit":1}],"global":{"cluster":"rl"}}`,
		`{"rules":[` + r + `,{"name":"b","limit":1,"window":"1s"}],"max_keys":17}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","max_keys":9}],"max_keys":9}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","max_keys":10}],"max_keys":9}`,
		`{"rules":[` + r + `],"client_ip":{"xff_trusted_hops":64,"ipv6_prefix":128}}`,
		`{"rules":[` + r + `],"client_ip":{"xff_trusted_hops":null}}`,
		`{"rules":[` + r + `],"client_ip":null}`,
		`{"rules":[` + r + `],"exempt_cidrs":["::ffff:10.0.0.0/104"]}`,
		`{"rules":[` + r + `],"exempt_cidrs":["::ffff:10.0.0.0/95"]}`,
		`{"rules":[` + r + `],"exempt_cidrs":["10.0.0.1/8"]}`,
		`{"rules":[` + r + `],"exempt_cidrs":["10.0.0.0/8 "]}`,
		`{"rules":[` + r + `],"exempt_cidrs":[" 10.0.0.0 /8"]}`,
		`{"rules":[` + r + `],"exempt_cidrs":[]}`,
		`{"rules":[` + r + `],"exempt_cidrs":null}`,
		`{"rules":[` + r + `],"headers":null}`,
		`{"rules":[` + r + `],"body":null}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","match":{"methods":["get\u000bx"]}}]}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","match":{"methods":["ǅ"]}}]}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","match":{"path_prefix":null}}]}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","match":{"methods":null}}]}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","key":null}]}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","key":["header:\u212a"]}]}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","key":["header:x","header:X"]}]}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","key":["client_ip","client_ip"]}]}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","cost":{"response_header":"x","max":null}}]}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","cost":{"on_status":[401.0,401]}}]}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","cost":{"on_status":[100,599]}}]}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","cost":{"request_header":"x","max":1}}]}`,
		`{"rules":[{"name":"a","limit":5,"window":"1s","burst":10,"cost":{"request_header":"x","max":10}}]}`,
		`{"rules":[{"name":"a","limit":5,"window":"1s","burst":3,"cost":{"request_header":"x","max":5}}]}`,
		`{"rules":[{"name":"a","algorithm":"fixed_window","limit":5,"window":"1s","cost":{"request_header":"x","max":6}}]}`,
		`{"rules":[{"name":"a","algorithm":"sliding_window","limit":1,"window":"1s","max_delay":"0.0000000001s"}]}`,
		`{"rules":[{"name":"a","algorithm":"sliding_window","limit":1,"window":"1s","max_delay":"-0s"}]}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","max_delay":"-0.5ns"}]}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","cost":{"response_header":"x"},"max_delay":"0.1ns"}]}`,
		`{"rules":[{"name":"a","algorithm":"concurrency","limit":65535}]}`,
		`{"rules":[{"name":"a","algorithm":"concurrency","limit":65536}]}`,
		`{"rules":[{"name":"a","algorithm":"concurrency","limit":1,"window":null}]}`,
		`{"rules":[{"name":"a","algorithm":"adaptive_concurrency","min_limit":1000}]}`,
		`{"rules":[{"name":"a","algorithm":"adaptive_concurrency","min_limit":1001}]}`,
		`{"rules":[{"name":"a","algorithm":"adaptive_concurrency","max_limit":65535,"min_limit":65535}]}`,
		`{"rules":[{"name":"a","algorithm":"adaptive_concurrency","min_limit":null}]}`,
		`{"rules":[{"name":"a","algorithm":"adaptive_concurrency","shadow":true,"max_delay":"60s"}]}`,
		`{"rules":[{"name":"` + strings.Repeat("a", 64) + `","limit":1,"window":"1s"}]}`,
		`{"rules":[{"name":"` + strings.Repeat("a", 65) + `","limit":1,"window":"1s"}]}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","cost":null}]}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","scope":null}]}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","shadow":null}]}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","burst":null}]}`,
		`{"rules":[{"name":"a","algorithm":"fixed_window","limit":1,"window":"1s","burst":null}]}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","max_keys":null}]}`,
		`{"rules":[{"name":"a","limit":null,"algorithm":"adaptive_concurrency"}]}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s"},null]}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","min_limit":null}]}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s"},{"name":"b","limit":1,"window":"1s"}],"max_keys":18}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","max_keys":10},{"name":"b","limit":1,"window":"1s"}],"max_keys":18}`,
		`{"rules":[{"name":"a","limit":1,"window":"1s","max_keys":10},{"name":"b","limit":1,"window":"1s"}],"max_keys":19}`,
	}
	desc := schemaDescription(t)
	for _, d := range docs {
		_, perr := Parse([]byte(d))
		serr := schemaCheck(sch, []byte(d))
		switch {
		case (perr == nil) == (serr == nil):
		case perr != nil && !listedReason(t, perr):
			t.Errorf("%s\n  Parse: %v\n  schema: accepts, and its description does not list this reason", d, perr)
		case perr == nil && !(strings.Contains(d, `"max_delay":"0.0000000001s"`) && strings.Contains(desc, "rounds down to 0 ns is accepted by the plugin")):
			t.Errorf("%s\n  Parse: accepts\n  schema: %s", d, oneLine(serr))
		}
	}
}
