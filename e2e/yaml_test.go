package e2e_test

import (
	"encoding/json"
	"fmt"
	"strings"
)

// parseYAML parses the YAML subset that the shipped files use: block
// mappings and sequences, plain and quoted scalars, flow sequences and flow
// mappings of those, literal block scalars (|) and comments. It returns
// map[string]any, []any and string values (no typing of numbers or booleans),
// and an error for anything else (tabs in indentation, inconsistent
// indentation, duplicate keys, anchors, tags...). It is a sanity check, not a
// YAML implementation: no YAML library is in go.mod.
func parseYAML(src string) (any, error) {
	p := &yamlParser{raw: strings.Split(strings.ReplaceAll(src, "\r\n", "\n"), "\n")}
	p.skip()
	if p.i >= len(p.raw) {
		return nil, nil
	}
	ind, _ := p.cur()
	v, err := p.block(ind)
	if err != nil {
		return nil, err
	}
	p.skip()
	if p.i < len(p.raw) {
		return nil, fmt.Errorf("line %d: unexpected indentation", p.i+1)
	}
	return v, nil
}

type yamlParser struct {
	raw []string
	i   int
	// override replaces the current line's indentation and text (used for
	// "- key: value" sequence items).
	override *[2]any
}

// yamlStripComment removes a comment that starts at '#' outside quotes, preceded
// by whitespace or at the start.
func yamlStripComment(s string) string {
	inS, inD := false, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'' && !inD:
			inS = !inS
		case c == '"' && !inS:
			if i == 0 || s[i-1] != '\\' {
				inD = !inD
			}
		case c == '#' && !inS && !inD && (i == 0 || s[i-1] == ' '):
			return s[:i]
		}
	}
	return s
}

// skip advances past blank and comment-only lines and document markers.
func (p *yamlParser) skip() {
	if p.override != nil {
		return
	}
	for p.i < len(p.raw) {
		t := strings.TrimSpace(yamlStripComment(p.raw[p.i]))
		if t != "" && t != "---" {
			return
		}
		p.i++
	}
}

// cur returns the current line's indentation and content (comment removed).
func (p *yamlParser) cur() (int, string) {
	if p.override != nil {
		return p.override[0].(int), p.override[1].(string)
	}
	line := strings.TrimRight(yamlStripComment(p.raw[p.i]), " ")
	t := strings.TrimLeft(line, " ")
	return len(line) - len(t), t
}

func (p *yamlParser) advance() {
	if p.override != nil {
		p.override = nil
	}
	p.i++
	p.skip()
}

func (p *yamlParser) more() bool { return p.override != nil || p.i < len(p.raw) }

func yamlIsSeqItem(t string) bool { return t == "-" || strings.HasPrefix(t, "- ") }

func (p *yamlParser) block(ind int) (any, error) {
	if p.override == nil && strings.HasPrefix(strings.TrimLeft(p.raw[p.i], " "), "\t") {
		return nil, fmt.Errorf("line %d: tab in indentation", p.i+1)
	}
	_, t := p.cur()
	if yamlIsSeqItem(t) {
		return p.seq(ind)
	}
	return p.mapping(ind)
}

func (p *yamlParser) seq(ind int) (any, error) {
	out := []any{}
	for p.more() {
		i, t := p.cur()
		if i < ind {
			break
		}
		if i > ind {
			return nil, fmt.Errorf("line %d: bad indentation", p.i+1)
		}
		if !yamlIsSeqItem(t) {
			break
		}
		rest := strings.TrimLeft(strings.TrimPrefix(t, "-"), " ")
		line := p.i
		if rest == "" {
			p.advance()
			if !p.more() {
				out = append(out, nil)
				break
			}
			ci, _ := p.cur()
			if ci <= ind {
				out = append(out, nil)
				continue
			}
			v, err := p.block(ci)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
			continue
		}
		if _, _, ok := yamlSplitKey(rest); ok && !strings.HasPrefix(rest, "[") && !strings.HasPrefix(rest, `"`) && !strings.HasPrefix(rest, "'") {
			// "- key: value": a mapping whose first key is on this line.
			p.override = &[2]any{i + len(t) - len(rest), rest}
			v, err := p.mapping(i + len(t) - len(rest))
			if err != nil {
				return nil, err
			}
			out = append(out, v)
			continue
		}
		v, err := yamlScalar(rest)
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", line+1, err)
		}
		out = append(out, v)
		p.advance()
	}
	return out, nil
}

// yamlSplitKey splits "key: value" (or "key:") at the first ": " outside quotes.
func yamlSplitKey(t string) (string, string, bool) {
	if strings.HasPrefix(t, `"`) || strings.HasPrefix(t, "'") {
		q := t[0]
		end := strings.IndexByte(t[1:], q)
		if end < 0 {
			return "", "", false
		}
		k, rest := t[1:end+1], t[end+2:]
		if rest == ":" {
			return k, "", true
		}
		if strings.HasPrefix(rest, ": ") {
			return k, strings.TrimSpace(rest[2:]), true
		}
		return "", "", false
	}
	if strings.HasSuffix(t, ":") && !strings.Contains(t, ": ") {
		return t[:len(t)-1], "", true
	}
	if i := strings.Index(t, ": "); i > 0 {
		return t[:i], strings.TrimSpace(t[i+2:]), true
	}
	return "", "", false
}

func (p *yamlParser) mapping(ind int) (any, error) {
	out := map[string]any{}
	for p.more() {
		i, t := p.cur()
		if i < ind {
			break
		}
		if i > ind {
			return nil, fmt.Errorf("line %d: bad indentation", p.i+1)
		}
		if yamlIsSeqItem(t) {
			break
		}
		line := p.i
		k, v, ok := yamlSplitKey(t)
		if !ok {
			return nil, fmt.Errorf("line %d: want key: value, got %q", line+1, t)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("line %d: duplicate key %q", line+1, k)
		}
		switch {
		case v == "|" || v == "|-":
			p.override = nil
			p.i++
			var lines []string
			blockInd := -1
			for p.i < len(p.raw) {
				r := p.raw[p.i]
				tr := strings.TrimLeft(r, " ")
				if tr == "" {
					lines = append(lines, "")
					p.i++
					continue
				}
				ri := len(r) - len(tr)
				if ri <= ind {
					break
				}
				if blockInd < 0 {
					blockInd = ri
				}
				if ri < blockInd {
					return nil, fmt.Errorf("line %d: bad block scalar indentation", p.i+1)
				}
				lines = append(lines, r[blockInd:])
				p.i++
			}
			for len(lines) > 0 && lines[len(lines)-1] == "" {
				lines = lines[:len(lines)-1]
			}
			s := strings.Join(lines, "\n")
			if v == "|" {
				s += "\n"
			}
			out[k] = s
			p.skip()
		case v == "":
			p.advance()
			if !p.more() {
				out[k] = nil
				break
			}
			ci, ct := p.cur()
			switch {
			case ci > ind:
				val, err := p.block(ci)
				if err != nil {
					return nil, err
				}
				out[k] = val
			case ci == ind && yamlIsSeqItem(ct):
				val, err := p.seq(ind)
				if err != nil {
					return nil, err
				}
				out[k] = val
			default:
				out[k] = nil
			}
		default:
			val, err := yamlScalar(v)
			if err != nil {
				return nil, fmt.Errorf("line %d: %v", line+1, err)
			}
			out[k] = val
			p.advance()
		}
	}
	return out, nil
}

func yamlScalar(s string) (any, error) {
	switch {
	case strings.HasPrefix(s, "{"):
		if !strings.HasSuffix(s, "}") {
			return nil, fmt.Errorf("unterminated flow mapping %q", s)
		}
		out := map[string]any{}
		inner := strings.TrimSpace(s[1 : len(s)-1])
		if inner == "" {
			return out, nil
		}
		for _, part := range yamlSplitFlow(inner) {
			part = strings.TrimSpace(part)
			k, v, ok := yamlSplitKey(part)
			if !ok {
				return nil, fmt.Errorf("bad flow mapping entry %q", part)
			}
			if _, dup := out[k]; dup {
				return nil, fmt.Errorf("duplicate key %q in flow mapping", k)
			}
			val, err := yamlScalar(v)
			if err != nil {
				return nil, err
			}
			out[k] = val
		}
		return out, nil
	case strings.HasPrefix(s, "["):
		if !strings.HasSuffix(s, "]") {
			return nil, fmt.Errorf("unterminated flow sequence %q", s)
		}
		var out []any
		inner := strings.TrimSpace(s[1 : len(s)-1])
		if inner == "" {
			return out, nil
		}
		for _, part := range yamlSplitFlow(inner) {
			v, err := yamlScalar(strings.TrimSpace(part))
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case s == "":
		return "", nil
	case strings.HasPrefix(s, `"`):
		var v string
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			return nil, fmt.Errorf("bad double-quoted scalar %s", s)
		}
		return v, nil
	case strings.HasPrefix(s, "'"):
		if len(s) < 2 || !strings.HasSuffix(s, "'") {
			return nil, fmt.Errorf("bad single-quoted scalar %s", s)
		}
		return strings.ReplaceAll(s[1:len(s)-1], "''", "'"), nil
	case strings.ContainsAny(s[:1], "&*!|>%@`"):
		return nil, fmt.Errorf("unsupported YAML syntax %q", s)
	}
	return s, nil
}

// yamlSplitFlow splits s at commas outside quotes and nested brackets.
func yamlSplitFlow(s string) []string {
	var parts []string
	inS, inD, depth, start := false, false, 0, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'' && !inD:
			inS = !inS
		case c == '"' && !inS && (i == 0 || s[i-1] != '\\'):
			inD = !inD
		case inS || inD:
		case c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			depth--
		case c == ',' && depth == 0:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}
