//go:build go1.25

package header

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestParseProblem(t *testing.T) {
	sluice := AppendProblem(nil, 429, []string{"checkout", `we"ird`}, 3*time.Second)
	for _, c := range []struct {
		name string
		body string
		want Problem
		ok   bool
	}{
		{"what Sluice writes", string(sluice), Problem{Type: QuotaExceeded, Status: 429,
			ViolatedPolicies: []string{"checkout", `we"ird`}, RetryAfter: 3 * time.Second, HasRetryAfter: true}, true},
		{"the draft's example", `{
		  "type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
		  "title": "Request cannot be satisfied as assigned quota has been exceeded",
		  "status": 429,
		  "violated-policies": ["daily", "hourly"]
		}`, Problem{Type: QuotaExceeded, Status: 429, ViolatedPolicies: []string{"daily", "hourly"}}, true},
		{"other members of any type skipped", `{"a":{"b":[1,2.5e-3,true,null,{"c":"\u00e9"}]},"violated-policies":["x",1,{"y":2},"z"],"retry-after":1.5}`,
			Problem{ViolatedPolicies: []string{"x", "z"}, RetryAfter: 1500 * time.Millisecond, HasRetryAfter: true}, true},
		{"escapes and surrogates", `{"violated-policies":["a\/b\n","\ud83d\ude00","\udc00"]}`,
			Problem{ViolatedPolicies: []string{"a/b\n", "😀", "\ufffd"}}, true},
		{"wrong types ignored", `{"type":7,"status":"429","violated-policies":"x","retry-after":-1}`, Problem{}, true},
		{"last member wins", `{"type":"a","type":"b","violated-policies":["x"],"violated-policies":["y"]}`,
			Problem{Type: "b", ViolatedPolicies: []string{"y"}}, true},
		{"empty object", `{} `, Problem{}, true},
		{"not an object", `["x"]`, Problem{}, false},
		{"trailing garbage", `{}x`, Problem{}, false},
		{"truncated", `{"violated-policies":["a"`, Problem{}, false},
		{"control character", "{\"type\":\"a\x01\"}", Problem{}, false},
		{"bad escape", `{"type":"\x"}`, Problem{}, false},
		{"too deep", `{"a":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`, Problem{}, false},
	} {
		got, ok := ParseProblem([]byte(c.body))
		if ok != c.ok || !reflect.DeepEqual(got, c.want) && !(len(got.ViolatedPolicies) == 0 && len(c.want.ViolatedPolicies) == 0 &&
			got.Type == c.want.Type && got.Status == c.want.Status && got.RetryAfter == c.want.RetryAfter) {
			t.Errorf("%s: ParseProblem = %+v, %v; want %+v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
	many := `{"violated-policies":[` + strings.Repeat(`"p",`, 100) + `"p"]}`
	if got, ok := ParseProblem([]byte(many)); !ok || len(got.ViolatedPolicies) != maxProblemPolicies {
		t.Errorf("100 policies: %d kept, ok %v; want %d", len(got.ViolatedPolicies), ok, maxProblemPolicies)
	}
	for ct, want := range map[string]bool{
		"application/problem+json": true, "Application/Problem+JSON; charset=utf-8": true,
		" application/problem+json ": true, "application/json": false, "": false,
	} {
		if IsProblem(ct) != want {
			t.Errorf("IsProblem(%q) = %v", ct, !want)
		}
	}
}

func TestCached(t *testing.T) {
	for v, want := range map[string]bool{"": false, "0": false, "1": true, " 30 ": true, "-1": false, "x": false, "99999999999999999999": true} {
		h := http.Header{}
		if v != "" {
			h.Set("Age", v)
		}
		if Cached(h) != want {
			t.Errorf("Age %q: Cached = %v", v, !want)
		}
	}
}

// depth is the deepest nesting of arrays and objects in a valid document.
func depth(b []byte) int {
	d, most := 0, 0
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		tok, err := dec.Token()
		if err != nil {
			return most
		}
		if dl, ok := tok.(json.Delim); ok {
			if dl == '[' || dl == '{' {
				d++
				most = max(most, d)
			} else {
				d--
			}
		}
	}
}

// FuzzParseProblem checks the hand-written parser against encoding/json:
// it accepts exactly the JSON objects encoding/json accepts (valid UTF-8,
// nesting within its bound), and reads the same members from them.
func FuzzParseProblem(f *testing.F) {
	f.Add(AppendProblem(nil, 429, []string{"a", "b"}, time.Second))
	f.Add([]byte(`{"type":"x","status":503,"violated-policies":["p"],"retry-after":2.5,"o":{"k":[null,true,-0.1e+5]}}`))
	f.Add([]byte(`{"violated-policies":["\ud800\udc00","\u0000"]}`))
	f.Add([]byte(`[1]`))
	f.Add([]byte(`{"a":}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := ParseProblem(b)
		if len(got.ViolatedPolicies) > maxProblemPolicies {
			t.Fatalf("%d policies kept", len(got.ViolatedPolicies))
		}
		if !utf8.Valid(b) {
			return // encoding/json accepts invalid UTF-8 in strings; ParseProblem need not
		}
		var m map[string]json.RawMessage
		err := json.Unmarshal(b, &m)
		if err != nil || m == nil {
			if ok {
				t.Fatalf("ParseProblem accepted %q, encoding/json: %v", b, err)
			}
			return
		}
		if !ok {
			if depth(b) <= maxProblemDepth {
				t.Fatalf("ParseProblem refused %q, which encoding/json reads", b)
			}
			return
		}
		var typ string
		if json.Unmarshal(m["type"], &typ) == nil && typ != got.Type {
			t.Fatalf("type %q, encoding/json %q", got.Type, typ)
		}
		var pols []any
		if json.Unmarshal(m[ViolatedPolicies], &pols) == nil {
			var want []string
			for _, p := range pols {
				if s, ok := p.(string); ok && s != "" && len(want) < maxProblemPolicies {
					want = append(want, s)
				}
			}
			if len(want) != len(got.ViolatedPolicies) || (len(want) > 0 && !reflect.DeepEqual(want, got.ViolatedPolicies)) {
				t.Fatalf("violated-policies %q, encoding/json %q", got.ViolatedPolicies, want)
			}
		}
		if got.Status != 0 {
			var st float64
			if json.Unmarshal(m["status"], &st) != nil || st != float64(got.Status) {
				t.Fatalf("status %d, encoding/json %s", got.Status, m["status"])
			}
		}
		if got.HasRetryAfter {
			var ra float64
			if json.Unmarshal(m[RetryAfterMember], &ra) != nil || ra < 0 {
				t.Fatalf("retry-after %v, encoding/json %s", got.RetryAfter, m[RetryAfterMember])
			}
		}
	})
}
