package config

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestIndexAgreesWithScan: for random rules and requests, the rules the
// index lists that apply are exactly those a scan of every rule finds, in
// configuration order.
func TestIndexAgreesWithScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	paths := []string{"/", "/a", "/A", "/ab", "/a/b", "/A/B", "/b", "/log\u0131n", "/login", "/LOGIN/x", "/c/d/e"}
	methods := []string{"GET", "POST", "PUT"}
	routes := []string{"r1", "r2", "r3"}
	pick := func(l []string) string { return l[rng.IntN(len(l))] }
	for round := 0; round < 300; round++ {
		var rules []string
		for i := 0; i < 1+rng.IntN(40); i++ {
			var m []string
			switch rng.IntN(5) {
			case 0:
				m = append(m, fmt.Sprintf(`"path_prefix":%q`, pick(paths)))
			case 1:
				m = append(m, fmt.Sprintf(`"path_exact":%q`, pick(paths)))
			}
			if rng.IntN(3) == 0 {
				m = append(m, fmt.Sprintf(`"methods":[%q,%q]`, pick(methods), pick(methods)))
			}
			if rng.IntN(4) == 0 {
				m = append(m, fmt.Sprintf(`"route":[%q,%q]`, pick(routes), pick(routes)))
			}
			if rng.IntN(2) == 0 {
				m = append(m, `"case_sensitive":false`)
			}
			rules = append(rules, fmt.Sprintf(`{"name":"r%d","match":{%s},"limit":1,"window":"1s"}`, i, strings.Join(m, ",")))
		}
		c, err := Parse([]byte(`{"rules":[` + strings.Join(rules, ",") + `]}`))
		if err != nil {
			t.Fatal(err)
		}
		for q := 0; q < 30; q++ {
			var buf []byte
			tg := Target{Path: CleanPath(&buf, pick(paths)+pick([]string{"", "/z", "x"})), Method: pick(methods), Route: pick(append(routes, ""))}
			tg.Folded = FoldPath(tg.Path)
			var want []int
			for i := range c.Rules {
				if c.Rules[i].Match.AppliesTo(&tg) {
					want = append(want, i)
				}
			}
			var got []int
			for _, i := range c.Index.Candidates(&tg, nil) {
				if c.Rules[i].Match.AppliesTo(&tg) {
					got = append(got, i)
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("request %+v: index gives %v, scan %v\nrules %s", tg, got, want, rules)
			}
		}
	}
}

func manyRules(n int, tail string) string {
	var b strings.Builder
	b.WriteString(`{"rules":[`)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `{"name":"route-%04d","match":{"path_prefix":"/api/route-%04d/"},"limit":10,"window":"1m"},`, i, i)
	}
	b.WriteString(tail + `]}`)
	return b.String()
}

// TestIndexCandidatesOnly: with a thousand per-route rules, a request is
// given only the rules filed under its keys, and listing them allocates
// nothing.
func TestIndexCandidatesOnly(t *testing.T) {
	c, err := Parse([]byte(manyRules(1000, `{"name":"all","limit":100,"window":"1m"}`)))
	if err != nil {
		t.Fatal(err)
	}
	tg := Target{Path: "/api/route-0812/items", Method: "GET"}
	dst := make([]int, 0, len(c.Rules))
	if got := c.Index.Candidates(&tg, dst); !slices.Equal(got, []int{812, 1000}) {
		t.Errorf("candidates %v, want [812 1000]", got)
	}
	if n := testing.AllocsPerRun(100, func() { dst = c.Index.Candidates(&tg, dst[:0]) }); n != 0 {
		t.Errorf("Candidates allocates %v times", n)
	}
}

func TestManyRulesErrorNamesField(t *testing.T) {
	doc := manyRules(1000, `{"name":"all","limit":100,"window":"1m"}`)
	doc = strings.Replace(doc, `"/api/route-0812/"},"limit":10,"window":"1m"`, `"/api/route-0812/"},"limit":10,"window":"1 minute"`, 1)
	_, err := Parse([]byte(doc))
	if err == nil || !strings.HasPrefix(err.Error(), "rules[812].window: ") {
		t.Errorf("error %v, want rules[812].window: ...", err)
	}
	if _, err := Parse([]byte(manyRules(MaxRules+1, `{"name":"all","limit":100,"window":"1m"}`))); err == nil || !strings.HasPrefix(err.Error(), "rules: at most 2048 rules") {
		t.Errorf("%d rules: %v", MaxRules+2, err)
	}
}

func BenchmarkParse1001Rules(b *testing.B) {
	doc := []byte(manyRules(1000, `{"name":"all","limit":100,"window":"1m"}`))
	for b.Loop() {
		if _, err := Parse(doc); err != nil {
			b.Fatal(err)
		}
	}
}
