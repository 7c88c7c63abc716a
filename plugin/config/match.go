package config

import (
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/plugin/internal/jsonlite"
	"github.com/sluicehq/sluice/plugin/internal/sprintf"
	"github.com/sluicehq/sluice/plugin/internal/textnum"
)

// Match selects the requests a rule applies to. The zero Match applies to
// every request.
type Match struct {
	// PathPrefix and PathExact are clean (CleanPath); with IgnoreCase they
	// are also folded (FoldPath), and compared with the request's folded
	// path.
	PathPrefix string
	PathExact  string
	Methods    []string // upper-case; empty = any
	// Routes are Envoy route names (xds.route_name); empty = any route.
	Routes []string
	// IgnoreCase is `case_sensitive: false`: the paths compare, and the
	// rule's path key keys, as folded paths (AppendFold). Set it with
	// SetCaseSensitive, which folds the paths.
	IgnoreCase bool
}

// SetCaseSensitive sets how m compares paths, folding its paths when case
// does not matter. A match that follows another's setting (a priority
// class follows its rule's) calls it with that setting once parsed.
func (m *Match) SetCaseSensitive(sensitive bool) {
	m.IgnoreCase = !sensitive
	if m.IgnoreCase {
		m.PathPrefix = FoldPath(m.PathPrefix)
		m.PathExact = FoldPath(m.PathExact)
	}
}

// Target is what matching reads of one request. Path is the clean path
// (CleanPath, without the query); Folded its folded form (AppendFold),
// needed only by matches with IgnoreCase (and the path key of their rules);
// Route the name of the Envoy route that routed the request, needed only
// by matches with Routes.
type Target struct {
	Path, Folded, Method, Route string
}

// AppliesTo reports whether the request t describes matches. It does not
// allocate.
func (m *Match) AppliesTo(t *Target) bool {
	path := t.Path
	if m.IgnoreCase {
		path = t.Folded
	}
	if m.PathExact != "" && path != m.PathExact {
		return false
	}
	if m.PathPrefix != "" && !strings.HasPrefix(path, m.PathPrefix) {
		return false
	}
	if len(m.Routes) > 0 && !slices.Contains(m.Routes, t.Route) {
		return false
	}
	return len(m.Methods) == 0 || slices.Contains(m.Methods, t.Method)
}

// Applies reports whether a request with this path (clean, as CleanPath
// returns it; a query is ignored) and method matches, on any route. It
// folds the path for a match with IgnoreCase: the request path uses
// AppliesTo with a Target built once.
func (m *Match) Applies(path, method string) bool {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	t := Target{Path: path, Method: method}
	if m.IgnoreCase {
		t.Folded = FoldPath(path)
	}
	if len(m.Routes) > 0 {
		return false
	}
	return m.AppliesTo(&t)
}

// HasPath reports whether m compares the path.
func (m *Match) HasPath() bool { return m.PathPrefix != "" || m.PathExact != "" }

func parseMatch(field string, raw *jsonlite.Value, m *Match) error {
	obj, err := object(field, raw, nil)
	if err != nil {
		return err
	}
	if err := known(field, obj, "path_prefix", "path_exact", "methods", "route", "case_sensitive"); err != nil {
		return err
	}
	if err := parseMatchPaths(field, obj, m); err != nil {
		return err
	}
	if raw := obj.Get("methods"); raw != nil {
		if err := strs(raw, &m.Methods); err != nil {
			return errf(field+".methods", "must be a list of strings")
		}
		for i, x := range m.Methods {
			up := upperString(textnum.TrimSpace(x))
			if up == "" || hasWhiteSpace(up) {
				return errf(sprintf.Sprintf("%s.methods[%d]", field, i), "%q is not an HTTP method", x)
			}
			m.Methods[i] = up
		}
	}
	if raw := obj.Get("route"); raw != nil {
		if err := parseRoutes(field+".route", raw, m); err != nil {
			return err
		}
	}
	sensitive := true
	if err := (fields{path: field, m: obj}).flag("case_sensitive", &sensitive); err != nil {
		return err
	}
	m.SetCaseSensitive(sensitive)
	return nil
}

// parseMatchPaths reads path_prefix and path_exact, cleaned.
func parseMatchPaths(field string, obj *jsonlite.Value, m *Match) error {
	for _, f := range []struct {
		name string
		dst  *string
	}{{"path_prefix", &m.PathPrefix}, {"path_exact", &m.PathExact}} {
		raw := obj.Get(f.name)
		if raw == nil {
			continue
		}
		if err := str(raw, f.dst); err != nil {
			return errf(field+"."+f.name, "must be a string")
		}
		if !strings.HasPrefix(*f.dst, "/") {
			return errf(field+"."+f.name, "%q must start with /", *f.dst)
		}
		// Requests are matched by their clean path (CleanPath): a path
		// written otherwise ("/%7Euser", "/a//b") is cleaned the same way.
		var buf []byte
		*f.dst = CleanPath(&buf, *f.dst)
	}
	if m.PathPrefix != "" && m.PathExact != "" {
		return errf(field+".path_exact", "use either path_prefix or path_exact, not both")
	}
	return nil
}

// parseRoutes reads match.route: Envoy route names, compared exactly.
func parseRoutes(field string, raw *jsonlite.Value, m *Match) error {
	if err := strs(raw, &m.Routes); err != nil {
		return errf(field, "must be a list of Envoy route names (strings)")
	}
	if len(m.Routes) == 0 {
		return errf(field, "must name at least one Envoy route (omit route to match every route)")
	}
	for i, s := range m.Routes {
		if n := utf8.RuneCountInString(s); n == 0 || n > MaxRouteName {
			return errf(sprintf.Sprintf("%s[%d]", field, i), "%q is not an Envoy route name (1 to %d characters)", s, MaxRouteName)
		}
	}
	return nil
}

// MaxRouteName bounds an Envoy route name in match.route.
const MaxRouteName = 1024

// hasWhiteSpace is strings.ContainsAny(s, " \t\r\n"), without its general
// code (Unicode cut sets, about 3.5 KB of module): the four are ASCII, and
// a byte of a multi-byte rune never is.
func hasWhiteSpace(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == ' ' || c == '\t' || c == '\r' || c == '\n' {
			return true
		}
	}
	return false
}
