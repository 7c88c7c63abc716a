package match

import (
	"testing"

	"github.com/sluicehq/sluice/plugin/config"
)

type headers map[string]string

func (h headers) Header(name string) (string, bool) {
	v, ok := h[name]
	return v, ok
}

func (h headers) SourceAddress() string { return "10.0.0.1:1" }

type counting struct {
	headers
	reads map[string]int
}

func (c *counting) Header(name string) (string, bool) {
	c.reads[name]++
	return c.headers.Header(name)
}

// TestMatch: the rules that apply, in configuration order, on the clean
// (and, for a rule that ignores case, folded) path and the method; only
// what some rule needs is read.
func TestMatch(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"rules":[
		{"name":"login","match":{"path_prefix":"/login","case_sensitive":false},"limit":1,"window":"1m"},
		{"name":"posts","match":{"methods":["POST"]},"limit":1,"window":"1m"},
		{"name":"all","limit":1,"window":"1m"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	m := New(cfg)
	for _, c := range []struct {
		path, method string
		want         []int
	}{
		{"/LOGIN/x", "POST", []int{0, 1, 2}},
		{"//login", "GET", []int{0, 2}},
		{"/logout", "GET", []int{2}},
	} {
		tg, got := m.Match(headers{":path": c.path, ":method": c.method})
		if len(got) != len(c.want) {
			t.Fatalf("%s %s: matched %v, want %v", c.method, c.path, got, c.want)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Fatalf("%s %s: matched %v, want %v", c.method, c.path, got, c.want)
			}
		}
		if tg.Method != c.method {
			t.Errorf("target method %q", tg.Method)
		}
		if s := m.Matched(); len(s) != len(got) {
			t.Errorf("Matched %v, Match %v", s, got)
		}
	}
	// A configuration that matches on nothing reads nothing.
	cfg, err = config.Parse([]byte(`{"rules":[{"name":"all","limit":1,"window":"1m"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	m = New(cfg)
	r := &counting{headers: headers{":path": "/", ":method": "GET"}, reads: map[string]int{}}
	if _, got := m.Match(r); len(got) != 1 || len(r.reads) != 0 {
		t.Errorf("matched %v, read %v; want rule 0 and no read", got, r.reads)
	}
}

// TestStaticMatcher: with no rule reading the request, every rule applies
// to every request, found once (Static), and nothing is read; a rule that
// reads the path makes the matcher read it again per request.
func TestStaticMatcher(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"rules":[
		{"name":"a","limit":1,"window":"1m"},
		{"name":"b","limit":1,"window":"1m","key":["client_ip"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	m := New(cfg)
	if !m.Static() {
		t.Fatal("a configuration whose rules read nothing is not static")
	}
	c := &counting{headers: headers{":path": "/x", ":method": "GET"}, reads: map[string]int{}}
	if _, got := m.Match(c); len(got) != 2 || got[0] != 0 || got[1] != 1 || len(c.reads) != 0 {
		t.Fatalf("matched %v, reads %v: want [0 1], none", got, c.reads)
	}
	if got := m.Matched(); len(got) != 2 {
		t.Fatalf("Matched %v without a Match", got)
	}
	cfg, err = config.Parse([]byte(`{"rules":[{"name":"a","match":{"path_prefix":"/x"},"limit":1,"window":"1m"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if m = New(cfg); m.Static() {
		t.Fatal("a path rule's matcher is static")
	}
	if _, got := m.Match(c); len(got) != 1 || c.reads[":path"] != 1 {
		t.Fatalf("matched %v, reads %v", got, c.reads)
	}
}
