package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// brokenStore fails every operation (shared data unavailable).
type brokenStore struct{}

func (brokenStore) Get(string) ([]byte, uint32, bool, error) {
	return nil, 0, false, errors.New("down")
}
func (brokenStore) Set(string, []byte, uint32) (bool, error) { return false, errors.New("down") }

func TestDecisionOfEachOutcome(t *testing.T) {
	cfg := mustConfig(t, `{"rules":[
		{"name":"outer","match":{"path_prefix":"/a"},"limit":1,"window":"1h"},
		{"name":"mid","match":{"path_prefix":"/a/b"},"limit":5,"window":"1h"},
		{"name":"inner","match":{"path_prefix":"/a/b/c"},"limit":1,"window":"1h"},
		{"name":"watch","match":{"path_prefix":"/s"},"limit":1,"window":"1h","shadow":true},
		{"name":"slow","match":{"path_prefix":"/d"},"limit":1,"window":"1s","burst":1,"max_delay":"5s"}]}`)
	e := New(cfg, newMemStore(), 7, wallClock)
	t0 := int64(time.Hour)
	check := func(path string, wantD Decision, wantRule string, wantViolated ...string) {
		t.Helper()
		v := e.Decide(req(path, "GET", "10.0.0.1:1"), t0)
		d, r, ok := v.Decision(cfg)
		name := ""
		if r != nil {
			name = r.Name
		}
		if !ok || d != wantD || name != wantRule {
			t.Errorf("%s: %v %q (%v), want %v %q", path, d, name, ok, wantD, wantRule)
		}
		if got := strings.Join(v.ViolatedNames(cfg, nil), ","); got != strings.Join(wantViolated, ",") {
			t.Errorf("%s: violated %q, want %q", path, got, wantViolated)
		}
	}
	check("/free", Allowed, "")
	check("/a/b/c", Allowed, "")
	// outer refuses first; inner (after it) would refuse too; mid would not.
	check("/a/b/c", Rejected, "outer", "outer", "inner")
	check("/s", Allowed, "")
	check("/s", ShadowRejected, "watch")
	check("/d", Allowed, "")
	check("/d", Delayed, "slow")
	for d := Allowed; d < undecided; d++ {
		if d.String() == "" || strings.ToLower(d.String()) != d.String() {
			t.Errorf("decision %d has word %q", d, d)
		}
	}
	if undecided.String() != "" {
		t.Error("undecided has a word")
	}

	for _, c := range []struct {
		doc  string
		want Decision
	}{{`"allow"`, OnErrorAllowed}, {`"deny"`, OnErrorDenied}} {
		cfg := mustConfig(t, `{"rules":[{"name":"r","limit":1,"window":"1h"}],"on_error":`+c.doc+`}`)
		v := New(cfg, brokenStore{}, 7, wallClock).Decide(req("/", "GET", "10.0.0.1:1"), t0)
		d, r, ok := v.Decision(cfg)
		if !ok || d != c.want || r == nil || r.Name != "r" {
			t.Errorf("on_error %s: %v %v", c.doc, d, r)
		}
	}
	if _, _, ok := (&Verdict{Outcome: Call}).Decision(cfg); ok {
		t.Error("a request waiting for a call is decided")
	}
	if _, _, ok := (&Verdict{Outcome: Queue}).Decision(cfg); ok {
		t.Error("a queued request is decided")
	}
}

func TestViolatedSetOrderAndBound(t *testing.T) {
	var v Verdict
	for _, i := range []int{900, 5, 70, 5, 1000, 3} {
		v.violate(i)
	}
	if got := v.Violated.idx[:v.Violated.n]; fmt.Sprint(got) != "[3 5 70 900 1000]" {
		t.Errorf("violated %v, want [3 5 70 900 1000]", got)
	}
	var w Verdict
	for i := 40; i > 0; i-- {
		w.violate(i * 2)
	}
	if w.Violated.n != maxViolated || w.Violated.idx[0] != 2 || w.Violated.idx[maxViolated-1] != 2*maxViolated {
		t.Errorf("bounded set %v, want the first %d (2..%d)", w.Violated.idx[:w.Violated.n], maxViolated, 2*maxViolated)
	}
}
