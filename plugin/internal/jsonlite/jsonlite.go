// Package jsonlite decodes JSON into a small tree of values, for the
// plugin's configuration.
//
// Why not encoding/json: it links reflect-heavy decoding and encoding code
// into the plugin, and Envoy's V8 keeps about 18 MiB of resident memory per
// megabyte of module code, in every Envoy that loads Sluice. This package is
// a few hundred lines and links only strconv, unicode/utf8 and errors, which
// the proxy-wasm SDK links anyway.
//
// It accepts and refuses exactly what encoding/json's Decoder does for one
// value followed by nothing but white space, with the same syntax error
// messages and offsets, and decodes strings the same way (escapes, \u
// surrogate pairs, invalid UTF-8 and lone surrogates become U+FFFD). A
// differential fuzz test (FuzzDifferential) holds it to that. Objects keep
// every member in document order; Get returns the last of duplicates, as
// encoding/json does when it decodes into a map.
package jsonlite

import (
	"errors"
	"strconv"
	"unicode/utf8"
)

// Kind is the JSON type of a Value.
type Kind uint8

const (
	Null Kind = iota
	False
	True
	Number
	String
	Array
	Object
)

// Value is one decoded JSON value.
type Value struct {
	Kind Kind
	// Text is the decoded string of a String, or the literal of a Number
	// exactly as written (like encoding/json's Number).
	Text string
	// Elems are the elements of an Array.
	Elems []Value
	// Members are the members of an Object in document order, duplicate
	// keys included.
	Members []Member
}

// Member is one key and value of an Object.
type Member struct {
	Key   string
	Value Value
}

// MaxDepth is the deepest nesting of arrays and objects accepted, the same
// bound as encoding/json's (so a hostile document cannot exhaust the stack).
const MaxDepth = 10000

// SyntaxError is a document that is not JSON. Msg and Offset are those
// encoding/json's SyntaxError would carry: Offset counts the bytes read up
// to and including the offending one.
type SyntaxError struct {
	Msg    string
	Offset int64
}

func (e *SyntaxError) Error() string { return e.Msg }

var (
	// ErrEmpty is a document of nothing but white space.
	ErrEmpty = errors.New("no JSON value")
	// ErrUnexpectedEnd is a document that ends inside its value.
	ErrUnexpectedEnd = errors.New("unexpected end of JSON input")
	// ErrTrailing is a value followed by more than white space.
	ErrTrailing = errors.New("trailing data after the JSON value")
)

// Decode decodes the one JSON value of data, which white space may
// surround. A syntax error inside the value is a *SyntaxError; a document
// that ends inside the value is ErrUnexpectedEnd, and one that goes on
// after it ErrTrailing (anything after the value is not examined further,
// as encoding/json's Decoder reads one value at a time).
func Decode(data []byte) (Value, error) {
	p := parser{data: data}
	p.skipSpace()
	if p.i == len(data) {
		return Value{}, ErrEmpty
	}
	v, err := p.value()
	if err != nil {
		return Value{}, err
	}
	p.skipSpace()
	if p.i != len(data) {
		return Value{}, ErrTrailing
	}
	return v, nil
}

// Valid reports whether data is one JSON value surrounded by nothing but
// white space (encoding/json's Valid).
func Valid(data []byte) bool {
	_, err := Decode(data)
	return err == nil
}

// Get returns the value of the last member of an Object named key, or nil.
// Not inlined: its loop, inlined at the configuration parser's 38 call
// sites, cost more wasm code than the calls (a module's code costs memory
// in every Envoy).
//
//go:noinline
func (v *Value) Get(key string) *Value {
	for i := len(v.Members) - 1; i >= 0; i-- {
		if v.Members[i].Key == key {
			return &v.Members[i].Value
		}
	}
	return nil
}

// Has reports whether an Object has a member named key.
// Not inlined: configurations are parsed once, and each inlined copy is
// module size.
//
//go:noinline
func (v *Value) Has(key string) bool { return v.Get(key) != nil }

// Keys returns the distinct keys of an Object, in order of first
// appearance.
func (v *Value) Keys() []string {
	keys := make([]string, 0, len(v.Members))
	seen := map[string]bool{}
	for _, m := range v.Members {
		if !seen[m.Key] {
			seen[m.Key] = true
			keys = append(keys, m.Key)
		}
	}
	return keys
}

// Str returns a String's text: what encoding/json decodes into a Go string
// (which refuses every other kind but null).
func (v *Value) Str() (string, bool) {
	return v.Text, v.Kind == String
}

// Strings returns an Array of strings, as encoding/json decodes it into a
// []string: a null element is "", any other non-string refuses the list.
// An empty Array is an empty, non-nil slice.
//
// Not inlined: a copy at each call site costs more wasm code than
// the call (docs/design/memory.md, "Inlining").
//
//go:noinline
func (v *Value) Strings() ([]string, bool) {
	if v.Kind != Array {
		return nil, false
	}
	out := make([]string, len(v.Elems))
	for i := range v.Elems {
		switch e := &v.Elems[i]; e.Kind {
		case String:
			out[i] = e.Text
		case Null:
		default:
			return nil, false
		}
	}
	return out, true
}

// Bool returns true or false, as encoding/json decodes them into a Go bool.
func (v *Value) Bool() (b, ok bool) {
	return v.Kind == True, v.Kind == True || v.Kind == False
}

type parser struct {
	data  []byte
	i     int
	depth int
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// Not inlined: a copy at each call site costs more wasm code than
// the call (docs/design/memory.md, "Inlining").
//
//go:noinline
func (p *parser) skipSpace() {
	for p.i < len(p.data) && isSpace(p.data[p.i]) {
		p.i++
	}
}

// fail reports the byte at p.i with encoding/json's wording, or the end of
// input when there is no byte left.
func (p *parser) fail(context string) error {
	if p.i >= len(p.data) {
		return ErrUnexpectedEnd
	}
	return &SyntaxError{Msg: "invalid character " + quoteChar(p.data[p.i]) + " " + context, Offset: int64(p.i) + 1}
}

// quoteChar spells a byte the way encoding/json's messages do: the byte as
// a rune (so 0xff is 'ÿ'), in single quotes, escaped like a Go string.
func quoteChar(c byte) string {
	switch c {
	case '\'':
		return `'\''`
	case '"':
		return `'"'`
	}
	s := strconv.Quote(string(rune(c)))
	return "'" + s[1:len(s)-1] + "'"
}

// value parses the value that starts at p.i (white space already skipped).
func (p *parser) value() (Value, error) {
	if p.i >= len(p.data) {
		return Value{}, ErrUnexpectedEnd
	}
	switch c := p.data[p.i]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		s, err := p.str()
		return Value{Kind: String, Text: s}, err
	case c == '-' || '0' <= c && c <= '9':
		return p.number()
	case c == 't':
		return Value{Kind: True}, p.literal("true")
	case c == 'f':
		return Value{Kind: False}, p.literal("false")
	case c == 'n':
		return Value{Kind: Null}, p.literal("null")
	}
	return Value{}, p.fail("looking for beginning of value")
}

func (p *parser) literal(word string) error {
	for k := 1; k < len(word); k++ {
		p.i++
		if p.i >= len(p.data) || p.data[p.i] != word[k] {
			return p.fail("in literal " + word + " (expecting " + quoteChar(word[k]) + ")")
		}
	}
	p.i++
	return nil
}

// enter counts one level of nesting at the '{' or '[' at p.i.
func (p *parser) enter() error {
	p.depth++
	if p.depth > MaxDepth {
		return p.fail("exceeded max depth")
	}
	return nil
}

func (p *parser) object() (Value, error) {
	if err := p.enter(); err != nil {
		return Value{}, err
	}
	v := Value{Kind: Object}
	p.i++ // '{'
	p.skipSpace()
	if p.i < len(p.data) && p.data[p.i] == '}' {
		p.i++
		p.depth--
		return v, nil
	}
	for {
		if p.i >= len(p.data) || p.data[p.i] != '"' {
			return Value{}, p.fail("looking for beginning of object key string")
		}
		key, err := p.str()
		if err != nil {
			return Value{}, err
		}
		p.skipSpace()
		if p.i >= len(p.data) || p.data[p.i] != ':' {
			return Value{}, p.fail("after object key")
		}
		p.i++
		p.skipSpace()
		val, err := p.value()
		if err != nil {
			return Value{}, err
		}
		v.Members = append(v.Members, Member{Key: key, Value: val})
		if done, err := p.next('}', "after object key:value pair"); done || err != nil {
			return v, err
		}
	}
}

func (p *parser) array() (Value, error) {
	if err := p.enter(); err != nil {
		return Value{}, err
	}
	v := Value{Kind: Array, Elems: []Value{}}
	p.i++ // '['
	p.skipSpace()
	if p.i < len(p.data) && p.data[p.i] == ']' {
		p.i++
		p.depth--
		return v, nil
	}
	for {
		e, err := p.value()
		if err != nil {
			return Value{}, err
		}
		v.Elems = append(v.Elems, e)
		if done, err := p.next(']', "after array element"); done || err != nil {
			return v, err
		}
	}
}

// next reads what follows a member or an element: a comma (another one
// follows: done is false) or closer (the object or array ends: done is
// true); anything else is the syntax error named by context.
func (p *parser) next(closer byte, context string) (done bool, err error) {
	p.skipSpace()
	if p.i >= len(p.data) {
		return false, ErrUnexpectedEnd
	}
	switch p.data[p.i] {
	case ',':
		p.i++
		p.skipSpace()
		return false, nil
	case closer:
		p.i++
		p.depth--
		return true, nil
	}
	return false, p.fail(context)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// number parses -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? and stops
// at the first byte that cannot continue it: whoever called decides
// whether that byte may follow a value.
func (p *parser) number() (Value, error) {
	start := p.i
	d := p.data
	if d[p.i] == '-' {
		p.i++
		if p.i >= len(d) || !isDigit(d[p.i]) {
			return Value{}, p.fail("in numeric literal")
		}
	}
	if d[p.i] == '0' {
		p.i++
	} else {
		for p.i < len(d) && isDigit(d[p.i]) {
			p.i++
		}
	}
	if p.i < len(d) && d[p.i] == '.' {
		p.i++
		if p.i >= len(d) || !isDigit(d[p.i]) {
			return Value{}, p.fail("after decimal point in numeric literal")
		}
		for p.i < len(d) && isDigit(d[p.i]) {
			p.i++
		}
	}
	if p.i < len(d) && (d[p.i] == 'e' || d[p.i] == 'E') {
		p.i++
		if p.i < len(d) && (d[p.i] == '+' || d[p.i] == '-') {
			p.i++
		}
		if p.i >= len(d) || !isDigit(d[p.i]) {
			return Value{}, p.fail("in exponent of numeric literal")
		}
		for p.i < len(d) && isDigit(d[p.i]) {
			p.i++
		}
	}
	return Value{Kind: Number, Text: string(d[start:p.i])}, nil
}

// str parses the string that starts at p.i (its opening quote) and
// returns it decoded.
func (p *parser) str() (string, error) {
	p.i++ // '"'
	start := p.i
	plain := true // no escape, valid UTF-8: the bytes are the string
	d := p.data
	for {
		if p.i >= len(d) {
			return "", ErrUnexpectedEnd
		}
		c := d[p.i]
		switch {
		case c == '"':
			p.i++
			if plain {
				return string(d[start : p.i-1]), nil
			}
			return unquote(d[start : p.i-1]), nil
		case c == '\\':
			plain = false
			p.i++
			if p.i >= len(d) {
				return "", ErrUnexpectedEnd
			}
			switch d[p.i] {
			case 'b', 'f', 'n', 'r', 't', '\\', '/', '"':
				p.i++
			case 'u':
				for k := 0; k < 4; k++ {
					p.i++
					if p.i >= len(d) || hexVal(d[p.i]) < 0 {
						return "", p.fail("in \\u hexadecimal character escape")
					}
				}
				p.i++
			default:
				return "", p.fail("in string escape code")
			}
		case c < 0x20:
			return "", p.fail("in string literal")
		case c < utf8.RuneSelf:
			p.i++
		default:
			r, size := utf8.DecodeRune(d[p.i:])
			if r == utf8.RuneError && size == 1 {
				plain = false
			}
			p.i += size
		}
	}
}

func hexVal(c byte) rune {
	switch {
	case '0' <= c && c <= '9':
		return rune(c - '0')
	case 'a' <= c && c <= 'f':
		return rune(c - 'a' + 10)
	case 'A' <= c && c <= 'F':
		return rune(c - 'A' + 10)
	}
	return -1
}

// u4 reads a \uXXXX escape at the start of b, or returns -1.
func u4(b []byte) rune {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range b[2:6] {
		h := hexVal(c)
		if h < 0 {
			return -1
		}
		r = r<<4 | h
	}
	return r
}

// unquote decodes the body of a string that str has checked: escapes are
// well formed. An escaped UTF-16 surrogate pair is one rune; a lone
// surrogate, and each byte that is not part of valid UTF-8, is U+FFFD.
func unquote(s []byte) string {
	b := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\':
			switch e := s[i+1]; e {
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				r := u4(s[i:])
				i += 6
				if 0xd800 <= r && r < 0xe000 {
					// A high surrogate followed by an escaped low one
					// is one rune; anything else is a replacement.
					if r2 := u4(s[i:]); r < 0xdc00 && 0xdc00 <= r2 && r2 < 0xe000 {
						r = 0x10000 + (r-0xd800)<<10 + (r2 - 0xdc00)
						i += 6
					} else {
						r = utf8.RuneError
					}
				}
				b = utf8.AppendRune(b, r)
				continue
			default: // '\\', '/', '"'
				b = append(b, e)
			}
			i += 2
		case c < utf8.RuneSelf:
			b = append(b, c)
			i++
		default:
			r, size := utf8.DecodeRune(s[i:])
			b = utf8.AppendRune(b, r)
			i += size
		}
	}
	return string(b)
}
