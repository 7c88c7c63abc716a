package config

// Index finds the rules whose match may apply to a request without looking
// at every rule, so that a request costs what the rules that match it cost
// however many rules there are. Parse builds it. Every rule is filed under
// one kind of key, the most selective its match has:
//
//   - its Envoy routes (match.route), looked up by the request's route;
//   - else its exact path, in a map (folded paths in a map of their own);
//   - else its path prefix, in a byte trie walked along the request's path
//     (folded prefixes in a trie of their own, walked along the folded path);
//   - else its methods, looked up by the request's method;
//   - else it is a candidate for every request.
//
// Candidates lists the rules filed under the request's keys; the caller
// checks each with Match.AppliesTo (its other conditions: methods of a
// path rule, say).
type Index struct {
	byRoute    map[string][]int32
	exact      map[string][]int32
	exactFold  map[string][]int32
	prefix     trie
	prefixFold trie
	byMethod   map[string][]int32
	always     []int32
}

// BuildIndex files the rules of c (Parse calls it).
func BuildIndex(c *Config) *Index {
	x := &Index{}
	for i := range c.Rules {
		m, r := &c.Rules[i].Match, int32(i)
		switch {
		case len(m.Routes) > 0:
			for k, name := range m.Routes {
				if !containsBefore(m.Routes, k, name) {
					x.byRoute = file(x.byRoute, name, r)
				}
			}
		case m.PathExact != "" && m.IgnoreCase:
			x.exactFold = file(x.exactFold, m.PathExact, r)
		case m.PathExact != "":
			x.exact = file(x.exact, m.PathExact, r)
		case m.PathPrefix != "" && m.IgnoreCase:
			x.prefixFold.add(m.PathPrefix, r)
		case m.PathPrefix != "":
			x.prefix.add(m.PathPrefix, r)
		case len(m.Methods) > 0:
			for k, meth := range m.Methods {
				if !containsBefore(m.Methods, k, meth) {
					x.byMethod = file(x.byMethod, meth, r)
				}
			}
		default:
			x.always = append(x.always, r)
		}
	}
	return x
}

func containsBefore(list []string, k int, s string) bool {
	for _, x := range list[:k] {
		if x == s {
			return true
		}
	}
	return false
}

// Not inlined: a copy at each call site costs more wasm code than
// the call (docs/design/memory.md, "Inlining").
//
//go:noinline
func file(m map[string][]int32, key string, r int32) map[string][]int32 {
	if m == nil {
		m = map[string][]int32{}
	}
	m[key] = append(m[key], r)
	return m
}

// Candidates appends to dst, in configuration order, the rules filed under
// the keys of request t, and returns it. Every rule that applies to t is
// among them. It does not allocate when dst has room for them.
func (x *Index) Candidates(t *Target, dst []int) []int {
	start := len(dst)
	dst = appendRules(dst, x.always)
	if x.byMethod != nil {
		dst = appendRules(dst, x.byMethod[t.Method])
	}
	if x.byRoute != nil {
		dst = appendRules(dst, x.byRoute[t.Route])
	}
	if x.exact != nil {
		dst = appendRules(dst, x.exact[t.Path])
	}
	if x.exactFold != nil {
		dst = appendRules(dst, x.exactFold[t.Folded])
	}
	dst = x.prefix.walk(t.Path, dst)
	dst = x.prefixFold.walk(t.Folded, dst)
	// Few rules match a request: an insertion sort puts them in
	// configuration order.
	for i := start + 1; i < len(dst); i++ {
		for j := i; j > start && dst[j-1] > dst[j]; j-- {
			dst[j-1], dst[j] = dst[j], dst[j-1]
		}
	}
	return dst
}

// Not inlined: a copy at each call site costs more wasm code than
// the call (docs/design/memory.md, "Inlining").
//
//go:noinline
func appendRules(dst []int, rules []int32) []int {
	for _, r := range rules {
		dst = append(dst, int(r))
	}
	return dst
}

// trie is a byte trie of path prefixes; node 0 is the root (the empty
// prefix).
type trie struct {
	nodes []trieNode
}

type trieNode struct {
	rules []int32    // rules whose prefix ends here
	edges []trieEdge // sorted by byte
}

type trieEdge struct {
	_    [0]func() // not comparable: no equality function in the module
	b    byte
	next int32
}

func (t *trie) add(prefix string, r int32) {
	if len(t.nodes) == 0 {
		t.nodes = append(t.nodes, trieNode{})
	}
	n := int32(0)
	for i := 0; i < len(prefix); i++ {
		k, found := t.edge(n, prefix[i])
		if !found {
			t.nodes = append(t.nodes, trieNode{})
			next := int32(len(t.nodes) - 1)
			es := t.nodes[n].edges
			es = append(es, trieEdge{})
			copy(es[k+1:], es[k:])
			es[k] = trieEdge{b: prefix[i], next: next}
			t.nodes[n].edges = es
		}
		n = t.nodes[n].edges[k].next
	}
	t.nodes[n].rules = append(t.nodes[n].rules, r)
}

// edge finds the edge of node n for byte b: its position, or where it
// would go.
func (t *trie) edge(n int32, b byte) (int, bool) {
	es := t.nodes[n].edges
	lo, hi := 0, len(es)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if es[mid].b < b {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, lo < len(es) && es[lo].b == b
}

// walk appends the rules of every prefix of path in the trie.
func (t *trie) walk(path string, dst []int) []int {
	if len(t.nodes) == 0 {
		return dst
	}
	n := int32(0)
	for i := 0; ; i++ {
		dst = appendRules(dst, t.nodes[n].rules)
		if i == len(path) {
			return dst
		}
		k, found := t.edge(n, path[i])
		if !found {
			return dst
		}
		n = t.nodes[n].edges[k].next
	}
}
