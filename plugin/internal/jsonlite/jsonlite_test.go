package jsonlite

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
)

// reference decodes doc the way the configuration parser did with
// encoding/json: a Decoder with UseNumber, one value, then nothing but the
// end of input.
func reference(doc []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return errors.New("trailing data")
	}
	return nil
}

// toAny turns a Value into what encoding/json decodes into an any with
// UseNumber: the last of duplicate keys wins.
func toAny(v *Value) any {
	switch v.Kind {
	case Null:
		return nil
	case False:
		return false
	case True:
		return true
	case Number:
		return json.Number(v.Text)
	case String:
		return v.Text
	case Array:
		out := []any{}
		for i := range v.Elems {
			out = append(out, toAny(&v.Elems[i]))
		}
		return out
	}
	out := map[string]any{}
	for i := range v.Members {
		out[v.Members[i].Key] = toAny(&v.Members[i].Value)
	}
	return out
}

// compare checks Decode, Valid and the typed accessors against
// encoding/json on one document.
func compare(t *testing.T, doc []byte) {
	t.Helper()
	if got, want := Valid(doc), json.Valid(doc); got != want {
		t.Fatalf("Valid(%q) = %v, encoding/json %v", doc, got, want)
	}
	var ref any
	rerr := reference(doc, &ref)
	v, err := Decode(doc)
	var rse *json.SyntaxError
	if errors.As(rerr, &rse) {
		se, ok := err.(*SyntaxError)
		if !ok || se.Msg != rse.Error() || se.Offset != rse.Offset {
			t.Fatalf("Decode(%q): %#v, encoding/json syntax error %q at %d", doc, err, rse.Error(), rse.Offset)
		}
		return
	}
	if rerr != nil {
		if err == nil {
			t.Fatalf("Decode(%q) accepted %v; encoding/json: %v", doc, toAny(&v), rerr)
		}
		if _, ok := err.(*SyntaxError); ok {
			t.Fatalf("Decode(%q): syntax error %v; encoding/json: %v", doc, err, rerr)
		}
		return
	}
	if err != nil {
		t.Fatalf("Decode(%q): %v; encoding/json accepted %#v", doc, err, ref)
	}
	if got := toAny(&v); !reflect.DeepEqual(got, ref) {
		t.Fatalf("Decode(%q) = %#v, encoding/json %#v", doc, got, ref)
	}
	// The accessors the configuration uses, against encoding/json decoding
	// into the Go types it used. null is refused before any of them.
	null := v.Kind == Null
	{
		var want string
		rerr := json.Unmarshal(doc, &want)
		got, ok := v.Str()
		if ok != (rerr == nil && !null) || ok && got != want {
			t.Fatalf("Str(%q) = %q %v, encoding/json %q %v", doc, got, ok, want, rerr)
		}
	}
	{
		var want []string
		rerr := json.Unmarshal(doc, &want)
		got, ok := v.Strings()
		if ok != (rerr == nil && !null) || ok && !reflect.DeepEqual(got, want) {
			t.Fatalf("Strings(%q) = %#v %v, encoding/json %#v %v", doc, got, ok, want, rerr)
		}
	}
	{
		var want bool
		rerr := json.Unmarshal(doc, &want)
		got, ok := v.Bool()
		if ok != (rerr == nil && !null) || ok && got != want {
			t.Fatalf("Bool(%q) = %v %v, encoding/json %v %v", doc, got, ok, want, rerr)
		}
	}
	if v.Kind != String { // a string holding a number is refused before
		var want json.Number
		rerr := json.Unmarshal(doc, &want)
		ok := v.Kind == Number
		if ok != (rerr == nil && !null) || ok && v.Text != string(want) {
			t.Fatalf("Number(%q) = %q %v, encoding/json %q %v", doc, v.Text, ok, want, rerr)
		}
	}
	{
		var want map[string]json.RawMessage
		rerr := json.Unmarshal(doc, &want)
		ok := v.Kind == Object
		if ok != (rerr == nil && !null) {
			t.Fatalf("object(%q): %v, encoding/json %v", doc, ok, rerr)
		}
		if ok {
			keys := v.Keys()
			if len(keys) != len(want) {
				t.Fatalf("Keys(%q) = %q, encoding/json %d keys", doc, keys, len(want))
			}
			for _, k := range keys {
				var sub any
				if err := reference(want[k], &sub); err != nil || !reflect.DeepEqual(toAny(v.Get(k)), sub) {
					t.Fatalf("Get(%q) in %q = %#v, encoding/json %#v %v", k, doc, toAny(v.Get(k)), sub, err)
				}
			}
		}
	}
	{
		var want []json.RawMessage
		rerr := json.Unmarshal(doc, &want)
		ok := v.Kind == Array
		if ok != (rerr == nil && !null) || ok && len(v.Elems) != len(want) {
			t.Fatalf("array(%q): %v, encoding/json %v %v", doc, ok, len(want), rerr)
		}
	}
}

var cases = []string{
	``, ` `, `{}`, `[]`, ` {"a":1} `, `{"a":1}x`, `{"a":1} {}`, `{"a":1}}`, `12x`, `12 3`, `01`, `[01]`,
	`-`, `-x`, `1.`, `1.x`, `1e`, `1e+`, `1ex`, `1E-7`, `-0.0e+0`, `1.5e300`, `123456789012345678901234567890`,
	`tru`, `trux`, `truex`, `[truex]`, `fals`, `falsy`, `nul`, `nuLL`, `null`, `true`, `false`,
	`"abc`, `"a\"b"`, `"\u00e9\/\b\f\n\r\t\\"`, `"\ud83d\ude00"`, `"\ud83d"`, `"\ude00\ud83d"`, `"\ud83dx"`,
	`"\ud83d\u0041"`, `"\ud83d\ud83d\ude00"`, `"\u12"`, `"\u12g4"`, `"\x"`, "\"a\x01b\"", "\"\xff\xfe\"", "\"\xed\xa0\x80\"",
	"\"caf\xc3\xa9\"", "\"\xc3\"", `{"a":1,"a":2}`, `{"a":1,"b":[1,2,{"c":null}],"a":{"x":"y"}}`, `{"a" 1}`, `{"a":1,}`, `{,}`,
	`[1,]`, `[,1]`, `{"a":1 "b":2}`, `[1 2]`, `{1:2}`, `{"a":}`, `["a",null,"b"]`, `["a",1]`, `[null]`, `"\u0000"`,
	"\v{}", "{}\v", "{\"a\":\f1}", `'a'`, "\x00", "\x80", "\xff", `{"\ud800":1,"\udc00":2}`,
	strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth),
	strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1),
	strings.Repeat(`{"a":`, MaxDepth+1) + "1" + strings.Repeat("}", MaxDepth+1),
	strings.Repeat("[", MaxDepth+1),
}

func TestAgainstEncodingJSON(t *testing.T) {
	for _, c := range cases {
		compare(t, []byte(c))
	}
}

func TestSyntaxErrorWording(t *testing.T) {
	for doc, want := range map[string]string{
		`{"a":1,}`:       `invalid character '}' looking for beginning of object key string (at 8)`,
		"[\"\xff\x01\"]": `invalid character '\x01' in string literal (at 4)`,
		"[\xff]":         `invalid character 'ÿ' looking for beginning of value (at 2)`,
		`nuLL`:           `invalid character 'L' in literal null (expecting 'l') (at 3)`,
	} {
		_, err := Decode([]byte(doc))
		se, ok := err.(*SyntaxError)
		if !ok {
			t.Errorf("Decode(%q) = %v, want a syntax error", doc, err)
			continue
		}
		if got := fmt.Sprintf("%s (at %d)", se.Msg, se.Offset); got != want {
			t.Errorf("Decode(%q): %s, want %s", doc, got, want)
		}
	}
}

func TestDuplicateKeysLastWins(t *testing.T) {
	v, err := Decode([]byte(`{"a":1,"b":2,"a":3}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := v.Get("a").Text; got != "3" {
		t.Errorf(`Get("a") = %s, want 3`, got)
	}
	if keys := v.Keys(); !reflect.DeepEqual(keys, []string{"a", "b"}) {
		t.Errorf("Keys = %q", keys)
	}
}

// FuzzDifferential holds Decode, Valid and the accessors to encoding/json
// on arbitrary input.
func FuzzDifferential(f *testing.F) {
	for _, c := range cases {
		if len(c) < 1000 {
			f.Add([]byte(c))
		}
	}
	f.Add([]byte(`{"rules":[{"name":"r","limit":1,"window":"1s","match":{"methods":["GET",null]}}],"status":4.29e2}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		compare(t, doc)
	})
}
