package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/shared/limit"
)

// floodWarnings names the rules keyed only by values a client chooses
// freely (a header, the path; with or without the method) that no rule
// keyed by client_ip covers: every invented value is a fresh budget, so
// such a rule limits nobody who lies, and a client that invents values
// fills the rule's share of the state table (its new clients are then
// limited together). Each warning names the rule and the fix.
func floodWarnings(c *config.Config) []string {
	var out []string
	for i := range c.Rules {
		r := &c.Rules[i]
		chosen := clientChosen(r)
		if chosen == "" || r.Shadow {
			continue
		}
		covered := false
		for j := range c.Rules {
			if j != i && perClientRate(&c.Rules[j]) && covers(&c.Rules[j].Match, &r.Match) {
				covered = true
				break
			}
		}
		if covered {
			continue
		}
		out = append(out, fmt.Sprintf("rules[%d] (%s) is keyed only by values the client chooses (%s) and no rule keyed by client_ip covers its requests: "+
			"every invented value is a fresh budget, and a client inventing values fills this rule's share of the state table. "+
			"Add a rule keyed by client_ip with the same match (or none), e.g. %s",
			i, r.Name, chosen, exampleRule(r)))
	}
	return out
}

// costWarnings names the rules charged at admission whose cost.max is over
// what the rule holds: a request declaring more than that is refused
// every time, whatever the client waits.
func costWarnings(c *config.Config) []string {
	var out []string
	for i := range c.Rules {
		if n := c.Rules[i].NeverPasses(); n > 0 {
			out = append(out, fmt.Sprintf("rules[%d] (%s): cost.max %d is more than the rule holds: requests declaring more than %d never pass",
				i, c.Rules[i].Name, c.Rules[i].Cost.Max, n))
		}
	}
	return out
}

// clientChosen returns the key parts of r a client chooses freely, or ""
// when a part is the client address (or the key is only the method).
func clientChosen(r *config.Rule) string {
	var parts []string
	for _, k := range r.Key {
		switch k.Kind {
		case config.KeyClientIP:
			return ""
		case config.KeyPath:
			parts = append(parts, "path")
		case config.KeyHeader:
			parts = append(parts, "header:"+k.Header)
		}
	}
	return strings.Join(parts, ", ")
}

// perClientRate reports whether r limits each client address to a rate
// (enforced, keyed by client_ip and nothing a client invents).
func perClientRate(r *config.Rule) bool {
	if r.Shadow {
		return false
	}
	switch r.Limit.Algorithm() {
	case limit.Concurrency, limit.AdaptiveConcurrency:
		return false
	}
	ip := false
	for _, k := range r.Key {
		switch k.Kind {
		case config.KeyClientIP:
			ip = true
		case config.KeyPath, config.KeyHeader:
			return false
		}
	}
	return ip
}

// covers reports whether every request that m matches is matched by c.
func covers(c, m *config.Match) bool {
	mExact, mPrefix := m.PathExact, m.PathPrefix
	switch {
	case c.HasPath() && m.IgnoreCase && !c.IgnoreCase:
		// m matches spellings in every case, c only one.
		return false
	case c.IgnoreCase && !m.IgnoreCase:
		// c's paths are folded: compare m's folded too.
		mExact, mPrefix = config.FoldPath(mExact), config.FoldPath(mPrefix)
	}
	switch {
	case c.PathExact != "" && mExact != c.PathExact:
		return false
	case c.PathPrefix != "" && !strings.HasPrefix(mExact, c.PathPrefix) && !strings.HasPrefix(mPrefix, c.PathPrefix):
		return false
	}
	if len(c.Routes) > 0 && (len(m.Routes) == 0 || !subset(m.Routes, c.Routes)) {
		return false
	}
	return subsetMethods(c, m)
}

// subset reports whether every element of a is in b.
func subset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// subsetMethods reports whether c's methods include all of m's.
func subsetMethods(c, m *config.Match) bool {
	if len(c.Methods) == 0 {
		return true
	}
	if len(m.Methods) == 0 {
		return false
	}
	for _, x := range m.Methods {
		found := false
		for _, y := range c.Methods {
			found = found || x == y
		}
		if !found {
			return false
		}
	}
	return true
}

// exampleRule is the JSON of a client_ip rule that covers r's requests.
func exampleRule(r *config.Rule) string {
	var match []string
	if r.Match.PathPrefix != "" {
		match = append(match, fmt.Sprintf(`"path_prefix": %q`, r.Match.PathPrefix))
	}
	if r.Match.PathExact != "" {
		match = append(match, fmt.Sprintf(`"path_exact": %q`, r.Match.PathExact))
	}
	if len(r.Match.Methods) > 0 {
		match = append(match, fmt.Sprintf(`"methods": ["%s"]`, strings.Join(r.Match.Methods, `", "`)))
	}
	if len(r.Match.Routes) > 0 {
		match = append(match, fmt.Sprintf(`"route": ["%s"]`, strings.Join(r.Match.Routes, `", "`)))
	}
	if r.Match.IgnoreCase && r.Match.HasPath() {
		match = append(match, `"case_sensitive": false`)
	}
	m := ""
	if len(match) > 0 {
		m = `"match": {` + strings.Join(match, ", ") + `}, `
	}
	return fmt.Sprintf(`{"name": "%s-per-ip", %s"key": ["client_ip"], "limit": N, "window": "..."}`, r.Name, m)
}
