package sdk

import (
	"sync"
)

// A route is what a server's rules tell requests apart by: the host, the
// method and the path, with the segments that look like identifiers
// (/orders/1234, /users/3f2a…) taken as one template (/orders/{}), since
// a rule that limits one order limits them all. It is kept as a 64-bit
// FNV-1a hash: building the template as a string would allocate on every
// request, and a collision (two routes sharing what was learned about
// their policies) can only make a request wait for a cool-down that is not
// its own, never send one that should wait.
type routeKey uint64

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

func fnvByte(h uint64, c byte) uint64 {
	h ^= uint64(c)
	return h * fnvPrime
}

// routeOf returns the key of a request to the host whose id is host.
func routeOf(host uint64, method, path string) routeKey {
	h := uint64(fnvOffset)
	for i := 0; i < 8; i++ {
		h = fnvByte(h, byte(host>>(8*i)))
	}
	if method == "" {
		method = "GET"
	}
	h = fnvString(h, method)
	h = fnvByte(h, ' ')
	if path == "" {
		path = "/"
	}
	for i := 0; i < len(path); {
		j := i
		for j < len(path) && path[j] != '/' {
			j++
		}
		if seg := path[i:j]; identifier(seg) {
			h = fnvByte(h, 0) // the template's {} (a 0 byte in a path is all but unheard of)
		} else {
			h = fnvString(h, seg)
		}
		if j < len(path) {
			h = fnvByte(h, '/')
		}
		i = j + 1
	}
	return routeKey(h)
}

// identifier reports whether a path segment looks like an identifier
// rather than a name a rule could match on: all digits (1234), 8 or more
// hexadecimal digits and dashes with at least one digit (UUIDs, hashes),
// or 16 or more letters, digits, '_' and '-' with at least one digit
// (cus_J8fKD9dLkd0x, opaque tokens).
func identifier(s string) bool {
	if s == "" {
		return false
	}
	digits, hex, word := 0, true, true
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == '-':
		case c >= 'g' && c <= 'z' || c >= 'G' && c <= 'Z' || c == '_':
			hex = false
		default:
			return false
		}
	}
	switch {
	case digits == len(s):
		return true
	case digits == 0:
		return false
	case hex && len(s) >= 8:
		return true
	}
	return word && len(s) >= 16
}

// maxRoutePolicies is how many policies one route remembers: a request can
// be limited by several rules (one per route and one for the whole API),
// and a server names only the most constrained in each answer.
const maxRoutePolicies = 4

// route is what a Transport learned about the requests of one route: the
// views of the policies the server named in its answers to them. A route
// with no policy is known to be limited by none of them (its answers named
// none), which matters once the host has shown a policy.
type route struct {
	n     uint8
	views [maxRoutePolicies]*view
}

// has reports whether v is among the route's policies.
func (r *route) has(v *view) bool {
	for _, x := range r.views[:r.n] {
		if x == v {
			return true
		}
	}
	return false
}

// routeShards and maxRoutes bound the memory a Transport spends on routes,
// whatever the number of paths a partner calls: 8192 routes of about 64
// bytes each. Past the bound, a random route is forgotten; it costs at
// most one request sent during its policy's cool-down to learn it again.
const (
	routeShards = 16
	maxRoutes   = 8192
)

// routes is a Transport's table of learned routes, sharded so that
// concurrent requests rarely wait on each other's lookups.
type routes struct {
	shards [routeShards]routeShard
}

type routeShard struct {
	mu sync.Mutex
	m  map[routeKey]route
}

func (rs *routes) shard(k routeKey) *routeShard {
	return &rs.shards[uint64(k)>>60] // the hash's top bits
}

// get returns what is known of route k.
func (rs *routes) get(k routeKey) (route, bool) {
	s := rs.shard(k)
	s.mu.Lock()
	r, ok := s.m[k]
	s.mu.Unlock()
	return r, ok
}

// learn records that the answer to a request of route k named the policy
// whose view is v (nil: the answer named none). A route remembers the
// latest maxRoutePolicies policies; a view that a host has replaced (see
// host.policy) is replaced first.
func (rs *routes) learn(k routeKey, v *view) {
	s := rs.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.m[k]
	if ok && (v == nil || r.has(v)) {
		return
	}
	if !ok {
		if s.m == nil {
			s.m = make(map[routeKey]route)
		}
		if len(s.m) >= maxRoutes/routeShards {
			for old := range s.m { // map order is random: a random victim
				delete(s.m, old)
				break
			}
		}
	}
	if v != nil {
		i := int(r.n)
		if i == maxRoutePolicies {
			// Replace a retired view (its policy was forgotten), else the
			// oldest.
			i = 0
			for j, x := range r.views {
				if x.isRetired() {
					i = j
					break
				}
			}
			copy(r.views[i:], r.views[i+1:])
			i = maxRoutePolicies - 1
		} else {
			r.n++
		}
		r.views[i] = v
	}
	s.m[k] = r
}
