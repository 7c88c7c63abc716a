package config

import (
	"strings"
	"testing"
)

func TestClassesParse(t *testing.T) {
	c, err := Parse([]byte(`{"rules":[{"name":"store","algorithm":"concurrency","limit":4,"key":[],
	 "classes":[{"name":"login","match":{"path_prefix":"/login"},"reserve":0.25},{"name":"buy","match":{"path_prefix":"/buy","methods":["post"]}}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	r := &c.Rules[0]
	if len(r.Classes) != 2 || r.Classes[0].Name != "login" || r.Classes[0].Reserve != 0.25 || r.Classes[1].Match.Methods[0] != "POST" {
		t.Fatalf("classes: %+v", r.Classes)
	}
	for _, tc := range []struct {
		path, method string
		want         string
	}{{"/login", "GET", "login"}, {"/buy/1", "POST", "buy"}, {"/buy/1", "GET", "default"}, {"/", "GET", "default"}} {
		if got := r.ClassName(r.ClassOf(&Target{Path: tc.path, Method: tc.method})); got != tc.want {
			t.Errorf("%s %s: class %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
	if rs := r.Reserves(); len(rs) != 3 || rs[0] != 0.25 || rs[2] != 0 {
		t.Errorf("reserves %v", rs)
	}
}

// TestClassesErrorsNameTheField: every refusal names the class's field.
func TestClassesErrorsNameTheField(t *testing.T) {
	const conc = `"name":"r","algorithm":"concurrency","limit":4`
	for _, tc := range []struct{ doc, field string }{
		{`{"rules":[{"name":"r","limit":1,"window":"1s","classes":[{"name":"a"}]}]}`, "rules[0].classes: not with token_bucket"},
		{`{"rules":[{"name":"r","algorithm":"leaky_bucket","limit":1,"window":"1s","classes":[{"name":"a"}]}]}`, "rules[0].classes: not with leaky_bucket"},
		{`{"rules":[{` + conc + `,"classes":[{"name":"a"},{"name":"b","reserve":1}]}]}`, "rules[0].classes[1].reserve: 1 is out of range"},
		{`{"rules":[{` + conc + `,"classes":[{"name":"a","reserve":-0.1}]}]}`, "rules[0].classes[0].reserve:"},
		{`{"rules":[{` + conc + `,"classes":[{"name":"a","reserve":"0.1"}]}]}`, "rules[0].classes[0].reserve: must be a number"},
		{`{"rules":[{` + conc + `,"classes":[{"name":"a","reserve":0.6},{"name":"b","reserve":0.4}]}]}`, "rules[0].classes[1].reserve: the reserves"},
		{`{"rules":[{` + conc + `,"classes":[{"name":"a"},{"name":"a"}]}]}`, "rules[0].classes[1].name: duplicate"},
		{`{"rules":[{` + conc + `,"classes":[{"name":"default"}]}]}`, "rules[0].classes[0].name:"},
		{`{"rules":[{` + conc + `,"classes":[{"reserve":0.1}]}]}`, "rules[0].classes[0].name: required"},
		{`{"rules":[{` + conc + `,"classes":{}}]}`, "rules[0].classes: must be a list"},
		{`{"rules":[{` + conc + `,"classes":[1,2,3,4,5,6,7,8]}]}`, "rules[0].classes: at most 7"},
		{`{"rules":[{` + conc + `,"classes":[{"name":"a","match":{"methods":[""]}}]}]}`, "rules[0].classes[0].match.methods[0]:"},
	} {
		_, err := Parse([]byte(tc.doc))
		if err == nil || !strings.HasPrefix(err.Error(), tc.field) {
			t.Errorf("%s: %v, want %q...", tc.doc, err, tc.field)
		}
	}
}

// TestClassesChangeTheRule: a change to a rule's classes is a change to
// the rule (a new ID, so its state starts clean); a rule without classes
// keeps its ID.
func TestClassesChangeTheRule(t *testing.T) {
	id := func(classes string) uint64 {
		doc := `{"rules":[{"name":"r","algorithm":"concurrency","limit":4` + classes + `}]}`
		c, err := Parse([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		return c.Rules[0].ID
	}
	ids := map[uint64]string{}
	for _, cl := range []string{"",
		`,"classes":[{"name":"a"}]`,
		`,"classes":[{"name":"b"}]`,
		`,"classes":[{"name":"a","reserve":0.1}]`,
		`,"classes":[{"name":"a","reserve":0.2}]`,
		`,"classes":[{"name":"a","match":{"path_prefix":"/a"}}]`,
		`,"classes":[{"name":"a"},{"name":"b"}]`,
	} {
		if prev, dup := ids[id(cl)]; dup {
			t.Errorf("%q and %q: the same rule ID", prev, cl)
		}
		ids[id(cl)] = cl
	}
}

// TestClassesFollowTheRulesCase: a class's match ignores case when its
// rule's does, and may not set case_sensitive itself.
func TestClassesFollowTheRulesCase(t *testing.T) {
	c, err := Parse([]byte(`{"rules":[{"name":"r","algorithm":"concurrency","limit":4,"key":[],"match":{"case_sensitive":false},
	 "classes":[{"name":"login","match":{"path_prefix":"/Login"}}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	r := &c.Rules[0]
	for _, p := range []string{"/login", "/LOGIN", "/LoGiN/x"} {
		if k := r.ClassOf(&Target{Path: p, Folded: FoldPath(p)}); k != 0 {
			t.Errorf("%s: class %d, want login (the rule ignores case)", p, k)
		}
	}
	_, err = Parse([]byte(`{"rules":[{"name":"r","algorithm":"concurrency","limit":4,
	 "classes":[{"name":"login","match":{"path_prefix":"/login","case_sensitive":false}}]}]}`))
	if err == nil || !strings.HasPrefix(err.Error(), "rules[0].classes[0].match.case_sensitive:") {
		t.Errorf("case_sensitive in a class: %v", err)
	}
	c, _ = Parse([]byte(`{"rules":[{"name":"r","algorithm":"concurrency","limit":4,"classes":[{"name":"login","match":{"path_prefix":"/login"}}]}]}`))
	if k := c.Rules[0].ClassOf(&Target{Path: "/LOGIN", Folded: FoldPath("/LOGIN")}); k != 1 {
		t.Errorf("a case-sensitive rule's class matched /LOGIN")
	}
}
