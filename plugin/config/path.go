package config

import (
	"bytes"
	"strings"
)

// CleanPath returns the path part of a request's :path (without the query)
// in the form rules match and key on, whatever the HTTP connection
// manager's path settings: percent-encoded unreserved characters decoded
// and the remaining escapes' hex digits upper-cased (RFC 3986 6.2.2.1-2),
// encoded slashes (%2F) and backslashes (%5C, \) taken as slashes, dot
// segments removed (RFC 3986 5.2.4, 6.2.2.3) and runs of slashes merged
// into one, and path parameters (";x" at a segment's end, which servlet
// containers such as Tomcat and Jetty drop, taking "/..;/" for "/../")
// removed. The slashes go further than Envoy's normalize_path (which
// keeps %2F unless path_with_escaped_slashes_action says otherwise):
// upstreams that decode them (and treat a backslash as a slash) are
// common, and for a limit, matching a request its upstream serves as
// /checkout matters more than telling "/a%2Fb" from "/a/b". Envoy forwards the path as received unless normalize_path and
// merge_slashes are set (neither is by default), and upstreams commonly
// decode and clean it: without this, "/%63heckout", "/./checkout",
// "/x/../checkout" or "//checkout" reach the upstream's /checkout while
// escaping a rule for /checkout (and each is a fresh budget for a rule
// keyed by path). A path that is already clean (the common case) is
// returned as is, without allocating; otherwise it is cleaned in *buf (a
// scratch buffer, reused) and returned as a new string.
func CleanPath(buf *[]byte, path string) string {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	if path == "" || path[0] != '/' ||
		(strings.IndexByte(path, '%') < 0 && strings.IndexByte(path, '\\') < 0 &&
			strings.IndexByte(path, ';') < 0 &&
			!slashThen(path)) {
		return path
	}
	b := unescapePath((*buf)[:0], path)
	*buf = b
	return string(b[:removeDotSegments(b)])
}

// unescapePath appends path to b with its percent-encoding normalized and
// its encoded and literal backslashes and encoded slashes made slashes:
// first, so that "%2e" is a dot segment and "%2F" a separator.
func unescapePath(b []byte, path string) []byte {
	for i := 0; i < len(path); i++ {
		c := path[i]
		if c == '%' && i+2 < len(path) && isHex(path[i+1]) && isHex(path[i+2]) {
			d := unhex(path[i+1])<<4 | unhex(path[i+2])
			if isUnreserved(d) {
				b = append(b, d)
			} else if d == '/' || d == '\\' {
				b = append(b, '/')
			} else {
				b = append(b, '%', upper(path[i+1]), upper(path[i+2]))
			}
			i += 2
			continue
		}
		switch c {
		case '\\':
			c = '/'
		case '%':
			// Not an escape: a literal '%', written as one ("%25"), or
			// decoding what follows could make one ("%7%30" is "%70"
			// after one pass, "p" after two): cleaning twice must give
			// what cleaning once did.
			b = append(b, "%25"...)
			continue
		}
		b = append(b, c)
	}
	return b
}

// removeDotSegments removes the dot segments and empty segments of the
// path b (which starts with '/') in place, and returns its new length:
// every segment is copied to where it is or further left.
func removeDotSegments(b []byte) int {
	out := 1 // b[0] == '/'
	for in := 1; in <= len(b); {
		end := in
		for end < len(b) && b[end] != '/' {
			end++
		}
		seg := b[in:end]
		if k := bytes.IndexByte(seg, ';'); k >= 0 {
			// Path parameters: servlet containers (Tomcat, Jetty) drop
			// them before routing, and take "..;x" for "..".
			seg = seg[:k]
		}
		last := end >= len(b)
		switch {
		case len(seg) == 0:
			// An empty segment: a merged slash (or the end).
		case len(seg) == 1 && seg[0] == '.':
		case len(seg) == 2 && seg[0] == '.' && seg[1] == '.':
			// Remove the previous segment: out is just after its slash.
			if out > 1 {
				out-- // its slash
				for out > 1 && b[out-1] != '/' {
					out--
				}
			}
		default:
			out += copy(b[out:], seg)
			if !last {
				b[out] = '/'
				out++
			}
		}
		in = end + 1
	}
	return out
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

func upper(c byte) byte {
	if 'a' <= c && c <= 'f' {
		return c - 'a' + 'A'
	}
	return c
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// slashThen reports whether path holds "//" or "/.": strings.Contains of
// each, in one pass and without the standard library's substring search
// (about 4 KB of module).
func slashThen(path string) bool {
	for i := 0; i+1 < len(path); i++ {
		if path[i] == '/' && (path[i+1] == '/' || path[i+1] == '.') {
			return true
		}
	}
	return false
}
