//go:build go1.25

package header

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestAppendProblemDecodes(t *testing.T) {
	b := AppendProblem(nil, 429, []string{"checkout", "api_v2-x"}, 2500*time.Millisecond)
	var doc struct {
		Type       string   `json:"type"`
		Title      string   `json:"title"`
		Status     int      `json:"status"`
		Detail     string   `json:"detail"`
		Violated   []string `json:"violated-policies"`
		RetryAfter int      `json:"retry-after"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if doc.Type != QuotaExceeded || doc.Title == "" || doc.Status != 429 {
		t.Errorf("type/title/status: %+v", doc)
	}
	if strings.Join(doc.Violated, ",") != "checkout,api_v2-x" {
		t.Errorf("violated-policies = %q", doc.Violated)
	}
	if doc.RetryAfter != 3 || !strings.Contains(doc.Detail, "3 seconds") {
		t.Errorf("retry-after %d, detail %q: want 3 (2.5 s rounded up)", doc.RetryAfter, doc.Detail)
	}
	if one := AppendProblem(nil, 503, nil, 0); !strings.Contains(string(one), `"violated-policies":[]`) ||
		!strings.Contains(string(one), "1 second.") || !strings.Contains(string(one), `"status":503`) {
		t.Errorf("no policies, no wait: %s", one)
	}
}

// Names are [a-z0-9_-]+ by validation, but the body must stay valid JSON
// and say the same string whatever a name holds.
func TestAppendJSONStringHostile(t *testing.T) {
	for _, s := range []string{"", `a"b`, `a\b`, "tab\there", "nl\n", "\x00\x1f\x7f", "é✓", "bad\xff\xfeutf8",
		"\u2028\u2029", `</script>`, strings.Repeat(`"\`, 100)} {
		b := AppendJSONString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%q -> %s: %v", s, b, err)
		}
		want := strings.ToValidUTF8(s, "\ufffd")
		if !utf8.ValidString(s) {
			// One replacement per invalid byte.
			want = ""
			for i := 0; i < len(s); {
				r, n := utf8.DecodeRuneInString(s[i:])
				want += string(r)
				i += n
			}
		}
		if got != want {
			t.Errorf("%q -> %s decodes to %q", s, b, got)
		}
		for _, c := range b {
			if c < 0x20 {
				t.Errorf("%q -> %s: raw control byte", s, b)
			}
		}
	}
}

func FuzzAppendJSONString(f *testing.F) {
	f.Add("checkout")
	f.Add("a\"\\\x00\xff")
	f.Fuzz(func(t *testing.T, s string) {
		b := AppendProblem(nil, 429, []string{s, s}, time.Second)
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%q: %s: %v", s, b, err)
		}
	})
}

func TestRefusedAndUnit(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{{0, `"r1";r=0;t=1`}, {100 * time.Millisecond, `"r1";r=0;t=1`}, {1800 * time.Second, `"r1";r=0;t=1800`}, {1801*time.Second - 1, `"r1";r=0;t=1801`}} {
		got := string(AppendRateLimitRefused(nil, "r1", c.d))
		if got != c.want {
			t.Errorf("AppendRateLimitRefused(%v) = %s, want %s", c.d, got, c.want)
		}
		if ra := string(AppendRetryAfter(nil, c.d)); !strings.HasSuffix(got, "t="+ra) {
			t.Errorf("%v: t in %s differs from Retry-After %s", c.d, got, ra)
		}
	}
	p := string(AppendQuotaUnit(AppendPolicy(nil, "slots", 8, 0), UnitConcurrentRequests))
	if p != `"slots";q=8;qu="concurrent-requests"` {
		t.Errorf("policy with unit = %s", p)
	}
	var n int
	for it := range Items(p) {
		n++
		if it.Name != "slots" {
			t.Errorf("item %+v", it)
		}
	}
	if n != 1 {
		t.Errorf("%d items in %s", n, p)
	}
}
