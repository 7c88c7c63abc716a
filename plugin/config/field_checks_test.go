package config

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

const globalRule = `{"name":"a","scope":"global","limit":1,"window":"1m"}`

// global.cluster and global.domain hold at most 200 characters, as the docs,
// the plugin's error and schema.json's maxLength (which counts characters)
// say: 150 "é" (300 bytes) are accepted by Parse and the schema alike, 201
// characters refused by both.
func TestGlobalNameLengthCountsCharacters(t *testing.T) {
	sch := compileSchema(t)
	for _, c := range []struct {
		name string
		ok   bool
	}{{strings.Repeat("é", 150), true}, {strings.Repeat("é", 200), true}, {strings.Repeat("é", 201), false}} {
		for _, g := range []string{`{"cluster":"` + c.name + `"}`, `{"cluster":"rl","domain":"` + c.name + `"}`} {
			doc := `{"rules":[` + globalRule + `],"global":` + g + `}`
			_, perr := Parse([]byte(doc))
			serr := schemaCheck(sch, []byte(doc))
			if (perr == nil) != c.ok || (serr == nil) != c.ok {
				t.Errorf("global %s (%d characters): Parse: %v; schema refuses: %v; want accepted %v", g[:20], len([]rune(c.name)), perr, serr != nil, c.ok)
			}
		}
	}
}

// A cluster name or a rate-limit domain has no control characters: Parse
// refuses one anywhere in it, naming the field, and so does the schema;
// other characters inside (a space, U+2028) are accepted by both.
func TestGlobalNameControlCharactersRefusedByBoth(t *testing.T) {
	sch := compileSchema(t)
	for _, c := range []struct {
		global, field string
	}{
		{`{"cluster":"a\nb"}`, "global.cluster"},
		{`{"cluster":"a\u0000b"}`, "global.cluster"},
		{`{"cluster":"a\u007fb"}`, "global.cluster"},
		{`{"cluster":"rl","domain":"a\nb"}`, "global.domain"},
		{`{"cluster":"rl","domain":"a\u0085b"}`, "global.domain"},
		{`{"cluster":"rl","domain":"a\tb"}`, "global.domain"},
		{`{"cluster":"a b"}`, ""},
		{`{"cluster":"rl","domain":"a\u2028b"}`, ""},
	} {
		doc := `{"rules":[` + globalRule + `],"global":` + c.global + `}`
		_, perr := Parse([]byte(doc))
		serr := schemaCheck(sch, []byte(doc))
		if f, _ := fieldOf(perr); f != c.field || (serr != nil) != (c.field != "") {
			t.Errorf("%s: Parse error %v (want field %q), schema refuses %v", c.global, perr, c.field, serr != nil)
		}
	}
}

// An integer field takes a number literal whose value is whole, judged on
// the literal as JSON Schema's "integer" does, not on the float64 it rounds
// to: 1.00000000000000001 is refused by Parse and the schema alike, while
// 10.0, 4.29e2 and 100e-2 (whole values written otherwise) are accepted by
// both.
func TestIntegerFieldsJudgeTheLiteral(t *testing.T) {
	sch := compileSchema(t)
	for _, c := range []struct {
		doc string
		ok  bool
	}{
		{`{"rules":[{"name":"a","limit":1.00000000000000001,"window":"1s"}]}`, false},
		{`{"rules":[{"name":"a","limit":0.99999999999999999,"window":"1s"}]}`, false},
		{`{"rules":[{"name":"a","limit":1000e-4,"window":"1s"}]}`, false},
		{`{"rules":[{"name":"a","limit":1,"window":"1s"}],"status":429.00000000000001}`, false},
		{`{"rules":[{"name":"a","limit":1,"window":"1s"}],"max_keys":100000000.0000000001}`, false},
		{`{"rules":[{"name":"a","limit":10.0,"window":"1s"}]}`, true},
		{`{"rules":[{"name":"a","limit":100e-2,"window":"1s"}]}`, true},
		{`{"rules":[{"name":"a","limit":1.5E1,"window":"1s"}]}`, true},
		{`{"rules":[{"name":"a","limit":1,"window":"1s"}],"status":4.29e2}`, true},
		{`{"rules":[{"name":"a","limit":1,"window":"1s","cost":{"on_status":[401.0,403]}}]}`, true},
	} {
		_, perr := Parse([]byte(c.doc))
		serr := schemaCheck(sch, []byte(c.doc))
		if (perr == nil) != c.ok || (serr == nil) != c.ok {
			t.Errorf("%s: Parse error %v, schema refuses %v; want accepted %v", c.doc, perr, serr != nil, c.ok)
		}
	}
}

// A Struct configuration (wire encoding) whose first entry is 123 bytes
// long begins, after the 0x0a tag, with the byte '{': it is still read as
// the Struct it is, so that an error names the field ("a bad config names
// the field"), here the unknown a_rulez.
func TestStructThatLooksLikeJSONNamesTheField(t *testing.T) {
	// Find a value length that makes the first entry (sorted keys,
	// deterministic marshalling) exactly 123 bytes.
	for n := 1; n < 130; n++ {
		s, err := structpb.NewStruct(map[string]any{
			"a_rulez": []any{map[string]any{"name": strings.Repeat("x", n), "limit": 1, "window": "1s"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		wire, err := proto.MarshalOptions{Deterministic: true}.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if wire[1] != '{' {
			continue
		}
		_, perr := Parse(wire)
		if f, _ := fieldOf(perr); f != "a_rulez" {
			t.Errorf("Struct {\"a_rulez\": ...} (first entry of 123 bytes): error %q, want it to name a_rulez", perr)
		}
		return
	}
	t.Fatal("no length gave a '{' byte")
}

// A JSON object followed by more than white space, or cut short, is
// reported as not valid JSON with what is wrong, not as "must be a JSON
// object" (it is one).
func TestTrailingOrTruncatedJSONSaysWhatIsWrong(t *testing.T) {
	for doc, want := range map[string]string{
		`{"rules":[{"name":"a","limit":1,"window":"1s"}]} // comment`: "configuration is not valid JSON: trailing data after the JSON value",
		`{"rules":[{"name":"a","limit":1,"window":"1s"}]`:             "configuration is not valid JSON: unexpected end of JSON input",
	} {
		if _, err := Parse([]byte(doc)); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %q", doc, err, want)
		}
	}
}
