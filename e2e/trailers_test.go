package e2e_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// grpcUpstream answers gRPC-like calls over h2c: it notes when each call's
// headers arrived and the trailer x-req-trailer it read after the body, and
// answers a body with trailers (grpc-status 0).
type grpcUpstream struct {
	addr  string
	mu    sync.Mutex
	calls []grpcCall
	// gate, if set, holds each answer until it closes (entered is told
	// first); tokens, if set, is the answer's x-tokens-used.
	gate    chan struct{}
	entered chan struct{}
	tokens  string
}

type grpcCall struct {
	at      time.Time
	body    int
	trailer string
}

func startGRPCUpstream(t *testing.T) *grpcUpstream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &grpcUpstream{addr: ln.Addr().String()}
	srv := &http.Server{Handler: u, ReadHeaderTimeout: 10 * time.Second, Protocols: new(http.Protocols)}
	srv.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return u
}

func (u *grpcUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := grpcCall{at: time.Now()}
	n, _ := io.Copy(io.Discard, r.Body)
	c.body, c.trailer = int(n), r.Trailer.Get("X-Req-Trailer")
	u.mu.Lock()
	u.calls = append(u.calls, c)
	u.mu.Unlock()
	if u.gate != nil {
		u.entered <- struct{}{}
		<-u.gate
	}
	w.Header().Set("Content-Type", "application/grpc")
	if u.tokens != "" {
		w.Header().Set("X-Tokens-Used", u.tokens)
	}
	w.Header().Set("Trailer", "Grpc-Status")
	_, _ = w.Write([]byte("\x00\x00\x00\x00\x02ok"))
	w.Header().Set("Grpc-Status", "0")
}

// TestTrailersHeld: gRPC calls over HTTP/2 (a body, then trailers, both
// ways) to a rule of 1 per second with max_delay, two at once: the second
// is held whole, its headers reaching the upstream about 1 s after the
// first's (its trailers, which Envoy hands on to a filter that stopped
// only its headers or body, do not release it early), with its body and
// trailers; the response's trailers reach the client. With and without
// allow_on_headers_stop_iteration.
func TestTrailersHeld(t *testing.T) {
	for _, allow := range []bool{false, true} {
		name := map[bool]string{false: "default", true: "allow_on_headers_stop_iteration"}[allow]
		t.Run(name, func(t *testing.T) {
			u := startGRPCUpstream(t)
			e := startSluice(t, 1, `{"rules":[{"name":"g","key":[],"limit":1,"window":"1s","max_delay":"5s"}]}`, func(o *envoytest.Options) {
				o.Clusters = map[string]string{"grpc": u.addr}
				o.HTTP2Clusters = []string{"grpc"}
				o.Routes = []envoytest.Route{{Name: "grpc", Cluster: "grpc"}}
				o.Wasm.AllowOnHeadersStopIteration = allow
			})
			c := h2cClient()
			var wg sync.WaitGroup
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					callWithTrailers(t, c, e.URL()+"/pkg.Svc/Call")
				}()
			}
			wg.Wait()
			u.mu.Lock()
			defer u.mu.Unlock()
			if len(u.calls) != 2 {
				t.Fatalf("the upstream got %d calls, want 2", len(u.calls))
			}
			for i, c := range u.calls {
				if c.body != 7 || c.trailer != "1" {
					t.Errorf("call %d reached the upstream with %d bytes of body and x-req-trailer %q; want 7 and 1", i, c.body, c.trailer)
				}
			}
			gap := u.calls[1].at.Sub(u.calls[0].at).Abs()
			t.Logf("the held call reached the upstream %v after the first", gap.Round(time.Millisecond))
			if gap < 800*time.Millisecond {
				t.Errorf("the held call reached the upstream %v after the first; want about 1 s (released early)", gap)
			}
		})
	}
}

// callWithTrailers makes a gRPC-like call with a request trailer, and
// checks that it was answered with grpc-status 0 in the trailers.
func callWithTrailers(t *testing.T, c *http.Client, url string) {
	req, _ := http.NewRequestWithContext(t.Context(), "POST", url, bytes.NewReader([]byte("\x00\x00\x00\x00\x02hi")))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	req.Trailer = http.Header{"X-Req-Trailer": {"1"}}
	resp, err := c.Do(req)
	if err != nil {
		t.Error(err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Trailer.Get("Grpc-Status") != "0" {
		t.Errorf("call: %d, trailers %v; want 200 with grpc-status 0 in the trailers", resp.StatusCode, resp.Trailer)
	}
}

// TestTrailersHeldResponse: a gRPC response (a body, then trailers) that a
// global rule holds for its charge waits for the rate-limit service: with
// the service frozen once the call was admitted, the client gets the
// response only when the charge's call gives up (global.timeout, 1 s),
// trailers included, not when its trailers arrive. With and without
// allow_on_headers_stop_iteration.
func TestTrailersHeldResponse(t *testing.T) {
	_, rls := envoytest.FleetT(t, map[string]string{"sluice.yaml": shippedRLSConfig(t)})
	const cfg = `{"rules":[{"name":"tokens","scope":"global","key":[],"limit":100000,"window":"1h",
	  "cost":{"response_header":"x-tokens-used","max":1000}}],
	  "global":{"cluster":"ratelimit","timeout":"1s"}}`
	for _, allow := range []bool{false, true} {
		name := map[bool]string{false: "default", true: "allow_on_headers_stop_iteration"}[allow]
		t.Run(name, func(t *testing.T) {
			u := startGRPCUpstream(t)
			u.gate, u.entered, u.tokens = make(chan struct{}), make(chan struct{}, 1), "1000"
			e := startSluice(t, 1, cfg, func(o *envoytest.Options) {
				o.Clusters = map[string]string{"grpc": u.addr}
				o.HTTP2Clusters = []string{"grpc"}
				o.Routes = []envoytest.Route{{Name: "grpc", Cluster: "grpc"}}
				o.ExtraClustersYAML = shippedCluster(t, rls.GRPCAddr)
				o.Wasm.AllowOnHeadersStopIteration = allow
			})
			done := make(chan struct{})
			go func() {
				defer close(done)
				callWithTrailers(t, h2cClient(), e.URL()+"/pkg.Svc/Call")
			}()
			<-u.entered // admitted: the service answered its call
			if err := rls.Freeze(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = rls.Thaw() }()
			t0 := time.Now()
			close(u.gate)
			<-done
			d := time.Since(t0)
			t.Logf("the response reached the client %v after the upstream answered", d.Round(time.Millisecond))
			if d < 800*time.Millisecond {
				t.Errorf("a response held for its charge, the service frozen: at the client %v after the upstream's answer; want about 1 s (global.timeout)", d)
			}
		})
	}
}
