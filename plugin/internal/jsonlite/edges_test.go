package jsonlite

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// Edge documents: jsonlite must accept and refuse what encoding/json's
// Decoder does (one value then white space), and decode strings the same.
func TestEdgeDocumentsAsEncodingJSON(t *testing.T) {
	docs := []string{
		"\ufeff{}", `{"a":1,}`, `[1,]`, `{"a":1}//c`, `{"a":NaN}`, `{"a":Infinity}`, `{"a":-0}`, `{"a":1e400}`,
		`{"a":01}`, `{"a":.5}`, `{"a":1.}`, `{"a":+1}`, `{"a":0x10}`, `"\ud83d\ude00"`, `"\ud83d"`, `"\ude00\ud83d"`,
		`"\ud83d\u0041"`, `"\ud83d\ud83d\ude00"`, "\"\xed\xa0\x80\"", "\"\xff\"", `"\u00e9"`, "\"a\x7fb\"", `{"a":1 "b":2}`,
		`{"a" 1}`, `{a:1}`, `['a']`, "{\"a\":1}\x00", "\u00a0{}", "{}\u2028", `tru`, `nul`, `"\x"`, `"\u12"`,
		strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
		strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
		strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000),
	}
	for _, d := range docs {
		v, err := Decode([]byte(d))
		dec := json.NewDecoder(bytes.NewReader([]byte(d)))
		dec.UseNumber()
		var x any
		jerr := dec.Decode(&x)
		if jerr == nil {
			if rest := bytes.Trim([]byte(d)[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
				jerr = ErrTrailing
			}
		}
		if (err == nil) != (jerr == nil) {
			show := d
			if len(show) > 40 {
				show = show[:40] + "..."
			}
			t.Errorf("%q: jsonlite %v, encoding/json %v", show, err, jerr)
			continue
		}
		if err == nil && v.Kind == String && v.Text != x.(string) {
			t.Errorf("%q: jsonlite %q, encoding/json %q", d, v.Text, x)
		}
	}
}
