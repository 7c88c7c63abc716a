package engine

import (
	"github.com/sluicehq/sluice/plugin/config"
)

// RouteRequest is a Request that can name the Envoy route that routed it
// (the xds.route_name property). The engine asks only when some rule
// matches on routes (match.route), once per request; a Request without
// it is on no named route.
type RouteRequest interface {
	Request
	RouteName() string
}

// needs says what matching and keying read of a request: each is a host
// call, made only if some rule uses it.
type needs struct {
	method, path, fold, route bool
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
	}
	return n
}

// matchRules reads what the rules need of req and lists the rules that
// apply in e.matched. Every header read is a host call that copies into
// the guest: it reads only what some rule uses.
func (e *Engine) matchRules(req Request) requestInfo {
	ri := requestInfo{req: req}
	if e.needs.path {
		// Rules match and key on the clean path, whatever the connection
		// manager's normalize_path and merge_slashes (config.CleanPath).
		raw, _ := req.Header(":path")
		ri.t.Path = config.CleanPath(&e.pathBuf, raw)
		if e.needs.fold {
			// Folded once for every rule that ignores case; the string
			// views the reused buffer, which lives until the next
			// request, longer than the decision that reads it.
			e.foldBuf = config.AppendFold(e.foldBuf[:0], ri.t.Path)
			ri.t.Folded = unsafeString(e.foldBuf)
		}
	}
	if e.needs.method {
		ri.t.Method, _ = req.Header(":method")
	}
	if e.needs.route {
		if rr, ok := req.(RouteRequest); ok {
			ri.t.Route = rr.RouteName()
		}
	}
	// The index lists the rules filed under the request's route, method
	// and path (and those that match every request); each is checked in
	// full. The cost follows the rules that may match, not all the rules.
	m := e.index.Candidates(&ri.t, e.matched[:0])
	k := 0
	for _, i := range m {
		if e.cfg.Rules[i].Match.AppliesTo(&ri.t) {
			m[k] = i
			k++
		}
	}
	e.matched = m[:k]
	return ri
}
