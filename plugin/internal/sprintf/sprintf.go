// Package sprintf formats messages like fmt.Sprintf, for the verbs and
// argument types the plugin uses, without fmt.
//
// Why: fmt decides how to print an argument through reflect, and linking
// fmt and reflect adds about 350 KB to the wasm module, which Envoy's V8
// keeps resident (about 18 MiB of RSS per megabyte of module code). The
// plugin's messages need only a few verbs on a few types, which a type
// switch handles.
//
// Verbs: %s (string, error, a String method, []string), %v (those, bool
// and integers), %d (integers), %q (strings, with strconv.Quote, as
// fmt), %t (bool) and %%, without flags, width or precision. An argument of
// another type, a missing argument or an extra one prints as fmt would
// print a bad verb ("%!d(unsupported)", "%!s(MISSING)", "%!(EXTRA)"), so a
// mistake shows in the message rather than failing; TestAgainstFmt holds
// the rest to fmt.Sprintf. Named integer types have no case of their own:
// convert them (int(k)) or give them a String method.
package sprintf

import (
	"strconv"
	"time"
)

// Sprintf formats args according to format. Not inlined: the buffer and
// the string made of it, inlined at each of the plugin's 30 call sites,
// cost more wasm code than the call (a module's code costs memory in every
// Envoy).
//
//go:noinline
func Sprintf(format string, args ...any) string {
	return string(Appendf(make([]byte, 0, len(format)+16*len(args)), format, args...))
}

// Appendf is Sprintf appending to b: a caller that formats many values
// reuses one buffer instead of making a string of each.
func Appendf(b []byte, format string, args ...any) []byte {
	n := 0
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			b = append(b, c)
			continue
		}
		if i+1 == len(format) {
			b = append(b, "%!(NOVERB)"...)
			break
		}
		i++
		verb := format[i]
		if verb == '%' {
			b = append(b, '%')
			continue
		}
		if n >= len(args) {
			b = append(b, "%!"...)
			b = append(b, verb)
			b = append(b, "(MISSING)"...)
			continue
		}
		b = appendArg(b, verb, args[n])
		n++
	}
	if n < len(args) {
		b = append(b, "%!(EXTRA)"...)
	}
	return b
}

func appendArg(b []byte, verb byte, a any) []byte {
	switch verb {
	case 'd':
		if r, ok := number(b, a); ok {
			return r
		}
	case 'q':
		if s, ok := str(a); ok {
			return strconv.AppendQuote(b, s)
		}
	case 't', 's', 'v':
		if t, ok := a.(bool); ok && verb != 's' {
			return strconv.AppendBool(b, t)
		}
		if verb == 't' {
			break
		}
		if s, ok := str(a); ok {
			return append(b, s...)
		}
		if l, ok := a.([]string); ok {
			b = append(b, '[')
			for i, s := range l {
				if i > 0 {
					b = append(b, ' ')
				}
				b = append(b, s...)
			}
			return append(b, ']')
		}
		if verb == 'v' {
			if r, ok := number(b, a); ok {
				return r
			}
		}
	}
	b = append(b, "%!"...)
	b = append(b, verb)
	return append(b, "(unsupported)"...)
}

// number appends a in decimal if it is an integer, signed or unsigned, as
// %d and %v print it. Not inlined: appendArg's verbs share one copy
// (docs/design/memory.md, "Inlining").
//
//go:noinline
func number(b []byte, a any) ([]byte, bool) {
	if i, ok := integer(a); ok {
		return strconv.AppendInt(b, i, 10), true
	}
	switch x := a.(type) {
	case uint64:
		return strconv.AppendUint(b, x, 10), true
	case uint:
		return strconv.AppendUint(b, uint64(x), 10), true
	}
	return b, false
}

// str is the text of a string, an error or a Stringer (time.Duration
// included), as %s prints it.
//
// Not inlined: a copy at each call site costs more wasm code than
// the call (docs/design/memory.md, "Inlining").
//
//go:noinline
func str(a any) (string, bool) {
	switch x := a.(type) {
	case string:
		return x, true
	case error:
		return x.Error(), true
	case interface{ String() string }:
		return x.String(), true
	}
	return "", false
}

// integer is the value of a signed integer, or of an unsigned one that
// fits int64 (time.Duration prints as its nanoseconds for %d, as in fmt).
func integer(a any) (int64, bool) {
	switch x := a.(type) {
	case int:
		return int64(x), true
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case time.Duration:
		return int64(x), true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	}
	return 0, false
}
