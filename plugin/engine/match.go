package engine

// RouteRequest is a Request that can name the Envoy route that routed it
// (the xds.route_name property). The engine asks only when some rule
// matches on routes (match.route), once per request; a Request without
// it is on no named route.
type RouteRequest interface {
	Request
	RouteName() string
}

// matchRules reads what the rules need of req (each read a host call in
// the plugin, made only if some rule uses it) and finds the rules that
// apply (e.matcher.Matched()).
func (e *Engine) matchRules(req Request) requestInfo {
	ri := requestInfo{req: req}
	ri.t, _ = e.matcher.Match(req)
	return ri
}
