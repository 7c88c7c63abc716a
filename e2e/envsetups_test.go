package e2e_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// setupsConfig: one rule per scenario of TestEnvoySetups, each on its own
// path.
const setupsConfig = `{
  "rules": [
    {"name": "h2rate", "match": {"path_prefix": "/h2rate"}, "limit": 20, "window": "1h"},
    {"name": "h2conc", "match": {"path_prefix": "/h2conc"}, "key": ["path"], "algorithm": "concurrency", "limit": 5},
    {"name": "grpc", "match": {"path_prefix": "/sluice.test.Svc/"}, "limit": 2, "window": "1h"},
    {"name": "direct", "match": {"path_prefix": "/direct"}, "key": ["path"], "algorithm": "concurrency", "limit": 1},
    {"name": "dadapt", "match": {"path_prefix": "/direct"}, "key": ["path"], "algorithm": "adaptive_concurrency", "max_limit": 4},
    {"name": "off", "match": {"path_prefix": "/off"}, "limit": 1, "window": "1h"},
    {"name": "retry", "match": {"path_prefix": "/retry"}, "key": ["path"], "algorithm": "concurrency", "limit": 1},
    {"name": "ws", "match": {"path_prefix": "/ws"}, "key": ["path"], "algorithm": "concurrency", "limit": 1},
    {"name": "head", "match": {"path_prefix": "/head"}, "limit": 1, "window": "1h"},
    {"name": "upload", "match": {"path_prefix": "/upload"}, "limit": 1, "window": "1h"},
    {"name": "held", "match": {"path_prefix": "/held"}, "limit": 1, "window": "1s", "max_delay": "5s"},
    {"name": "shared", "match": {"path_prefix": "/shared"}, "key": ["path"], "limit": 3, "window": "1s"},
    {"name": "redir", "match": {"path_prefix": "/redir"}, "algorithm": "concurrency", "limit": 1},
    {"name": "redir-rate", "match": {"path_prefix": "/redir"}, "limit": 3, "window": "1h"},
    {"name": "spell", "match": {"path_prefix": "/spell"}, "key": ["path"], "limit": 2, "window": "1h"},
    {"name": "dup1", "match": {"path_prefix": "/dup1"}, "key": ["header:x-api-key"], "limit": 2, "window": "1h"},
    {"name": "dup2", "match": {"path_prefix": "/dup2"}, "key": ["header:x-api-key"], "limit": 2, "window": "1h"}
  ]
}`

// setupsConfig2 is the second listener's: the same rules in a smaller
// max_keys, so that every rule has another share (another layout, in
// which almost every key has another bucket) there.
var setupsConfig2 = strings.Replace(setupsConfig, `"rules": [`, `"max_keys": 320, "rules": [`, 1)

// auxUpstream serves the routes that need more than envoytest.Upstream:
// /retry fails every other request with 503 (the first attempt of each
// request, when requests come one at a time), /r429/up likewise with 429, /ws accepts a WebSocket
// upgrade and echoes what it reads until the client closes, /held answers
// the length of the body it read (and notes when it finished reading it,
// heldRead), /redir redirects to /redir/done, /credir
// to /credir/done, which says it cost 5 units (X-Units).
type auxUpstream struct {
	ln       net.Listener
	retries  atomic.Int64
	tooMany  atomic.Int64 // /r429/up: every other request 429
	wsOpen   atomic.Int64
	heldRead atomic.Int64 // UnixNano
}

func startAux(t *testing.T) *auxUpstream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &auxUpstream{ln: ln}
	srv := &http.Server{Handler: a, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return a
}

func (a *auxUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case strings.HasPrefix(r.URL.Path, "/retry"):
		if a.retries.Add(1)%2 == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		time.Sleep(300 * time.Millisecond)
		_, _ = io.WriteString(w, "ok\n")
	case r.URL.Path == "/r429/up":
		if a.tooMany.Add(1)%2 == 1 {
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	case r.URL.Path == "/held":
		n, _ := io.Copy(io.Discard, r.Body)
		a.heldRead.Store(time.Now().UnixNano())
		_, _ = io.WriteString(w, strconv.FormatInt(n, 10))
	case r.URL.Path == "/redir":
		w.Header().Set("Location", "http://"+r.Host+"/redir/done")
		w.WriteHeader(http.StatusFound)
	case r.URL.Path == "/credir":
		w.Header().Set("Location", "http://"+r.Host+"/credir/done")
		w.WriteHeader(http.StatusFound)
	case r.URL.Path == "/credir/done":
		w.Header().Set("X-Units", "5") // what the request cost
		_, _ = io.WriteString(w, "ok\n")
	case strings.HasPrefix(r.URL.Path, "/ws"):
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		a.wsOpen.Add(1)
		defer a.wsOpen.Add(-1)
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
			"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n")
		_ = rw.Flush()
		buf := make([]byte, 512)
		for {
			n, err := rw.Read(buf)
			if err != nil {
				return
			}
			if _, err := conn.Write(buf[:n]); err != nil {
				return
			}
		}
	default:
		_, _ = io.WriteString(w, "ok\n")
	}
}

// h2cClient returns a client that speaks HTTP/2 with prior knowledge over
// cleartext (h2c) on one connection for all its requests.
func h2cClient() *http.Client {
	return &http.Client{Transport: &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}}
}

// TestEnvoySetups runs Sluice in Envoy set-ups beyond the plain HTTP/1.1
// listener: HTTP/2 downstream (many streams on one connection, streams
// reset by the client), gRPC, routes that disable the filter, answer
// themselves or retry, WebSocket upgrades, HEAD and uploads refused, and two
// listeners that share the plugin.
func TestEnvoySetups(t *testing.T) {
	aux := startAux(t)
	port2, err := envoytest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	e := startSluice(t, 2, setupsConfig, func(o *envoytest.Options) {
		o.WebSocket = true
		o.SecondListenerPort = port2
		o.SecondListenerConfig = setupsConfig2
		o.Clusters = map[string]string{"aux": aux.ln.Addr().String()}
		o.Routes = []envoytest.Route{
			{Name: "direct", Prefix: "/direct", DirectResponse: 200, DirectBody: "direct\n"},
			{Name: "off", Prefix: "/off", NoWasm: true},
			{Name: "retry", Prefix: "/retry", Cluster: "aux", RetryOn: "5xx", NumRetries: 2},
			{Name: "ws", Prefix: "/ws", Cluster: "aux"},
			{Name: "held", Prefix: "/held", Cluster: "aux"},
			{Name: "redir", Prefix: "/redir", Cluster: "aux", InternalRedirect: true},
			{Name: "default", Prefix: "/"},
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url2 := "http://127.0.0.1:" + strconv.Itoa(port2)

	t.Run("h2_many_streams", func(t *testing.T) {
		// 60 streams at once on one HTTP/2 connection: exactly 20 admitted,
		// 40 refused with the contract's headers.
		c := h2cClient()
		var mu sync.Mutex
		status := map[int]int{}
		var bad []string
		var wg sync.WaitGroup
		for i := 0; i < 60; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequestWithContext(ctx, "GET", e.URL()+"/h2rate", nil)
				resp, err := c.Do(req)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					bad = append(bad, err.Error())
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				status[resp.StatusCode]++
				if resp.ProtoMajor != 2 {
					bad = append(bad, "not HTTP/2: "+resp.Proto)
				}
				if resp.StatusCode == 429 {
					if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); ra < 1 ||
						resp.Header.Get("X-Ratelimit-Limit") != "20" || resp.Header.Get("X-Ratelimit-Remaining") != "0" ||
						resp.Header.Get("Ratelimit-Policy") != `"h2rate";q=20;w=3600` ||
						!strings.HasPrefix(resp.Header.Get("Ratelimit"), `"h2rate";r=0;t=`) {
						bad = append(bad, fmt.Sprint("429 headers: ", resp.Header))
					}
				}
			}()
		}
		wg.Wait()
		if status[200] != 20 || status[429] != 40 || len(bad) > 0 {
			t.Errorf("60 streams on one connection: %v, want 20 x 200 and 40 x 429; %d bad: %.5q", status, len(bad), bad)
		}
	})

	t.Run("h2_reset_gives_slots_back", func(t *testing.T) {
		// 5 slots; 5 streams hold them at the slow upstream and are reset
		// by the client (RST_STREAM, the connection stays): the 5 slots are
		// free again for the next 5, on the same connection.
		e.Upstream.SetDelay(3 * time.Second)
		defer e.Upstream.SetDelay(0)
		c := h2cClient()
		for round := 0; round < 2; round++ {
			rctx, rcancel := context.WithCancel(ctx)
			errs := make(chan error, 6)
			for i := 0; i < 5; i++ {
				go func() {
					req, _ := http.NewRequestWithContext(rctx, "GET", e.URL()+"/h2conc", nil)
					resp, err := c.Do(req)
					if err == nil {
						resp.Body.Close()
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
					errs <- err
				}()
			}
			pollUntil(func() bool { return e.Upstream.InFlight().Now >= 5 })
			// The sixth is over the limit.
			req, _ := http.NewRequestWithContext(ctx, "GET", e.URL()+"/h2conc", nil)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 429 || resp.Header.Get("Ratelimit-Policy") != `"h2conc";q=5;qu="concurrent-requests"` {
				t.Errorf("round %d: the sixth stream got %d %v, want 429", round, resp.StatusCode, resp.Header)
			}
			rcancel() // RST_STREAM on the 5 streams
			for i := 0; i < 5; i++ {
				if err := <-errs; err == nil || !strings.Contains(err.Error(), "context canceled") {
					t.Errorf("round %d: a reset stream ended with %v", round, err)
				}
			}
			// Envoy resets the upstream requests too.
			pollUntil(func() bool { return e.Upstream.InFlight().Now == 0 })
		}
		e.Upstream.SetDelay(0)
		for i := 0; i < 5; i++ {
			req, _ := http.NewRequestWithContext(ctx, "GET", e.URL()+"/h2conc", nil)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("after the resets, request %d: %d, want 200", i, resp.StatusCode)
			}
		}
	})

	t.Run("grpc_refused", func(t *testing.T) {
		// A gRPC call over h2c: Envoy turns the plugin's 429 into a gRPC
		// trailers-only response; the limit headers must survive.
		c := h2cClient()
		var last *http.Response
		for i := 0; i < 3; i++ {
			req, _ := http.NewRequestWithContext(ctx, "POST", e.URL()+"/sluice.test.Svc/Call", strings.NewReader("\x00\x00\x00\x00\x00"))
			req.Header.Set("Content-Type", "application/grpc")
			req.Header.Set("TE", "trailers")
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if i < 2 && (resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != "") {
				t.Errorf("call %d: %d %v %q, want admitted", i, resp.StatusCode, resp.Header, body)
			}
			last = resp
		}
		h := last.Header
		if h.Get("Content-Type") != "application/grpc" || h.Get("Grpc-Status") == "" || h.Get("Grpc-Status") == "0" {
			t.Errorf("refused call: content-type %q grpc-status %q: want a gRPC error", h.Get("Content-Type"), h.Get("Grpc-Status"))
		}
		if ra, _ := strconv.Atoi(h.Get("Retry-After")); ra < 1 || h.Get("X-Ratelimit-Remaining") != "0" || !strings.HasPrefix(h.Get("Ratelimit"), `"grpc";r=0;t=`) {
			t.Errorf("refused call: limit headers missing: %v", h)
		}
		// gRPC's server pushback (gRFC A6), for a client's retry policy:
		// the wait itself, within Retry-After (which rounds it up).
		ra, _ := strconv.Atoi(h.Get("Retry-After"))
		if ms, err := strconv.Atoi(h.Get("Grpc-Retry-Pushback-Ms")); err != nil || ms < 1000 || ms > ra*1000 {
			t.Errorf("refused call: grpc-retry-pushback-ms %q, Retry-After %d: want 1000..%d ms", h.Get("Grpc-Retry-Pushback-Ms"), ra, ra*1000)
		}
		if h.Get("Grpc-Status") != "14" || !strings.Contains(h.Get("Grpc-Message"), "quota-exceeded") {
			t.Errorf("refused call: grpc-status %q grpc-message %q, want 14 (UNAVAILABLE, Envoy's mapping of 429) and the problem document, as docs/configuration.md says",
				h.Get("Grpc-Status"), h.Get("Grpc-Message"))
		}
	})

	t.Run("direct_response", func(t *testing.T) {
		// A route Envoy answers itself: the concurrency slot is given back
		// at each reply (limit 1, one after the other, all admitted), and
		// the adaptive rule on the same path learns nothing from Envoy's
		// own replies (checked at the end: the gauges flush once a second).
		for i := 0; i < 20; i++ {
			resp, body, err := e.Get(ctx, "/direct", nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 || body != "direct\n" {
				t.Errorf("request %d: %d %q, want the direct response", i, resp.StatusCode, body)
			}
		}
	})

	t.Run("filter_disabled_on_route", func(t *testing.T) {
		for i := 0; i < 3; i++ {
			resp, _, err := e.Get(ctx, "/off", nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 || resp.Header.Get("X-Ratelimit-Limit") != "" {
				t.Errorf("request %d on a route without the filter: %d %v", i, resp.StatusCode, resp.Header)
			}
		}
	})

	t.Run("retry_one_slot", func(t *testing.T) {
		// Limit 1: each request's first attempt gets 503, the retry 200
		// after 300 ms. A request retried holds one slot (a second request
		// meanwhile is refused), and gives it back once: the next is
		// admitted, three times in a row.
		for i := 0; i < 3; i++ {
			done := make(chan int, 1)
			go func() {
				resp, _, err := e.Get(ctx, "/retry", nil)
				if err != nil {
					done <- -1
					return
				}
				done <- resp.StatusCode
			}()
			// Once its first attempt has failed (the retry follows within
			// Envoy's backoff and takes 300 ms).
			pollUntil(func() bool { return aux.retries.Load() >= int64(2*i+1) })
			resp, _, err := e.Get(ctx, "/retry", nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 429 {
				t.Errorf("round %d: a second request during the retried one: %d, want 429", i, resp.StatusCode)
			}
			if s := <-done; s != 200 {
				t.Errorf("round %d: retried request: %d, want 200", i, s)
			}
		}
		if n := aux.retries.Load(); n != 6 {
			t.Errorf("the upstream saw %d attempts, want 6", n)
		}
	})

	t.Run("websocket_holds_slot", func(t *testing.T) {
		// Limit 1: an upgraded connection holds the slot while it lives
		// (a second upgrade is refused), and gives it back when it closes.
		for round := 0; round < 2; round++ {
			c1, status := wsDial(t, e.Port())
			if status != 101 {
				t.Fatalf("round %d: upgrade: %d", round, status)
			}
			if _, err := c1.Write([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4)
			_ = c1.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadFull(c1, buf); err != nil || string(buf) != "ping" {
				t.Errorf("round %d: echo %q %v", round, buf, err)
			}
			time.Sleep(200 * time.Millisecond)
			c2, status2 := wsDial(t, e.Port())
			c2.Close()
			if status2 != 429 {
				t.Errorf("round %d: a second upgrade while the first lives: %d, want 429", round, status2)
			}
			c1.Close()
			pollUntil(func() bool { return aux.wsOpen.Load() == 0 })
			time.Sleep(100 * time.Millisecond)
		}
	})

	t.Run("head_refused_without_body", func(t *testing.T) {
		for i, want := range []int{200, 429} {
			req, _ := http.NewRequestWithContext(ctx, "HEAD", e.URL()+"/head", nil)
			resp, err := e.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("HEAD %d: %d, want %d", i, resp.StatusCode, want)
			}
			if want == 429 && resp.Header.Get("Retry-After") == "" {
				t.Errorf("HEAD 429 without Retry-After: %v", resp.Header)
			}
		}
		// The connection is still usable: a raw HEAD 429 has no body.
		conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(e.Port()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "HEAD /head HTTP/1.1\r\nHost: x\r\n\r\nGET /h2rate-x HTTP/1.1\r\nHost: x\r\n\r\n")
		br := bufio.NewReader(conn)
		r1, err := http.ReadResponse(br, &http.Request{Method: "HEAD"})
		if err != nil {
			t.Fatal(err)
		}
		r1.Body.Close()
		r2, err := http.ReadResponse(br, &http.Request{Method: "GET"})
		if err != nil {
			t.Fatalf("the response after a HEAD 429: %v (a body was sent with the HEAD 429?)", err)
		}
		r2.Body.Close()
		if r1.StatusCode != 429 || r2.StatusCode == 0 {
			t.Errorf("HEAD then GET on one connection: %d, %d", r1.StatusCode, r2.StatusCode)
		}
	})

	t.Run("upload_refused", func(t *testing.T) {
		// A 1 MiB POST with Expect: 100-continue, then without: refused at
		// once, no hang.
		body := strings.Repeat("x", 1<<20)
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{ExpectContinueTimeout: 5 * time.Second}}
		for i, want := range []int{200, 429, 429} {
			req, _ := http.NewRequestWithContext(ctx, "POST", e.URL()+"/upload", strings.NewReader(body))
			if i < 2 {
				req.Header.Set("Expect", "100-continue")
			}
			start := time.Now()
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("POST %d: %v", i, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want || time.Since(start) > 3*time.Second {
				t.Errorf("POST %d: %d after %v, want %d at once", i, resp.StatusCode, time.Since(start), want)
			}
		}
	})

	t.Run("upload_held", func(t *testing.T) {
		// A 4 MiB POST held by max_delay (about 1 s): Envoy buffers its
		// body up to its limit and then stops reading (no 413), and the
		// whole body reaches the upstream when it is released.
		body := strings.Repeat("x", 4<<20)
		for i := 0; i < 2; i++ {
			start := time.Now()
			resp, got, err := e.Do(ctx, "POST", "/held", nil, []byte(body))
			if err != nil {
				t.Fatalf("POST %d: %v", i, err)
			}
			if resp.StatusCode != 200 || got != strconv.Itoa(len(body)) || (i == 1 && time.Since(start) < 500*time.Millisecond) {
				t.Errorf("POST %d: %d %.40q after %v, want 200 and the upstream read %d bytes (the second held about 1 s)", i, resp.StatusCode, got, time.Since(start), len(body))
			}
		}
	})

	t.Run("two_listeners_share_state", func(t *testing.T) {
		// The same plugin and vm_id on two listeners whose configurations
		// differ (another max_keys, so rule "shared" has another share of
		// it there, another layout): one budget
		// per key, 3 a second. Twice, the second time once the first
		// round's states have expired (their life is 2 s), when each
		// listener's configuration used to find its own expired state
		// and start a fresh one: a budget on each listener.
		for round := 0; round < 2; round++ {
			if round > 0 {
				time.Sleep(2200 * time.Millisecond)
			}
			for _, key := range []string{"/shared/a", "/shared/b", "/shared/c"} {
				admitted := 0
				var got []int
				for i := 0; i < 8; i++ {
					u := e.URL()
					if i%2 == 1 {
						u = url2
					}
					req, _ := http.NewRequestWithContext(ctx, "GET", u+key, nil)
					resp, err := e.Client().Do(req)
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
					got = append(got, resp.StatusCode)
					if resp.StatusCode == 200 {
						admitted++
					}
				}
				// Shared: 3, or 4 if a token refilled meanwhile (one per
				// 333 ms); a budget per listener: 6.
				if admitted > 4 || got[0] != 200 || got[1] != 200 || got[2] != 200 {
					t.Errorf("round %d, %s: 8 requests alternating between two listeners: %v, want 3 (at most 4) admitted in all", round, key, got)
				}
			}
		}
	})

	t.Run("internal_redirect", func(t *testing.T) {
		// Envoy follows the upstream's 302 itself: the filter chain runs
		// again for the new request, /redir/done, in the same rule and key
		// (limit 1): the first request's slot must be free by then. The
		// client's request is charged once by the rate rule of 3 per hour
		// (the redirect is decided without a charge): 3 pass, the 4th is
		// refused. A request that claims to be a redirect (the header Envoy
		// sets on one, which it strips from clients' requests) is charged.
		for i := 0; i < 4; i++ {
			h := http.Header{}
			if i == 3 {
				h.Set("X-Envoy-Original-Url", "http://127.0.0.1/redir")
			}
			resp, body, err := e.Get(ctx, "/redir", h)
			if err != nil {
				t.Fatal(err)
			}
			if i < 3 && (resp.StatusCode != 200 || body != "ok\n") {
				t.Errorf("request %d: %d %q, want the redirect followed", i, resp.StatusCode, body)
			}
			if i == 3 && resp.StatusCode != 429 {
				t.Errorf("the 4th request to a rule of 3: %d, want 429", resp.StatusCode)
			}
		}
	})

	t.Run("path_spellings", func(t *testing.T) {
		// Envoy's connection manager forwards the path as received unless
		// normalize_path and merge_slashes are set (neither is by
		// default), and the upstream decodes and cleans it (many decode
		// %2F too): every spelling of /spell is the rule's /spell, one
		// budget of 2.
		var got []string
		for _, p := range []string{"/spell", "/%73pell", "/%73%70ell?x=1", "//spell", "/./spell", "/x/../spell", "/%2e/spell", "/spell/..//spell", "/%2Fspell", "/x%2f..%2fspell"} {
			conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(e.Port()))
			if err != nil {
				t.Fatal(err)
			}
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", p)
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			conn.Close()
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			got = append(got, fmt.Sprintf("%s %d", p, resp.StatusCode))
		}
		want := "[/spell 200 /%73pell 200 /%73%70ell?x=1 429 //spell 429 /./spell 429 /x/../spell 429 /%2e/spell 429 /spell/..//spell 429 /%2Fspell 429 /x%2f..%2fspell 429]"
		if fmt.Sprint(got) != want {
			t.Errorf("spellings of /spell:\n got %v\nwant %s", got, want)
		}
	})

	t.Run("keyed_header_sent_twice", func(t *testing.T) {
		// Envoy hands the plugin only the first field of a header sent
		// twice, and forwards both: a client that sends a random
		// x-api-key before its real one must not get a fresh budget per
		// request. A repeated keyed header keys by the client IP (all
		// requests here come from 127.0.0.1): 2 admitted, then 429s.
		// Then the real key alone, from the spent address: a budget of its
		// own (the plugin did read the key from the header map).
		var got []int
		for i := 0; i < 8; i++ {
			conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(e.Port()))
			if err != nil {
				t.Fatal(err)
			}
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			keys := fmt.Sprintf("x-api-key: rand-%d\r\nX-Api-Key: real\r\n", i)
			if i >= 5 {
				keys = "X-API-KEY: real\r\n"
			}
			fmt.Fprintf(conn, "GET /dup1 HTTP/1.1\r\nHost: x\r\n%sConnection: close\r\n\r\n", keys)
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			conn.Close()
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, resp.StatusCode)
		}
		// HTTP/2: two fields of one name in a HEADERS frame.
		c := h2cClient()
		for i := 0; i < 4; i++ {
			req, _ := http.NewRequestWithContext(ctx, "GET", e.URL()+"/dup2", nil)
			req.Header["X-Api-Key"] = []string{fmt.Sprintf("rand-%d", i), "real"}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			got = append(got, resp.StatusCode)
		}
		if want := "[200 200 429 429 429 200 200 429 200 200 429 429]"; fmt.Sprint(got) != want {
			t.Errorf("HTTP/1.1: random then real x-api-key x5, real alone x3; HTTP/2: random then real x4: got %v, want %s", got, want)
		}
	})

	if us, err := e.Stat("wasmcustom.sluice.rule.dadapt.latency_us"); err != nil || us != 0 {
		t.Errorf("adaptive rule on a direct_response route learnt a latency of %d us (%v), want none", us, err)
	}

	if logs := e.Logs(); strings.Contains(logs, "panic") || strings.Contains(logs, "internal error") || strings.Contains(logs, "wasm trap") {
		t.Errorf("plugin failure in Envoy's log:\n%s", tail(logs, 40))
	}
}

// wsDial opens a WebSocket upgrade to /ws and returns the connection and
// the response's status.
func wsDial(t *testing.T, port int) (net.Conn, int) {
	t.Helper()
	conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 101 {
		resp.Body.Close()
		return conn, resp.StatusCode
	}
	_ = conn.SetDeadline(time.Time{})
	if br.Buffered() > 0 {
		t.Fatalf("unexpected bytes after the upgrade response")
	}
	return conn, resp.StatusCode
}
