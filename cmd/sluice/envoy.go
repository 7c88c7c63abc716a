package main

// Finding the Sluice configuration inside an Envoy configuration, without a
// YAML library.
//
// An Envoy wasm HTTP filter looks like this (see envoy/envoy.yaml):
//
//	typed_config:
//	  "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
//	  config:
//	    name: sluice
//	    vm_config: {...}
//	    configuration:
//	      "@type": type.googleapis.com/google.protobuf.StringValue
//	      value: |
//	        {"rules": [...]}
//
// extractEnvoy reads block-style YAML as Envoy's documentation writes it: an
// indentation-aware line scanner that knows mappings, "- " sequence items,
// comments, and the scalar forms a `value:` can take (literal and folded
// blocks, single- and double-quoted strings, plain scalars). Flow
// collections ({...}, [...]) and the blocks of other keys are skipped whole.
// What it cannot read it reports as an error rather than skipping silently:
// a configuration in the Struct form written as YAML (it would need a YAML
// parser to turn into JSON), anchors, aliases and tags, and a wasm filter
// whose typed_config is written in flow style (counted by its @type URL).
// A JSON Envoy configuration is read with encoding/json, Struct form
// included.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

const (
	wasmFilterType = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"
	stringType     = "type.googleapis.com/google.protobuf.StringValue"
	structType     = "type.googleapis.com/google.protobuf.Struct"
)

// found is the configuration of one wasm filter.
type found struct {
	line int    // 1-based line of the configuration's value
	name string // the filter's config.name, if any
	doc  []byte // the plugin configuration (JSON)
	err  error  // why the configuration could not be read
}

func extractEnvoy(src []byte) ([]found, error) {
	if !utf8.Valid(src) {
		return nil, errors.New("not UTF-8 text")
	}
	if t := bytes.TrimSpace(src); len(t) > 0 && t[0] == '{' {
		return extractEnvoyJSON(src)
	}
	return extractEnvoyYAML(string(src))
}

// ---- YAML ----

// frame is an open mapping key: the keys above the current line.
type frame struct {
	indent int
	key    string
	line   int
	parent *frame
	typ    string // its "@type" member
	name   string // its "name" member
	// For a "configuration" key: its value member, once read.
	value     *found
	hasConfig bool // for a "config" key: it has a configuration member
	// Configurations found below, waiting for the typed_config above
	// them to be known as a wasm filter's.
	pending []pendingConfig
}

type pendingConfig struct {
	found
	owner *frame // the frame holding the "config" key
}

var (
	keyLine   = regexp.MustCompile(`^("(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^\s#'"{\[\]},&*!|>%@` + "`" + `-][^#]*?|-[^\s#][^#]*?)\s*:(?:\s+(.*))?$`)
	blockHead = regexp.MustCompile(`^([|>])([1-9]?)[+-]?([1-9]?)\s*(?:#.*)?$`)
)

func extractEnvoyYAML(src string) ([]found, error) {
	lines := strings.Split(strings.ReplaceAll(src, "\r\n", "\n"), "\n")
	var (
		results   []found
		stack     []*frame
		wasmSeen  int
		wasmTexts int
	)
	pop := func() {
		f := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		switch f.key {
		case "configuration":
			if f.parent != nil && f.parent.key == "config" {
				c := pendingConfig{owner: f.parent.parent}
				switch {
				case f.value != nil:
					c.found = *f.value
					switch f.typ {
					case stringType:
					case structType:
						c.err = errors.New("the configuration is a google.protobuf.Struct written in YAML, which " +
							"sluice validate cannot convert to JSON without a YAML parser: use the StringValue form, or " +
							"run sluice validate on the JSON document")
					case "":
						c.err = errors.New("the configuration has no \"@type\" (google.protobuf.StringValue)")
					default:
						c.err = fmt.Errorf("the configuration's @type is %s, not google.protobuf.StringValue", f.typ)
					}
				default:
					c.line = f.line
					c.err = errors.New("the configuration has no value member")
				}
				f.parent.pending = append(f.parent.pending, c)
			}
		case "config":
			if !f.hasConfig {
				f.pending = append(f.pending, pendingConfig{
					found: found{line: f.line, err: errors.New("the wasm filter has no configuration (config.configuration)")},
					owner: f.parent,
				})
			}
			for i := range f.pending {
				if f.pending[i].name == "" {
					f.pending[i].name = f.name
				}
			}
		}
		if f.typ == wasmFilterType {
			wasmSeen++
			for _, c := range f.pending {
				if c.owner == f {
					results = append(results, c.found)
				}
			}
			return
		}
		if f.parent != nil {
			f.parent.pending = append(f.parent.pending, f.pending...)
		}
	}
	popTo := func(indent int) {
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			pop()
		}
	}

	for _, l := range lines {
		if c := strings.TrimSpace(l); c != "" && c[0] != '#' && strings.Contains(stripComment(c), wasmFilterType) {
			wasmTexts++
		}
	}
	for i := 0; i < len(lines); i++ {
		line := strings.TrimRight(lines[i], " \t")
		content := strings.TrimLeft(line, " ")
		if content == "" || content[0] == '#' {
			continue
		}
		if strings.HasPrefix(line, "---") || strings.HasPrefix(line, "...") {
			popTo(0) // a new YAML document
			continue
		}
		indent := len(line) - len(content)
		for content == "-" || strings.HasPrefix(content, "- ") {
			rest := strings.TrimLeft(content[1:], " ")
			indent += len(content) - len(rest)
			content = rest
		}
		if content == "" {
			continue // "-" alone: the item is on the next lines
		}
		m := keyLine.FindStringSubmatchIndex(content)
		if m == nil {
			// A plain sequence item or a flow collection: skip what it spans.
			i = skipValue(lines, i, indent-1, content, indent)
			continue
		}
		key, val, valCol := unquoteKey(content[m[2]:m[3]]), "", len(line)
		if m[4] >= 0 {
			val, valCol = content[m[4]:m[5]], indent+m[4]
		}
		popTo(indent)
		var parent *frame
		if len(stack) > 0 {
			parent = stack[len(stack)-1]
		}
		f := &frame{indent: indent, key: key, line: i + 1, parent: parent}
		stack = append(stack, f)
		if parent != nil {
			switch key {
			case "@type":
				parent.typ = scalarText(val)
			case "name":
				parent.name = scalarText(val)
			case "configuration":
				parent.hasConfig = true
			}
		}
		if key == "value" && parent != nil && parent.key == "configuration" && parent.parent != nil && parent.parent.key == "config" {
			doc, next, err := readScalar(lines, i, indent, val, valCol)
			parent.value = &found{line: i + 1, doc: []byte(doc), err: err}
			i = next
			continue
		}
		if val != "" {
			i = skipValue(lines, i, indent, val, valCol)
		}
	}
	popTo(0)
	if wasmTexts > wasmSeen {
		return results, fmt.Errorf("%s of type envoy.extensions.filters.http.wasm.v3.Wasm written in a form sluice validate "+
			"cannot read (flow style {...}?): write its typed_config in block style, or check its configuration as a JSON file",
			plural(wasmTexts-wasmSeen, "wasm filter"))
	}
	return results, nil
}

// stripComment removes a " # comment" outside quotes.
func stripComment(s string) string {
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == '"' && c == '\\':
			i++
		case quote != 0 && c == quote:
			quote = 0
		case quote == 0 && (c == '"' || c == '\'') && (i == 0 || strings.IndexByte(" \t:,[{-", s[i-1]) >= 0):
			quote = c
		case quote == 0 && c == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t'):
			return strings.TrimRight(s[:i], " \t")
		}
	}
	return s
}

func unquoteKey(k string) string {
	if len(k) >= 2 && (k[0] == '"' || k[0] == '\'') {
		if s, err := unquoteLine(k); err == nil {
			return s
		}
	}
	return k
}

// scalarText is the string of a one-line scalar value ("@type", name).
func scalarText(val string) string {
	val = stripComment(val)
	if len(val) >= 2 && (val[0] == '"' || val[0] == '\'') {
		if s, err := unquoteLine(val); err == nil {
			return s
		}
	}
	return val
}

// unquoteLine decodes a quoted scalar that fits on one line.
func unquoteLine(s string) (string, error) {
	out, rest, err := readQuoted([]string{s}, 0, 0)
	if err != nil {
		return "", err
	}
	if rest != 0 {
		return "", errors.New("multi-line")
	}
	return out, nil
}

func indentOf(line string) int { return len(line) - len(strings.TrimLeft(line, " ")) }

func blank(line string) bool {
	t := strings.TrimSpace(line)
	return t == "" || t[0] == '#'
}

// skipValue returns the last line of the value that starts on line i at
// column col with text val, for a key (or sequence item) at indent: a block
// scalar, a quoted scalar or a flow collection spanning lines.
func skipValue(lines []string, i, indent int, val string, col int) int {
	switch {
	case blockHead.MatchString(val):
		j := i + 1
		for ; j < len(lines); j++ {
			if strings.TrimSpace(lines[j]) != "" && indentOf(lines[j]) <= indent {
				break
			}
		}
		return j - 1
	case val[0] == '"' || val[0] == '\'':
		if _, last, err := readQuoted(lines, i, col); err == nil {
			return last
		}
		return i
	case val[0] == '{' || val[0] == '[':
		return skipFlow(lines, i, col)
	}
	return i
}

// skipFlow returns the line where the flow collection starting at
// lines[i][col] closes.
func skipFlow(lines []string, i, col int) int {
	depth := 0
	var quote byte
	for j := i; j < len(lines); j++ {
		s := lines[j]
		start := 0
		if j == i {
			start = col
		}
		for k := start; k < len(s); k++ {
			c := s[k]
			switch {
			case quote == '"' && c == '\\':
				k++
			case quote != 0 && c == quote:
				quote = 0
			case quote != 0:
			case c == '"' || c == '\'':
				quote = c
			case c == '#' && (k == 0 || s[k-1] == ' '):
				k = len(s)
			case c == '{' || c == '[':
				depth++
			case c == '}' || c == ']':
				depth--
				if depth == 0 {
					return j
				}
			}
		}
	}
	return len(lines) - 1
}

// readScalar reads the string value that starts on line i at column col
// after "value:" (val is the rest of that line) of a key at indent. It
// returns the string and the last line it used.
func readScalar(lines []string, i, indent int, val string, col int) (string, int, error) {
	switch {
	case val == "" || val[0] == '#':
		j := i + 1
		for j < len(lines) && blank(lines[j]) {
			j++
		}
		if j < len(lines) && indentOf(lines[j]) > indent {
			return "", skipValue(lines, i, indent, "|", col), errors.New("the value is a YAML mapping or list, not a string: " +
				"a StringValue's value must be the JSON document as a string (value: | then the JSON)")
		}
		return "", i, nil
	case blockHead.MatchString(val):
		return readBlock(lines, i, indent, blockHead.FindStringSubmatch(val))
	case val[0] == '"' || val[0] == '\'':
		return readQuoted(lines, i, col)
	case val[0] == '{' || val[0] == '[':
		return "", skipFlow(lines, i, col), errors.New("the value is a YAML flow collection, " +
			"not a string: quote the JSON ('{...}') or write it as a block (value: | then the JSON)")
	case strings.IndexByte("&*!", val[0]) >= 0:
		return "", i, errors.New("YAML anchors, aliases and tags are not supported by sluice validate -envoy")
	}
	// A plain scalar, possibly continued on more indented lines.
	parts := []string{stripComment(val)}
	j := i + 1
	for ; j < len(lines); j++ {
		if strings.TrimSpace(lines[j]) == "" || indentOf(lines[j]) <= indent {
			break
		}
		parts = append(parts, stripComment(strings.TrimSpace(lines[j])))
	}
	return strings.Join(parts, " "), j - 1, nil
}

// readBlock reads a literal (|) or folded (>) block scalar. Both are
// returned line by line: for a JSON document folding changes nothing but
// white space between tokens.
func readBlock(lines []string, i, indent int, head []string) (string, int, error) {
	explicit := head[2] + head[3]
	blockIndent := -1
	if explicit != "" {
		n, _ := strconv.Atoi(explicit)
		blockIndent = indent + n
	}
	var out []string
	j := i + 1
	for ; j < len(lines); j++ {
		l := strings.TrimRight(lines[j], " \t")
		if l == "" {
			out = append(out, "")
			continue
		}
		in := indentOf(l)
		if blockIndent < 0 {
			if in <= indent {
				break
			}
			blockIndent = in
		}
		if in < blockIndent {
			break
		}
		out = append(out, l[blockIndent:])
	}
	for len(out) > 0 && out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	last := i + len(out)
	return strings.Join(out, "\n") + "\n", last, nil
}

// readQuoted reads a single- or double-quoted scalar that starts at
// lines[i][col], folding line breaks as YAML does. It returns the string
// and the line where it closes.
func readQuoted(lines []string, i, col int) (string, int, error) {
	q := lines[i][col]
	var b strings.Builder
	s := lines[i][col+1:]
	pendingBreaks := -1 // -1: no line break pending; else empty lines seen
	for li := i; ; {
		for k := 0; k < len(s); k++ {
			c := s[k]
			if pendingBreaks >= 0 {
				if c == ' ' || c == '\t' {
					continue
				}
				if pendingBreaks == 0 {
					b.WriteByte(' ')
				} else {
					b.WriteString(strings.Repeat("\n", pendingBreaks))
				}
				pendingBreaks = -1
			}
			switch {
			case q == '\'' && c == '\'':
				if k+1 < len(s) && s[k+1] == '\'' {
					b.WriteByte('\'')
					k++
					continue
				}
				return b.String(), li, trailing(s[k+1:])
			case q == '"' && c == '"':
				return b.String(), li, trailing(s[k+1:])
			case q == '"' && c == '\\':
				if k+1 == len(s) { // escaped line break: join without a space
					pendingBreaks = -2
					break
				}
				r, n, err := yamlEscape(s[k+1:])
				if err != nil {
					return "", li, err
				}
				b.WriteString(r)
				k += n
			default:
				b.WriteByte(c)
			}
		}
		li++
		if li >= len(lines) {
			return "", li - 1, fmt.Errorf("unterminated %c-quoted string", q)
		}
		// Line folding: trailing white space goes, a break is a space,
		// each empty line a newline.
		if pendingBreaks == -2 {
			pendingBreaks = -1
			s = strings.TrimLeft(lines[li], " \t")
			continue
		}
		cur := b.String()
		b.Reset()
		b.WriteString(strings.TrimRight(cur, " \t"))
		if pendingBreaks < 0 {
			pendingBreaks = 0
		}
		if strings.TrimSpace(lines[li]) == "" {
			pendingBreaks++
			s = ""
			continue
		}
		s = lines[li]
	}
}

func trailing(rest string) error {
	if r := strings.TrimSpace(rest); r != "" && r[0] != '#' {
		return fmt.Errorf("unexpected %q after a quoted string", r)
	}
	return nil
}

// yamlEscape decodes one escape of a double-quoted YAML string; s starts
// after the backslash. It returns the text and how many bytes it used.
func yamlEscape(s string) (string, int, error) {
	simple := map[byte]string{
		'0': "\x00", 'a': "\a", 'b': "\b", 't': "\t", '\t': "\t", 'n': "\n", 'v': "\v", 'f': "\f", 'r': "\r",
		'e': "\x1b", ' ': " ", '"': "\"", '/': "/", '\\': "\\", 'N': "\u0085", '_': "\u00a0", 'L': "\u2028", 'P': "\u2029",
	}
	if r, ok := simple[s[0]]; ok {
		return r, 1, nil
	}
	width := map[byte]int{'x': 2, 'u': 4, 'U': 8}[s[0]]
	if width == 0 || len(s) < 1+width {
		return "", 0, fmt.Errorf("invalid escape \\%c in a double-quoted string", s[0])
	}
	n, err := strconv.ParseUint(s[1:1+width], 16, 32)
	if err != nil || !utf8.ValidRune(rune(n)) {
		return "", 0, fmt.Errorf("invalid escape \\%s in a double-quoted string", s[:1+width])
	}
	return string(rune(n)), 1 + width, nil
}

// ---- JSON ----

// jnode is a JSON value with its members in document order and its
// position in the source.
type jnode struct {
	start, end int64
	members    []jmember // object
	items      []*jnode  // array
	scalar     any       // string, json.Number, bool or nil
	isObject   bool
}

type jmember struct {
	key string
	val *jnode
}

func (n *jnode) get(key string) *jnode {
	for _, m := range n.members {
		if m.key == key {
			return m.val
		}
	}
	return nil
}

func (n *jnode) str(key string) string {
	if v := n.get(key); v != nil {
		s, _ := v.scalar.(string)
		return s
	}
	return ""
}

func decodeNode(d *json.Decoder, src []byte) (*jnode, error) {
	start := d.InputOffset()
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	// The token began after any separator and white space.
	for start < int64(len(src)) && strings.IndexByte(" \t\r\n:,", src[start]) >= 0 {
		start++
	}
	n := &jnode{start: start}
	switch tok {
	case json.Delim('{'):
		n.isObject = true
		for d.More() {
			kt, err := d.Token()
			if err != nil {
				return nil, err
			}
			key, _ := kt.(string)
			v, err := decodeNode(d, src)
			if err != nil {
				return nil, err
			}
			n.members = append(n.members, jmember{key, v})
		}
		if _, err := d.Token(); err != nil {
			return nil, err
		}
	case json.Delim('['):
		for d.More() {
			v, err := decodeNode(d, src)
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, v)
		}
		if _, err := d.Token(); err != nil {
			return nil, err
		}
	default:
		n.scalar = tok
	}
	n.end = d.InputOffset()
	return n, nil
}

func extractEnvoyJSON(src []byte) ([]found, error) {
	d := json.NewDecoder(bytes.NewReader(src))
	d.UseNumber()
	root, err := decodeNode(d, src)
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %v", err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("not valid JSON: data after the configuration")
	}
	lineAt := func(off int64) int { return 1 + bytes.Count(src[:off], []byte("\n")) }
	var results []found
	var walk func(n *jnode)
	walk = func(n *jnode) {
		if n.isObject && n.str("@type") == wasmFilterType {
			results = append(results, jsonConfig(n, src, lineAt))
		}
		for _, m := range n.members {
			walk(m.val)
		}
		for _, it := range n.items {
			walk(it)
		}
	}
	walk(root)
	return results, nil
}

func jsonConfig(typed *jnode, src []byte, lineAt func(int64) int) found {
	f := found{line: lineAt(typed.start)}
	cfg := typed.get("config")
	if cfg == nil || !cfg.isObject {
		f.err = errors.New("the wasm filter has no config")
		return f
	}
	f.name = cfg.str("name")
	conf := cfg.get("configuration")
	if conf == nil || !conf.isObject {
		f.line = lineAt(cfg.start)
		f.err = errors.New("the wasm filter has no configuration (config.configuration)")
		return f
	}
	f.line = lineAt(conf.start)
	val := conf.get("value")
	if val == nil {
		f.err = errors.New("the configuration has no value member")
		return f
	}
	f.line = lineAt(val.start)
	switch t := conf.str("@type"); t {
	case stringType:
		s, ok := val.scalar.(string)
		if !ok {
			f.err = errors.New("the StringValue's value is not a string")
			return f
		}
		f.doc = []byte(s)
	case structType:
		if !val.isObject {
			f.err = errors.New("the Struct's value is not an object")
			return f
		}
		f.doc = src[val.start:val.end]
	case "":
		f.err = errors.New("the configuration has no \"@type\"")
	default:
		f.err = fmt.Errorf("the configuration's @type is %s, not google.protobuf.StringValue or Struct", t)
	}
	return f
}
