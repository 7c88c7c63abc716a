package envoyconf

import (
	"encoding/json"
	"fmt"
	"strconv"

	yamlv3 "go.yaml.in/yaml/v3"
)

// yamlToJSON converts a YAML (or JSON) document to JSON for protojson:
// mappings to objects (keys as their text), sequences to arrays, and
// scalars by their resolved YAML tag (and YAML 1.1's yes/no/on/off as
// booleans, as Envoy's reader, yaml-cpp, takes them); a number keeps the spelling it was
// written with, so that protojson sees what Envoy would.
func yamlToJSON(src []byte) ([]byte, error) {
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(src, &doc); err != nil {
		return nil, err
	}
	if doc.Kind == 0 { // empty document
		return []byte("null"), nil
	}
	v, err := jsonValue(&doc, 0)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func jsonValue(n *yamlv3.Node, depth int) (any, error) {
	if depth > 1000 {
		return nil, fmt.Errorf("line %d: nested too deeply", n.Line)
	}
	switch n.Kind {
	case yamlv3.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return jsonValue(n.Content[0], depth+1)
	case yamlv3.AliasNode:
		return jsonValue(n.Alias, depth+1)
	case yamlv3.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := jsonValue(c, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yamlv3.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Tag == "!!merge" { // <<: *base, or <<: [*a, *b] (a's members first)
				bases := []*yamlv3.Node{v}
				if v.Kind == yamlv3.SequenceNode {
					bases = v.Content
				}
				for _, b := range bases {
					base, err := jsonValue(b, depth+1)
					if err != nil {
						return nil, err
					}
					if m, ok := base.(map[string]any); ok {
						for bk, bv := range m {
							if _, set := out[bk]; !set {
								out[bk] = bv
							}
						}
					}
				}
				continue
			}
			val, err := jsonValue(v, depth+1)
			if err != nil {
				return nil, err
			}
			out[k.Value] = val
		}
		return out, nil
	}
	return scalar(n)
}

func scalar(n *yamlv3.Node) (any, error) {
	switch n.ShortTag() {
	case "!!null":
		return nil, nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return nil, err
		}
		return b, nil
	case "!!int":
		var i int64
		if err := n.Decode(&i); err == nil {
			return json.Number(strconv.FormatInt(i, 10)), nil
		}
		var u uint64
		if err := n.Decode(&u); err != nil {
			return nil, err
		}
		return json.Number(strconv.FormatUint(u, 10)), nil
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			return nil, err
		}
		if _, err := json.Marshal(f); err != nil {
			return nil, fmt.Errorf("line %d: %s is not a JSON number", n.Line, n.Value)
		}
		return f, nil
	case "!!str":
		// YAML 1.1's booleans, which Envoy's reader (yaml-cpp's bool
		// conversion) also takes for true and false when unquoted.
		if n.Style&(yamlv3.TaggedStyle|yamlv3.SingleQuotedStyle|yamlv3.DoubleQuotedStyle|yamlv3.LiteralStyle|yamlv3.FoldedStyle) == 0 {
			switch n.Value {
			case "y", "Y", "yes", "Yes", "YES", "on", "On", "ON":
				return true, nil
			case "n", "N", "no", "No", "NO", "off", "Off", "OFF":
				return false, nil
			}
		}
	}
	return n.Value, nil
}
