package main

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/internal/envoyconf"
	"github.com/sluicehq/sluice/plugin/config"
)

// routeWarnings compares the rules of c with the Envoy routes of the
// connection manager that hosts them: a rule whose path overlaps a route's
// but disagrees with it about letter case (Envoy's match.case_sensitive,
// Sluice's match.case_sensitive), and a rule naming a route (match.route)
// that no route of the connection manager has.
func routeWarnings(c *config.Config, routes []envoyconf.RoutePath) []string {
	var out []string
	names := map[string]bool{}
	for _, rt := range routes {
		names[rt.Name] = true
	}
	for i := range c.Rules {
		r := &c.Rules[i]
		for _, name := range r.Match.Routes {
			if !names[name] {
				out = append(out, fmt.Sprintf("rule %q: match.route names %q, which no route of this connection manager has: the rule applies to no request", r.Name, name))
			}
		}
		if !r.Match.HasPath() {
			continue
		}
		for _, rt := range routes {
			if caseless(rt.Path) || !overlap(&r.Match, rt) || rt.CaseInsensitive == r.Match.IgnoreCase {
				continue
			}
			out = append(out, caseWarning(r, rt))
		}
	}
	return out
}

func caseWarning(r *config.Rule, rt envoyconf.RoutePath) string {
	route := fmt.Sprintf("Envoy route %q (virtual host %q, %s)", rt.Name, rt.VirtualHost, describeRoute(rt))
	if rt.CaseInsensitive {
		return fmt.Sprintf("rule %q: %s matches ignoring letter case, the rule's path does not: /LOGIN reaches that route's upstream without the rule (set the rule's match.case_sensitive: false if the upstream routes case-insensitively, as ASP.NET Core, IIS and Express do)", r.Name, route)
	}
	return fmt.Sprintf("rule %q: the rule ignores letter case (match.case_sensitive: false), %s does not: spellings Envoy routes elsewhere count against this rule's budget (keep case_sensitive: false only if those spellings reach the same upstream)", r.Name, route)
}

// caseless reports whether letter case cannot matter to path p (no
// letters: "/", "/1"), or p is not a path match at all ("").
func caseless(p string) bool { return strings.ToUpper(p) == strings.ToLower(p) }

func describeRoute(rt envoyconf.RoutePath) string {
	if rt.Exact {
		return "path " + rt.Path
	}
	return "prefix " + rt.Path
}

// overlap reports whether some path, in some letter case, could match
// both the rule's path and the route's: compared folded, one a prefix of
// the other (or, for two exact paths, equal).
func overlap(m *config.Match, rt envoyconf.RoutePath) bool {
	var buf []byte
	rp := config.FoldPath(config.CleanPath(&buf, rt.Path))
	mp, exact := m.PathPrefix, false
	if m.PathExact != "" {
		mp, exact = m.PathExact, true
	}
	mp = config.FoldPath(mp)
	switch {
	case exact && rt.Exact:
		return mp == rp
	case exact:
		return strings.HasPrefix(mp, rp)
	case rt.Exact:
		return strings.HasPrefix(rp, mp)
	}
	return strings.HasPrefix(mp, rp) || strings.HasPrefix(rp, mp)
}
