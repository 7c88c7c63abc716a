package e2e_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// costConfig: the rule field cost on each of its uses, one path each.
// Clients are told apart by X-Forwarded-For (one trusted proxy in front) or
// by an API key.
const costConfig = `{
  "rules": [
    {"name": "login_failures", "match": {"path_prefix": "/login", "methods": ["POST"]},
     "limit": 3, "window": "15m", "cost": {"on_status": [401, 403]}},
    {"name": "llm_tokens", "match": {"path_prefix": "/llm"}, "key": ["header:x-api-key"],
     "limit": 1000, "window": "1m", "cost": {"response_header": "x-tokens-used", "max": 100000}},
    {"name": "exports", "match": {"path_prefix": "/export"}, "key": ["header:x-api-key"],
     "limit": 10, "window": "1h", "cost": {"request_header": "x-cost"}},
    {"name": "bulk", "match": {"path_prefix": "/bulk"}, "key": ["header:x-api-key"], "algorithm": "fixed_window",
     "limit": 1000000, "window": "24h", "cost": {"response_header": "x-tokens-used", "max": 1000}},
    {"name": "login_fast", "match": {"path_prefix": "/fastlogin", "methods": ["POST"]},
     "limit": 2, "window": "2s", "cost": {"on_status": [401]}},
    {"name": "unreached", "match": {"path_prefix": "/reset"}, "limit": 2, "window": "1h",
     "cost": {"response_header": "x-tokens-used"}}
  ],
  "client_ip": {"xff_trusted_hops": 2}
}`

// tokenUpstream is the backend of the cost tests: /login answers 401
// unless X-Password is "right"; every other path reports the tokens it
// "used" (the request's X-Want-Tokens) in X-Tokens-Used and adds them to
// reported; /reset closes the connection before answering (Envoy then
// answers 503 itself) unless the query says ok.
type tokenUpstream struct {
	srv      *http.Server
	addr     string
	reported atomic.Int64
}

func startTokenUpstream(t *testing.T) *tokenUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &tokenUpstream{addr: ln.Addr().String()}
	u.srv = &http.Server{Handler: http.HandlerFunc(u.serve)}
	go u.srv.Serve(ln)
	t.Cleanup(func() { u.srv.Close() })
	return u
}

func (u *tokenUpstream) serve(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/login" || r.URL.Path == "/fastlogin":
		if r.Header.Get("X-Password") != "right" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
	case r.URL.Path == "/reset" && r.URL.RawQuery != "ok":
		if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
			c.Close()
		}
		return
	default:
		if s := r.Header.Get("X-Want-Tokens"); s != "" {
			n, _ := strconv.Atoi(s)
			u.reported.Add(int64(n))
			w.Header().Set("X-Tokens-Used", s)
		}
	}
	w.Write([]byte("ok\n"))
}

func TestCost(t *testing.T) {
	up := startTokenUpstream(t)
	e := startSluice(t, 2, costConfig, func(o *envoytest.Options) { o.Upstream = up.addr })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	do := func(method, path string, kv ...string) *http.Response {
		t.Helper()
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		resp, _, err := e.Do(ctx, method, path, h, nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	t.Run("login_failures", func(t *testing.T) { testCostLogin(t, do) })
	t.Run("login_refill", func(t *testing.T) { testCostLoginRefill(t, do) })
	t.Run("llm_tokens", func(t *testing.T) { testCostTokens(t, do) })
	t.Run("request_header", func(t *testing.T) { testCostRequestHeader(t, do) })
	t.Run("not_reached", func(t *testing.T) { testCostUnreached(t, e, do) })
	t.Run("concurrent", func(t *testing.T) { testCostConcurrent(t, ctx, e, up, do) })
}

type doFunc func(method, path string, kv ...string) *http.Response

// Correct logins never count; 3 failures pass, then the client is refused,
// a correct login too, until refill; another client is unaffected.
func testCostLogin(t *testing.T, do doFunc) {
	a, b := "203.0.113.7", "203.0.113.8"
	for i := 0; i < 10; i++ {
		if r := do("POST", "/login", "X-Forwarded-For", a, "X-Password", "right"); r.StatusCode != 200 || r.Header.Get("X-RateLimit-Remaining") != "3" {
			t.Fatalf("correct login %d: %d remaining %q, want 200 and 3", i, r.StatusCode, r.Header.Get("X-RateLimit-Remaining"))
		}
	}
	for i := 0; i < 3; i++ {
		r := do("POST", "/login", "X-Forwarded-For", a, "X-Password", "wrong")
		if r.StatusCode != 401 || r.Header.Get("X-RateLimit-Remaining") != strconv.Itoa(2-i) {
			t.Fatalf("wrong login %d: %d remaining %q, want 401 and %d", i, r.StatusCode, r.Header.Get("X-RateLimit-Remaining"), 2-i)
		}
	}
	for _, pw := range []string{"wrong", "right"} {
		r := do("POST", "/login", "X-Forwarded-For", a, "X-Password", pw)
		ra, _ := strconv.Atoi(r.Header.Get("Retry-After"))
		// One failure of 3 per 15m comes back after 5 minutes.
		if r.StatusCode != 429 || ra < 299 || ra > 300 {
			t.Fatalf("%s login after 3 failures: %d Retry-After %q, want 429 and 300", pw, r.StatusCode, r.Header.Get("Retry-After"))
		}
	}
	if r := do("POST", "/login", "X-Forwarded-For", b, "X-Password", "wrong"); r.StatusCode != 401 {
		t.Fatalf("another client: %d, want 401 (passed)", r.StatusCode)
	}
	if r := do("POST", "/login", "X-Forwarded-For", b, "X-Password", "right"); r.StatusCode != 200 || r.Header.Get("X-RateLimit-Remaining") != "2" {
		t.Fatalf("another client: %d remaining %q, want 200 and 2", r.StatusCode, r.Header.Get("X-RateLimit-Remaining"))
	}
}

// 400-token answers on a budget of 1,000 tokens a minute: 3 pass, the 4th
// is refused with a Retry-After that covers the debt of 200 tokens (60ms
// each) and the token the next request needs.
func testCostTokens(t *testing.T, do doFunc) {
	var last *http.Response
	admitted := 0
	for i := 0; i < 5; i++ {
		last = do("POST", "/llm/chat", "X-Api-Key", "k1", "X-Want-Tokens", "400")
		if last.StatusCode != 200 {
			break
		}
		admitted++
		if want := strconv.Itoa(max(1000-400*admitted, 0)); last.Header.Get("X-RateLimit-Remaining") != want {
			t.Errorf("after %d answers Remaining %q, want %s", admitted, last.Header.Get("X-RateLimit-Remaining"), want)
		}
	}
	if admitted != 3 || last.StatusCode != 429 {
		t.Fatalf("admitted %d then %d, want 3 then 429", admitted, last.StatusCode)
	}
	ra, _ := strconv.Atoi(last.Header.Get("Retry-After"))
	if ra != 13 {
		t.Fatalf("Retry-After %q, want 13 (a debt of 200 tokens at 60ms each, and one token)", last.Header.Get("Retry-After"))
	}
	t.Logf("llm_tokens: 3 answers of 400 tokens admitted, then 429 Retry-After %ds; RateLimit %q", ra, last.Header.Get("RateLimit"))
	if r := do("POST", "/llm/chat", "X-Api-Key", "k2", "X-Want-Tokens", "400"); r.StatusCode != 200 {
		t.Fatalf("another key: %d", r.StatusCode)
	}
}

// Declared costs at admission: 4 on a budget of 10 admits twice; a garbled
// cost counts 1.
func testCostRequestHeader(t *testing.T, do doFunc) {
	var got []int
	for _, c := range []string{"4", "4", "4"} {
		got = append(got, do("GET", "/export", "X-Api-Key", "e1", "X-Cost", c).StatusCode)
	}
	if fmt.Sprint(got) != "[200 200 429]" {
		t.Fatalf("cost 4 on 10: %v, want [200 200 429]", got)
	}
	got = got[:0]
	for _, c := range []string{"4", "4", "lots", "-1", "1"} {
		got = append(got, do("GET", "/export", "X-Api-Key", "e2", "X-Cost", c).StatusCode)
	}
	if fmt.Sprint(got) != "[200 200 200 200 429]" {
		t.Fatalf("4, 4, garbled, garbled, 1 on 10: %v, want [200 200 200 200 429] (a garbled cost is 1)", got)
	}
}

// Responses Envoy makes itself (the upstream reset the connection) are not
// charged: after 5 of them the budget of 2 is whole.
func testCostUnreached(t *testing.T, e *envoytest.Envoy, do doFunc) {
	for i := 0; i < 5; i++ {
		if r := do("GET", "/reset", "X-Forwarded-For", "203.0.113.20", "X-Want-Tokens", "1"); r.StatusCode != 503 {
			t.Fatalf("reset %d: %d, want Envoy's 503", i, r.StatusCode)
		}
	}
	var got []int
	for i := 0; i < 3; i++ {
		got = append(got, do("GET", "/reset?ok", "X-Forwarded-For", "203.0.113.20", "X-Want-Tokens", "1").StatusCode)
	}
	if fmt.Sprint(got) != "[200 200 429]" {
		t.Fatalf("after 5 local replies: %v, want [200 200 429] (local replies charged nothing)", got)
	}
	waitStat(t, e, "wasmcustom.sluice.rule.unreached.charged", 2)
}

// 50 concurrent requests on a response-charged rule: the charges add up
// to exactly what the upstream reported, read from the metric and from the
// balance a last response reports.
func testCostConcurrent(t *testing.T, ctx context.Context, e *envoytest.Envoy, up *tokenUpstream, do doFunc) {
	// The bulk rule's 24h fixed window restarts at midnight UTC: a test
	// that straddles it would see a fresh balance.
	if left := time.Until(time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)); left < time.Minute {
		t.Logf("waiting %v for the fixed window to restart at midnight UTC", left.Round(time.Second))
		time.Sleep(left + time.Second)
	}
	before := up.reported.Load()
	var wg sync.WaitGroup
	var fails atomic.Int32
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := http.Header{"X-Api-Key": {"bulk"}, "X-Want-Tokens": {strconv.Itoa(i*37%100 + 1)}}
			resp, _, err := e.Do(ctx, "POST", "/bulk", h, nil)
			if err != nil || resp.StatusCode != 200 {
				fails.Add(1)
			}
		}()
	}
	wg.Wait()
	if fails.Load() > 0 {
		t.Fatalf("%d of 50 requests failed", fails.Load())
	}
	sum := up.reported.Load() - before
	waitStat(t, e, "wasmcustom.sluice.rule.bulk.charged", uint64(sum))
	r := do("POST", "/bulk", "X-Api-Key", "bulk", "X-Want-Tokens", "1")
	if want := strconv.FormatInt(1000000-sum-1, 10); r.Header.Get("X-RateLimit-Remaining") != want {
		t.Fatalf("balance after 50 concurrent answers reporting %d tokens and one of 1: %q, want %s", sum, r.Header.Get("X-RateLimit-Remaining"), want)
	}
	t.Logf("50 concurrent answers reported %d tokens; charged %d", sum, sum)
}

// TestCostExample runs examples/cost (Envoy as a process, whatever
// SLUICE_ENVOY says: the example starts its own) and checks its story:
// mallory is refused after 5 failures, a correct login of hers too, alice
// never; team-a is refused once its tokens are spent, team-b is not.
func TestCostExample(t *testing.T) {
	envoytest.RequireEnvoy(t)
	sluiceWasm(t)
	root := mustRepoRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "./examples/cost")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go run ./examples/cost: %v\n%s", err, out)
	}
	count := func(who, status string) int {
		n := 0
		for _, l := range strings.Split(string(out), "\n") {
			f := strings.Fields(l)
			if len(f) >= 3 && f[0] == who && f[2] == status {
				n++
			}
		}
		return n
	}
	for _, c := range []struct {
		who, status string
		want        int
	}{{"alice", "200", 11}, {"alice", "429", 0}, {"mallory", "401", 5}, {"mallory", "429", 3}, {"team-a", "429", 1}, {"team-b", "200", 1}} {
		if got := count(c.who, c.status); got != c.want {
			t.Errorf("%s got %d responses %s, want %d\n%s", c.who, got, c.status, c.want, out)
		}
	}
	if count("team-a", "200") < 2 {
		t.Errorf("team-a admitted fewer than 2 prompts\n%s", out)
	}
}

// Refill pays the failures back: refused (a correct login too) until
// Retry-After, then a correct login passes.
func testCostLoginRefill(t *testing.T, do doFunc) {
	ip := "203.0.113.30"
	for i := 0; i < 2; i++ {
		if r := do("POST", "/fastlogin", "X-Forwarded-For", ip, "X-Password", "wrong"); r.StatusCode != 401 {
			t.Fatalf("failure %d: %d, want 401", i, r.StatusCode)
		}
	}
	r := do("POST", "/fastlogin", "X-Forwarded-For", ip, "X-Password", "right")
	ra, _ := strconv.Atoi(r.Header.Get("Retry-After"))
	if r.StatusCode != 429 || ra < 1 || ra > 2 {
		t.Fatalf("correct login after 2 failures: %d Retry-After %q, want 429 and 1", r.StatusCode, r.Header.Get("Retry-After"))
	}
	time.Sleep(time.Duration(ra) * time.Second)
	if r := do("POST", "/fastlogin", "X-Forwarded-For", ip, "X-Password", "right"); r.StatusCode != 200 {
		t.Fatalf("correct login after Retry-After: %d, want 200", r.StatusCode)
	}
}
