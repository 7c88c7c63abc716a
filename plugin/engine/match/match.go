// Package match finds the rules that apply to a request: it reads what
// the rules match on (each a host call in the plugin, made only if some
// rule uses it) and checks the candidates the configuration's index gives.
// It owns the buffers the request's path is cleaned and folded into and
// the list of matched rules, reused by every request.
package match

import (
	"unsafe"

	"github.com/sluicehq/sluice/plugin/config"
)

// Request is one HTTP request as the engine reads it (engine.Request is
// this type: the same interface, so that the engine hands its request to
// Match without converting it, a runtime type assertion per request).
// Matching reads its headers (":path" and ":method" included); a Request
// that also has RouteName() string can name the Envoy route that routed it
// (xds.route_name), one without it is on no named route.
type Request interface {
	// Header returns a request header (lower-case name; pseudo headers
	// ":path" and ":method" included).
	Header(name string) (string, bool)
	// SourceAddress returns Envoy's source.address property ("ip:port"),
	// valid until the next SourceAddress call (the plugin reads it into a
	// reused buffer): it is parsed at once (the engine's ParseHostPort) and
	// never kept.
	SourceAddress() string
}

// router is a Request that knows its Envoy route.
type router interface {
	RouteName() string
}

// needs says what matching and keying read of a request.
type needs struct {
	method, path, fold, route bool
}

// Matcher matches the requests of one worker against a configuration's
// rules. Not safe for concurrent use.
type Matcher struct {
	cfg     *config.Config
	index   *config.Index
	needs   needs
	pathBuf []byte // config.CleanPath's scratch
	foldBuf []byte // config.AppendFold's
	matched []int
	// static: no rule reads anything of a request to match (needs is
	// empty), so every request matches the same rules, found once by New.
	static bool
}

// New returns a Matcher of cfg's rules, with cfg's index (built if cfg has
// none).
func New(cfg *config.Config) Matcher {
	m := Matcher{cfg: cfg, index: cfg.Index, needs: needsOf(cfg), matched: make([]int, 0, len(cfg.Rules))}
	if m.index == nil {
		m.index = config.BuildIndex(cfg)
	}
	if m.needs == (needs{}) {
		// Nothing is read of a request, so its Target is always the zero
		// one: the rules it matches are those of the zero Target, for
		// every request. Found here once rather than by the index and
		// every rule's check per request.
		m.matchTarget(&config.Target{})
		m.static = true
	}
	return m
}

func needsOf(cfg *config.Config) needs {
	var n needs
	for i := range cfg.Rules {
		r := &cfg.Rules[i]
		m := &r.Match
		n.method = n.method || len(m.Methods) > 0
		n.route = n.route || len(m.Routes) > 0
		pathKey := false
		for _, k := range r.Key {
			switch k.Kind {
			case config.KeyMethod:
				n.method = true
			case config.KeyPath:
				pathKey = true
			}
		}
		usesPath := m.HasPath() || pathKey
		n.path = n.path || usesPath
		n.fold = n.fold || usesPath && m.IgnoreCase
		// A priority class's match is read for every request of its
		// rule (the engine's classes).
		for k := range r.Classes {
			cm := &r.Classes[k].Match
			n.method = n.method || len(cm.Methods) > 0
			n.route = n.route || len(cm.Routes) > 0
			n.path = n.path || cm.HasPath()
			n.fold = n.fold || cm.HasPath() && cm.IgnoreCase
		}
	}
	return n
}

// Match reads what the rules need of req and returns what they match on
// (the clean path, its folded form, the method, the route: each only when
// some rule needs it) and the rules that apply, in configuration order.
// Both are valid until the next Match: they view the Matcher's buffers.
func (m *Matcher) Match(req Request) (config.Target, []int) {
	var t config.Target
	if m.static {
		return t, m.matched
	}
	if m.needs.path {
		// Rules match and key on the clean path, whatever the connection
		// manager's normalize_path and merge_slashes (config.CleanPath).
		raw, _ := req.Header(":path")
		t.Path = config.CleanPath(&m.pathBuf, raw)
		if m.needs.fold {
			// Folded once for every rule that ignores case; the string
			// views the reused buffer, which lives until the next
			// request, longer than the decision that reads it.
			m.foldBuf = config.AppendFold(m.foldBuf[:0], t.Path)
			t.Folded = unsafe.String(unsafe.SliceData(m.foldBuf), len(m.foldBuf))
		}
	}
	if m.needs.method {
		t.Method, _ = req.Header(":method")
	}
	if m.needs.route {
		if rr, ok := req.(router); ok {
			t.Route = rr.RouteName()
		}
	}
	m.matchTarget(&t)
	return t, m.matched
}

// matchTarget sets m.matched to the rules that apply to a request whose
// Target is t. The index lists the rules filed under the request's route,
// method and path (and those that match every request); each is checked
// in full. The cost follows the rules that may match, not all the rules.
func (m *Matcher) matchTarget(t *config.Target) {
	c := m.index.Candidates(t, m.matched[:0])
	k := 0
	for _, i := range c {
		if m.cfg.Rules[i].Match.AppliesTo(t) {
			c[k] = i
			k++
		}
	}
	m.matched = c[:k]
}

// Static reports whether no rule reads anything of a request to match, so
// that every request matches the same rules: Matched returns them without
// a Match, and Match reads nothing.
func (m *Matcher) Static() bool { return m.static }

// Matched returns the rules the last Match found.
func (m *Matcher) Matched() []int { return m.matched }
