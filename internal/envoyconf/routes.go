package envoyconf

// RoutePath is one route of the inline route_config of the connection
// manager hosting a filter, as far as its path match goes.
type RoutePath struct {
	Name        string // the route's name (xds.route_name); may be empty
	VirtualHost string
	// Path is the route's prefix, path or path_separated_prefix; Exact
	// says it is a path (the whole path); "" for other matches (regex,
	// templates), which Routes leaves out.
	Path  string
	Exact bool
	// CaseInsensitive is match.case_sensitive: false.
	CaseInsensitive bool
}

// Routes returns the routes of the inline route_config of the connection
// manager that hosts f, and false when there is none to read (no
// connection manager, or routes from RDS or scoped routes).
func (f Filter) Routes() ([]RoutePath, bool) {
	rc := f.HCM.GetRouteConfig()
	if rc == nil {
		return nil, false
	}
	var out []RoutePath
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			m := r.GetMatch()
			rp := RoutePath{Name: r.GetName(), VirtualHost: vh.GetName(), Path: m.GetPrefix()}
			if cs := m.GetCaseSensitive(); cs != nil && !cs.GetValue() {
				rp.CaseInsensitive = true
			}
			switch {
			case m.GetPath() != "":
				rp.Path, rp.Exact = m.GetPath(), true
			case m.GetPathSeparatedPrefix() != "":
				rp.Path = m.GetPathSeparatedPrefix()
			}
			out = append(out, rp)
		}
	}
	return out, true
}
