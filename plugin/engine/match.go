package engine

// RouteRequest is a Request that can name the Envoy route that routed it
// (the xds.route_name property). The engine asks only when some rule
// matches on routes (match.route), once per request; a Request without
// it is on no named route.
type RouteRequest interface {
	Request
	RouteName() string
}

// matchRules reads what the rules need of ri.req (each read a host call in
// the plugin, made only if some rule uses it) into ri.t and finds the rules
// that apply (e.matcher.Matched()). A static matcher's Match reads nothing
// and returns the zero Target: it is not called (a call per request on
// wasm).
func (e *Engine) matchRules(ri *requestInfo) {
	if !e.matcher.Static() {
		ri.t, _ = e.matcher.Match(ri.req)
	}
}
