// The field helpers: typed reads of JSON values that name the field in
// every error.

package config

import (
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/plugin/internal/jsonlite"
	"github.com/sluicehq/sluice/plugin/internal/sprintf"
	"github.com/sluicehq/sluice/plugin/internal/textnum"
)

// object checks that raw, the result of decoding with err, is a JSON
// object. A syntax error is reported with encoding/json's wording and
// offset, as before the plugin had its own decoder.
func object(field string, raw *jsonlite.Value, err error) (*jsonlite.Value, error) {
	if err == nil && raw.Kind == jsonlite.Object {
		return raw, nil
	}
	what := field
	if what == "" {
		what = "configuration"
	}
	if se, ok := err.(*jsonlite.SyntaxError); ok {
		return nil, errf(field, "%s is not valid JSON: %s (at byte %d)", what, se.Msg, se.Offset)
	}
	if err != nil { // cut short, or more after the value
		return nil, errf(field, "%s is not valid JSON: %v", what, err)
	}
	return nil, errf(field, "%s must be a JSON object", what)
}

// known reports the first field of m (in sorted order) that is not allowed.
func known(field string, m *jsonlite.Value, allowed ...string) error {
	var unknown []string
	for _, k := range m.Keys() {
		ok := false
		for _, a := range allowed {
			if k == a {
				ok = true
				break
			}
		}
		if !ok {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	// The first in sorted order (without package sort, which would add
	// code to the module for this one use).
	name := unknown[0]
	for _, k := range unknown[1:] {
		if k < name {
			name = k
		}
	}
	// The key is the document's: one that would not print as itself (a
	// newline, other control characters) is quoted, so that the error
	// stays the one line of a log entry.
	for _, r := range name {
		if !strconv.IsPrint(r) {
			name = strconv.Quote(name)
			break
		}
	}
	if field != "" {
		name = field + "." + name
	}
	// The list appended here rather than by strings.Join (2.7 KB of module).
	list := make([]byte, 0, 16*len(allowed))
	for i, a := range allowed {
		if i > 0 {
			list = append(list, ", "...)
		}
		list = append(list, a...)
	}
	return errf(name, "unknown field (known: %s)", string(list))
}

// errType is a value of the wrong JSON type (the callers name the field and
// the type expected).
var errType = &FieldError{Msg: "wrong type"}

// str reads a JSON string into dst.
//
// Not inlined: a copy at each call site costs more wasm code than
// the call (docs/design/memory.md, "Inlining").
//
//go:noinline
func str(raw *jsonlite.Value, dst *string) error {
	s, ok := raw.Str()
	if !ok {
		return errType
	}
	*dst = s
	return nil
}

// strs reads a list of strings into dst (a null element is "", as
// encoding/json has it).
func strs(raw *jsonlite.Value, dst *[]string) error {
	l, ok := raw.Strings()
	if !ok {
		return errType
	}
	*dst = l
	return nil
}

// boolean reads true or false into dst.
func boolean(raw *jsonlite.Value, dst *bool) error {
	b, ok := raw.Bool()
	if !ok {
		return errType
	}
	*dst = b
	return nil
}

// integer accepts JSON numbers that are whole (Envoy's Struct form turns
// every number into a double, so 10.0 is 10, and 4.29e2 is 429). Whether a
// number is whole is judged on its literal, as JSON Schema's "integer"
// does: 1.00000000000000001 is not, though it rounds to the float64 1.
func integer(field string, raw *jsonlite.Value) (int64, error) {
	if raw.Kind == jsonlite.String {
		return 0, errf(field, "must be a number, not a string")
	}
	if raw.Kind != jsonlite.Number {
		return 0, errf(field, "must be a whole number")
	}
	n := raw.Text
	if i, ok := textnum.Atoi(n); ok { // strconv.ParseInt(n, 10, 64)
		return int64(i), nil
	}
	i, ok := wholeValue(n)
	if !ok {
		return 0, errf(field, "%s is not a whole number", n)
	}
	return i, nil
}

// wholeValue is the value of the JSON number literal n (-?int(.frac)?
// (e[+-]?exp)?) when it is whole, its digits without trailing zeros times
// 10^k with k >= 0, and at most 2^53 in magnitude (what a float64 holds
// exactly). It is computed on the literal's digits, not through
// strconv.ParseFloat, whose tables and code weigh about 20 KB of module.
func wholeValue(n string) (int64, bool) {
	neg := strings.HasPrefix(n, "-")
	trimmed, exp, ok := decimalParts(strings.TrimPrefix(n, "-"))
	if !ok {
		return 0, false
	}
	if trimmed == "" {
		return 0, true
	}
	if exp < 0 || len(trimmed)+exp > 16 { // 2^53 has 16 digits
		return 0, false
	}
	var v int64
	for _, c := range trimmed {
		v = v*10 + int64(c-'0')
	}
	for range exp {
		v *= 10
	}
	if v > 1<<53 {
		return 0, false
	}
	if neg {
		v = -v
	}
	return v, true
}

// duration accepts a Go duration string ("1m", "250ms"). A bare number is
// refused: "10" could mean seconds or nanoseconds.
func duration(field string, raw *jsonlite.Value) (time.Duration, error) {
	var s string
	if err := str(raw, &s); err != nil {
		return 0, errf(field, "must be a duration string like \"1s\", \"1m\" or \"250ms\"")
	}
	d, ok := parseDuration(textnum.TrimSpace(s))
	if !ok {
		return 0, errf(field, "%q is not a duration (use a Go duration like \"1s\", \"1m\", \"250ms\")", s)
	}
	return d, nil
}

// fields is one JSON object of the configuration with the path that names
// its members in errors ("rules[1]"; "" at the top). Its methods read one
// optional member each, report whether it is present, and check its type
// and range with the error every field of that kind gives.
type fields struct {
	path string
	m    *jsonlite.Value
}

// name is the path of member key ("rules[1].window"). Not inlined: its
// string concatenation, inlined at the parser's 39 call sites, was 3 KB of
// wasm code (docs/design/memory.md, "Inlining").
//
//go:noinline
func (f fields) name(key string) string {
	if f.path == "" {
		return key
	}
	return f.path + "." + key
}

// number reads a whole number.
func (f fields) number(key string) (int64, bool, error) {
	raw := f.m.Get(key)
	if raw == nil {
		return 0, false, nil
	}
	n, err := integer(f.name(key), raw)
	return n, true, err
}

// whole reads a whole number in lo..hi; out of range, the error is
// outOfRange formatted with the number, then args.
func (f fields) whole(key string, lo, hi int64, outOfRange string, args ...any) (int64, bool, error) {
	n, ok, err := f.number(key)
	if !ok || err != nil {
		return 0, ok, err
	}
	if n < lo || n > hi {
		return 0, true, &FieldError{Field: f.name(key), Msg: sprintf.Sprintf(outOfRange, append([]any{n}, args...)...)}
	}
	return n, true, nil
}

// count reads a limit or burst: a whole number in 1..maxCount.
func (f fields) count(key string) (int64, bool, error) {
	n, ok, err := f.number(key)
	if !ok || err != nil {
		return 0, ok, err
	}
	if n <= 0 {
		return 0, true, errf(f.name(key), "must be > 0, got %d", n)
	}
	if n > maxCount {
		return 0, true, errf(f.name(key), "must be <= %d, got %d", maxCount, n)
	}
	return n, true, nil
}

// text reads a string into dst.
func (f fields) text(key string, dst *string) (bool, error) {
	raw := f.m.Get(key)
	if raw == nil {
		return false, nil
	}
	if err := str(raw, dst); err != nil {
		return true, errf(f.name(key), "must be a string")
	}
	return true, nil
}

// oneOf reads a string that must be one of choices; anything else, of
// any type, is the error msg.
func (f fields) oneOf(key, msg string, choices ...string) (string, bool, error) {
	raw := f.m.Get(key)
	if raw == nil {
		return "", false, nil
	}
	if s, ok := raw.Str(); ok {
		for _, c := range choices {
			if s == c {
				return s, true, nil
			}
		}
	}
	return "", true, &FieldError{Field: f.name(key), Msg: msg}
}

// flag reads true or false into dst.
func (f fields) flag(key string, dst *bool) error {
	if raw := f.m.Get(key); raw != nil {
		if err := boolean(raw, dst); err != nil {
			return errf(f.name(key), "must be true or false")
		}
	}
	return nil
}

// maxDelay reads a rule's max_delay: 0 (absent) to 60s.
func (f fields) maxDelay() (time.Duration, error) {
	raw := f.m.Get("max_delay")
	if raw == nil {
		return 0, nil
	}
	d, err := duration(f.name("max_delay"), raw)
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, errf(f.name("max_delay"), "must be >= 0, got %s", d)
	}
	if d > 60*time.Second {
		return 0, errf(f.name("max_delay"), "%s is longer than 60s: holding requests that long ties up connections; reject with Retry-After instead", d)
	}
	return d, nil
}
