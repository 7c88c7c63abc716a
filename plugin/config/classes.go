package config

import (
	"hash"
	"math"
	"strconv"

	"github.com/sluicehq/sluice/plugin/internal/jsonlite"
	"github.com/sluicehq/sluice/plugin/internal/sprintf"
)

// Class is one priority class of a concurrency rule (rule field
// `classes`): the requests its Match selects share the slots of the rule's
// key with the other classes, and Reserve is the share of the rule's limit
// that the classes below it may never take.
type Class struct {
	Name    string
	Match   Match
	Reserve float64 // 0 <= Reserve < 1
}

// DefaultClass is the name of the implicit lowest class: the requests of a
// rule with classes that no class's match selects.
const DefaultClass = "default"

// MaxClasses bounds a rule's classes, the implicit default one included:
// every class keeps its own slots in the key's shared state.
const MaxClasses = 8

// parseClasses reads a concurrency rule's classes, listed highest priority
// first; the implicit default class is not listed. The reserves together
// stay below 1, so that the lowest class keeps part of the limit.
//
// A class's match is parsed as a rule's (parseMatch) and follows the
// rule's case_sensitive (ignoreCase: the rule's match ignores case).
func parseClasses(field string, raw *jsonlite.Value, ignoreCase bool) ([]Class, error) {
	if raw.Kind != jsonlite.Array {
		return nil, errf(field, "must be a list of classes, highest priority first")
	}
	if len(raw.Elems) == 0 {
		return nil, errf(field, "must list at least one class (omit classes for none)")
	}
	if len(raw.Elems) > MaxClasses-1 {
		return nil, errf(field, "at most %d classes (besides the implicit %q), got %d", MaxClasses-1, DefaultClass, len(raw.Elems))
	}
	classes := make([]Class, 0, len(raw.Elems))
	sum := 0.0
	for i := range raw.Elems {
		cf := sprintf.Sprintf("%s[%d]", field, i)
		c, err := parseClass(cf, &raw.Elems[i], ignoreCase)
		if err != nil {
			return nil, err
		}
		for j := range classes {
			if classes[j].Name == c.Name {
				return nil, errf(cf+".name", "duplicate class name %q (also %s[%d])", c.Name, field, j)
			}
		}
		sum += c.Reserve
		if sum >= 1-1e-9 {
			// In thousandths: strconv's float formatting would add tens of
			// kilobytes to the module for this one message.
			return nil, errf(cf+".reserve", "the reserves of %s[0..%d] add up to %s: they must stay below 1 (the lowest class keeps part of the limit)",
				field, i, thousandths(sum))
		}
		classes = append(classes, c)
	}
	return classes, nil
}

func parseClass(field string, raw *jsonlite.Value, ignoreCase bool) (Class, error) {
	var c Class
	m, err := object(field, raw, nil)
	if err != nil {
		return c, err
	}
	if err := known(field, m, "name", "match", "reserve"); err != nil {
		return c, err
	}
	f := fields{path: field, m: m}
	if !m.Has("name") {
		return c, errf(f.name("name"), "required")
	}
	if _, err := f.text("name", &c.Name); err != nil {
		return c, err
	}
	if !validName(c.Name) {
		return c, errf(f.name("name"), "%q must match [a-z0-9_-]+ (at most 64 characters)", c.Name)
	}
	if c.Name == DefaultClass {
		return c, errf(f.name("name"), "%q is the implicit lowest class (requests no class matches): choose another name", DefaultClass)
	}
	if mraw := m.Get("match"); mraw != nil {
		if mraw.Kind == jsonlite.Object && mraw.Has("case_sensitive") {
			return c, errf(f.name("match")+".case_sensitive", "a class follows its rule's case_sensitive: set it in the rule's match")
		}
		if err := parseMatch(f.name("match"), mraw, &c.Match); err != nil {
			return c, err
		}
	}
	c.Match.SetCaseSensitive(!ignoreCase)
	if rraw := m.Get("reserve"); rraw != nil {
		if rraw.Kind != jsonlite.Number {
			return c, errf(f.name("reserve"), "must be a number, 0 <= reserve < 1")
		}
		r, ok := fraction(rraw.Text)
		if !ok {
			return c, errf(f.name("reserve"), "%s is out of range: 0 <= reserve < 1 (the share of the limit lower classes may never take)", rraw.Text)
		}
		c.Reserve = r
	}
	return c, nil
}

// ClassOf returns the index of the class of the request t describes among
// r's classes: the first whose match applies, else len(r.Classes), the
// implicit default class.
func (r *Rule) ClassOf(t *Target) int {
	for k := range r.Classes {
		if r.Classes[k].Match.AppliesTo(t) {
			return k
		}
	}
	return len(r.Classes)
}

// ClassName returns the name of class k of r (len(r.Classes): the default).
func (r *Rule) ClassName(k int) string {
	if k < len(r.Classes) {
		return r.Classes[k].Name
	}
	return DefaultClass
}

// Reserves returns the reserves of r's classes in order, the default
// class's (0) last; nil for a rule without classes.
func (r *Rule) Reserves() []float64 {
	if len(r.Classes) == 0 {
		return nil
	}
	out := make([]float64, len(r.Classes)+1)
	for k := range r.Classes {
		out[k] = r.Classes[k].Reserve
	}
	return out
}

// hashClasses adds r's classes to its ID: a change to them is a change to
// the rule. Only rules with classes hash them (the IDs of the others are
// kept).
func hashClasses(h hash.Hash64, r *Rule) {
	if len(r.Classes) == 0 {
		return
	}
	h.Write([]byte("|classes"))
	for _, c := range r.Classes {
		h.Write([]byte(sprintf.Sprintf("|%s|%q|%q|%v|%v|", c.Name, c.Match.PathPrefix, c.Match.PathExact, c.Match.Methods, c.Match.Routes)))
		h.Write([]byte(strconv.FormatUint(math.Float64bits(c.Reserve), 16)))
	}
}

// thousandths formats x (>= 0) with up to three decimals ("1.1", "1").
func thousandths(x float64) string {
	m := int64(math.Round(x * 1000))
	frac := trimZeros(strconv.Itoa(int(1000 + m%1000))[1:], false)
	if frac == "" {
		return strconv.Itoa(int(m / 1000))
	}
	return strconv.Itoa(int(m/1000)) + "." + frac
}
