package e2e_test

import (
	"context"
	"net"
	"net/http"
	"path"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// aspNetUpstream routes as ASP.NET Core does: the decoded path (Go's
// net/http decodes percent-encoded UTF-8, as Kestrel does), cleaned of dot
// segments and repeated slashes, each character upper-cased by Unicode's
// simple mapping (OrdinalIgnoreCase), then compared with its routes. It
// counts the requests its /login handler served, per method, and records
// the request-target of each as it arrived.
type aspNetUpstream struct {
	srv     *http.Server
	mu      sync.Mutex
	login   map[string]int
	targets []string
}

func startASPNetUpstream(t *testing.T) (*aspNetUpstream, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &aspNetUpstream{login: map[string]int{}}
	u.srv = &http.Server{Handler: u, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = u.srv.Serve(ln) }()
	t.Cleanup(func() { _ = u.srv.Close() })
	return u, ln.Addr().String()
}

func (u *aspNetUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := strings.Map(unicode.ToUpper, path.Clean(r.URL.Path))
	u.mu.Lock()
	u.targets = append(u.targets, r.RequestURI)
	if p == "/LOGIN" || strings.HasPrefix(p, "/LOGIN/") {
		u.login[r.Method]++
	}
	u.mu.Unlock()
	_, _ = w.Write([]byte("ok\n"))
}

func (u *aspNetUpstream) logins(method string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.login[method]
}

func (u *aspNetUpstream) saw(target string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, s := range u.targets {
		if s == target {
			return true
		}
	}
	return false
}

// matchConfig: three /login rules of 2 told apart by method (so one Envoy
// serves every case): GET ignores case, POST keeps case_sensitive at its
// default, PUT keys by path ignoring case on every path. One rule follows
// the Envoy route "checkout".
const matchConfig = `{
  "rules": [
    {"name": "login-ci", "match": {"path_prefix": "/login", "methods": ["GET"], "case_sensitive": false}, "limit": 2, "window": "1h"},
    {"name": "login-cs", "match": {"path_prefix": "/login", "methods": ["POST"]}, "limit": 2, "window": "1h"},
    {"name": "per-path", "match": {"methods": ["PUT"], "case_sensitive": false}, "key": ["path"], "limit": 2, "window": "1h"},
    {"name": "checkout-route", "match": {"route": ["checkout"], "methods": ["DELETE"]}, "limit": 2, "window": "1h"}
  ]
}`

// The spellings of /login an ASP.NET Core upstream serves from its login
// page, written out (not produced by the plugin's folding).
var loginSpellings = []string{"/login", "/LOGIN", "/Login", "/lOgIn/x", "/%4Cogin", "//LOGIN", "/log%C4%B1n"}

func TestMatchCaseInsensitiveAndRoute(t *testing.T) {
	up, addr := startASPNetUpstream(t)
	e := startSluice(t, 2, matchConfig, func(o *envoytest.Options) {
		o.Upstream = addr
		o.Routes = []envoytest.Route{{Name: "checkout", Prefix: "/checkout"}, {Name: "default", Prefix: "/"}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	send := func(method, p string) int {
		t.Helper()
		resp, _, err := e.Do(ctx, method, p, nil, nil)
		if err != nil {
			t.Fatalf("%s %s: %v", method, p, err)
		}
		return resp.StatusCode
	}

	t.Run("case_sensitive_false", func(t *testing.T) {
		for _, p := range loginSpellings {
			send("GET", p)
		}
		if got := up.logins("GET"); got != 2 {
			t.Errorf("the login handler served %d of the %d spellings, want 2 (the rule's limit)", got, len(loginSpellings))
		}
		if st := send("GET", "/logout"); st != 200 {
			t.Errorf("/logout: %d, the /login rule must not match it", st)
		}
	})

	t.Run("case_sensitive_true", func(t *testing.T) {
		for _, p := range loginSpellings {
			if st := send("POST", p); st != 200 {
				t.Errorf("POST %s: %d, want it let through (only /login itself matches)", p, st)
			}
			if !up.saw(p) {
				t.Errorf("the upstream never saw %q as written", p)
			}
		}
		if got := up.logins("POST"); got != len(loginSpellings) {
			t.Errorf("the login handler served %d, want all %d spellings", got, len(loginSpellings))
		}
		// The rule itself holds /login as written: one more is its 2nd, then refused.
		if a, b := send("POST", "/login"), send("POST", "/login"); a != 200 || b != 429 {
			t.Errorf("POST /login twice more: %d, %d, want 200 then 429", a, b)
		}
	})

	t.Run("path_key_case_sensitive_false", func(t *testing.T) {
		exact := []string{"/login", "/LOGIN", "/Login", "/%4Cogin", "//LOGIN", "/log%C4%B1n"}
		for _, p := range exact {
			send("PUT", p)
		}
		if got := up.logins("PUT"); got != 2 {
			t.Errorf("the spellings of /login got %d through a path-keyed rule of 2, want one budget", got)
		}
		// Another path has its own budget, whatever its spelling.
		if a, b, c := send("PUT", "/lOgIn/x"), send("PUT", "/LOGIN/X"), send("PUT", "/login/x"); a != 200 || b != 200 || c != 429 {
			t.Errorf("/login/x: %d %d %d, want 200 200 429", a, b, c)
		}
	})

	t.Run("route", func(t *testing.T) {
		var got []int
		for i := 0; i < 3; i++ {
			got = append(got, send("DELETE", "/checkout/cart"))
		}
		if got[0] != 200 || got[1] != 200 || got[2] != 429 {
			t.Errorf("route checkout: %v, want 200 200 429", got)
		}
		// Another Envoy route (default), even for a path a prefix rule on
		// /checkout would match in another case: not limited.
		for _, p := range []string{"/other", "/other", "/other", "/CHECKOUT/cart"} {
			if st := send("DELETE", p); st != 200 {
				t.Errorf("DELETE %s (route default): %d, want 200", p, st)
			}
		}
	})
}
