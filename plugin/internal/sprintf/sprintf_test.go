package sprintf

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"
)

type stringer struct{ s string }

func (s stringer) String() string { return s.s }

// TestAgainstFmt compares every supported verb and type with fmt.Sprintf.
func TestAgainstFmt(t *testing.T) {
	args := []any{
		"", "abc", "a\"b\\c\n\x00\xff\u2028é", errors.New("boom"), stringer{"st"}, time.Duration(0), 1500 * time.Millisecond,
		-time.Hour, true, false, 0, -1, 42, math.MaxInt64, math.MinInt64, int8(-8), int16(300), int32(-70000), int64(1 << 40),
		uint8(255), uint16(65535), uint32(math.MaxUint32), uint(7), uint64(math.MaxUint64), []string{}, []string{"GET", "POST"},
	}
	for _, a := range args {
		for _, verb := range []string{"%s", "%v", "%d", "%q", "%t"} {
			got, want := Sprintf(verb, a), fmt.Sprintf(verb, a)
			if got != want && !(len(got) > 2 && got[:2] == "%!") {
				t.Errorf("Sprintf(%s, %#v) = %q, fmt %q", verb, a, got, want)
			}
			if len(got) > 2 && got[:2] == "%!" && len(want) > 2 && want[:2] != "%!" {
				// Unsupported here but fine in fmt: only combinations the
				// plugin does not use may be left out.
				switch verb {
				case "%q", "%t":
				case "%d":
					if _, ok := a.(string); !ok {
						if _, ok := a.(error); !ok {
							if _, ok := a.(stringer); !ok && fmt.Sprintf("%T", a) != "[]string" {
								t.Errorf("Sprintf(%s, %#v) unsupported, fmt %q", verb, a, want)
							}
						}
					}
				default:
					t.Errorf("Sprintf(%s, %#v) unsupported, fmt %q", verb, a, want)
				}
			}
		}
	}
	for _, c := range []struct {
		format string
		args   []any
	}{
		{"plain", nil},
		{"100%%", nil},
		{"%s: %d of %d (%q) %v", []any{"x", 1, int64(2), "q", errors.New("e")}},
		{"trailing %", nil},
		{"rules[%d].key[%d]", []any{3, 4}},
		{"%s|%t|%s|%q|%q|%v|", []any{"r", true, stringer{"token_bucket"}, "/a", "", []string{"GET"}}},
	} {
		if got, want := Sprintf(c.format, c.args...), fmt.Sprintf(c.format, c.args...); got != want {
			t.Errorf("Sprintf(%q) = %q, fmt %q", c.format, got, want)
		}
	}
	// Wrong argument counts on purpose: formats held in variables, so that
	// vet's printf check (which knows Sprintf) lets them through.
	missing, extra := "%d %s", "%d"
	if got := Sprintf(missing, 1); got != "1 %!s(MISSING)" {
		t.Errorf("missing: %q", got)
	}
	if got := Sprintf(extra, 1, 2); got != "1%!(EXTRA)" {
		t.Errorf("extra: %q", got)
	}
}
