//go:build go1.25

package sdk

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// The contract's signatures, checked by the compiler.
var (
	_ func(http.RoundTripper, ...Option) *Transport  = NewTransport
	_ func(...Option) *http.Client                   = NewClient
	_ func(int) Option                               = WithMaxAttempts
	_ func(time.Duration) Option                     = WithMaxWait
	_ func(func() backoff.BackOff) Option            = WithBackOff
	_ func(http.Header, time.Time) (RateLimit, bool) = ParseRateLimit
	_ func(*http.Response) error                     = CheckResponse
	_ http.RoundTripper                              = (*Transport)(nil)
	_                                                = RateLimit{Limit: 1, Remaining: 1, Reset: 1, RetryAfter: 1, Policy: ""}
)

func TestNewClientAndDefaults(t *testing.T) {
	c := NewClient()
	tr, ok := c.Transport.(*Transport)
	if !ok {
		t.Fatalf("NewClient().Transport is %T, want *Transport", c.Transport)
	}
	if tr.base != http.DefaultTransport {
		t.Errorf("nil base is %v, want http.DefaultTransport", tr.base)
	}
	if tr.cfg.maxAttempts != 4 || tr.cfg.maxWait != 60*time.Second || tr.cfg.logger != nil || tr.cfg.hook != nil {
		t.Errorf("defaults = %+v", tr.cfg)
	}
	var _ http.RoundTripper = tr
	if got := NewTransport(nil, WithMaxAttempts(0)).cfg.maxAttempts; got != 1 {
		t.Errorf("WithMaxAttempts(0) = %d attempts, want 1", got)
	}
	// The default backoff is exponential with jitter and a total bound.
	b, ok := tr.cfg.newBackOffs()[throttleRetry].(*backoff.ExponentialBackOff)
	if !ok || b.RandomizationFactor == 0 || b.MaxElapsedTime != DefaultMaxElapsed {
		t.Errorf("default backoff = %#v", b)
	}
}

// TestRetryAfterSeconds: a 429 is retried, no sooner than Retry-After asks,
// with at most 10% jitter on top.
func TestRetryAfterSeconds(t *testing.T) {
	clk := newFakeClock()
	s := &scripted{steps: repeat(2, reply(429, "Retry-After", "3"))}
	srv := serve(t, s)
	c := &http.Client{Transport: NewTransport(nil, WithClock(clk))}
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || readBody(t, resp) != "ok 3\n" {
		t.Fatalf("got %d, want 200 after 3 attempts", resp.StatusCode)
	}
	sleeps := clk.Sleeps()
	if len(sleeps) != 2 {
		t.Fatalf("sleeps = %v, want 2", sleeps)
	}
	for _, d := range sleeps {
		if d < 3*time.Second || d > 3300*time.Millisecond {
			t.Errorf("slept %v, want 3s..3.3s", d)
		}
	}
}

// TestRetryAfterHTTPDate covers the three HTTP-date forms, measured against
// the response's Date so that a server clock an hour off does not matter.
func TestRetryAfterHTTPDate(t *testing.T) {
	for _, layout := range []string{http.TimeFormat, time.RFC850, time.ANSIC} {
		for _, skew := range []time.Duration{0, time.Hour, -time.Hour} {
			t.Run(layout+"/"+skew.String(), func(t *testing.T) {
				clk := newFakeClock()
				server := clk.Now().Add(skew).UTC().Truncate(time.Second)
				s := &scripted{steps: []func(http.ResponseWriter){reply(429,
					"Date", server.Format(http.TimeFormat),
					"Retry-After", server.Add(7*time.Second).Format(layout))}}
				srv := serve(t, s)
				c := &http.Client{Transport: NewTransport(nil, WithClock(clk))}
				resp, err := c.Get(srv.URL)
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("got %v, %v", resp, err)
				}
				resp.Body.Close()
				if sl := clk.Sleeps(); len(sl) != 1 || sl[0] < 7*time.Second || sl[0] > 7700*time.Millisecond {
					t.Errorf("sleeps = %v, want one of 7s..7.7s", sl)
				}
			})
		}
	}
}

// TestEmulatedAPIs runs one client against each header dialect: it must
// read the wait from each, never come back early, and end with a 200.
func TestEmulatedAPIs(t *testing.T) {
	for _, st := range []style{sluiceStyle, legacyStyle, draftStyle, githubStyle, twitterStyle, dateStyle} {
		for _, skew := range []time.Duration{0, 37 * time.Minute, -2 * time.Hour} {
			if skew != 0 && st != githubStyle && st != twitterStyle && st != dateStyle {
				continue // only these dialects send points in time
			}
			t.Run(st.String()+"/skew="+skew.String(), func(t *testing.T) {
				clk := newFakeClock()
				a := &api{now: clk.Now, algo: &fixedWindow{limit: 3, window: time.Minute}, style: st, skew: skew}
				srv := serve(t, a)
				c := &http.Client{Transport: NewTransport(nil, WithClock(clk))}
				for i := 0; i < 7; i++ {
					resp, err := c.Get(srv.URL)
					if err != nil || resp.StatusCode != 200 {
						t.Fatalf("request %d: %v, %v", i, resp, err)
					}
					resp.Body.Close()
				}
				hits := a.Hits()
				// With Remaining in the headers, only the first rejection is
				// needed to learn the reset; Retry-After alone says nothing
				// until a request is rejected, once per window.
				allowed := 1
				if st == dateStyle {
					allowed = 2
				}
				if n := a.count(429); n > allowed {
					t.Errorf("%d rejections, want at most %d", n, allowed)
				}
				// 7 requests at 3 per minute need three windows: at least 2 minutes
				// since the first (aligned) window began.
				first := hits[0].at.Truncate(time.Minute)
				last := hits[len(hits)-1].at
				if last.Sub(first) < 2*time.Minute {
					t.Errorf("done after %v, sooner than the limit allows", last.Sub(first))
				}
				if last.Sub(first) > 2*time.Minute+20*time.Second {
					t.Errorf("done after %v: waited far longer than asked", last.Sub(first))
				}
			})
		}
	}
}

// TestGarbageHeaders: broken hints are ignored, the backoff decides, and
// nothing panics.
func TestGarbageHeaders(t *testing.T) {
	clk := newFakeClock()
	a := &api{now: clk.Now, algo: &fixedWindow{limit: 1, window: time.Hour}, style: garbageStyle}
	srv := serve(t, a)
	c := &http.Client{Transport: NewTransport(nil, WithClock(clk), WithBackOff(func() backoff.BackOff {
		return backoff.NewConstantBackOff(250 * time.Millisecond)
	}))}
	for i, want := range []int{200, 429} {
		resp, err := c.Get(srv.URL)
		if err != nil || resp.StatusCode != want {
			t.Fatalf("request %d: %v, %v; want %d", i, resp, err, want)
		}
		resp.Body.Close()
	}
	if sl := clk.Sleeps(); len(sl) != 3 || sl[0] != 250*time.Millisecond {
		t.Errorf("sleeps = %v, want 3 x 250ms from the backoff", sl)
	}
	if _, ok := ParseRateLimit(a.Hits()[0].header, time.Now()); ok {
		t.Error("request headers parsed as rate limits")
	}
}

// TestBackOffWithoutHint: a 503 with no hint waits what the BackOff says;
// Stop ends the retries at once.
func TestBackOffWithoutHint(t *testing.T) {
	clk := newFakeClock()
	s := &scripted{steps: repeat(2, reply(503))}
	srv := serve(t, s)
	c := &http.Client{Transport: NewTransport(nil, WithClock(clk), WithBackOff(func() backoff.BackOff {
		return backoff.NewConstantBackOff(time.Second)
	}))}
	resp, err := c.Get(srv.URL)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("got %v, %v", resp, err)
	}
	resp.Body.Close()
	if sl := clk.Sleeps(); len(sl) != 2 || sl[0] != time.Second || sl[1] != time.Second {
		t.Errorf("sleeps = %v", sl)
	}

	s2 := &scripted{steps: repeat(5, reply(429, "Retry-After", "1"))}
	srv2 := serve(t, s2)
	c2 := &http.Client{Transport: NewTransport(nil, WithClock(clk), WithBackOff(func() backoff.BackOff {
		return &backoff.StopBackOff{}
	}))}
	resp, err = c2.Get(srv2.URL)
	if err != nil || resp.StatusCode != 429 || len(s2.Hits()) != 1 {
		t.Fatalf("Stop: got %v, %v after %d attempts; want the 429 at once", resp, err, len(s2.Hits()))
	}
	resp.Body.Close()

	// The default exponential backoff: growing waits with jitter, from 50 ms
	// after a transient failure (a 503 without Retry-After) and from 1 s
	// after a throttle (a bare 429).
	for _, c := range []struct {
		status      int
		first, last time.Duration
	}{{503, 50 * time.Millisecond, 112500 * time.Microsecond}, {429, time.Second, 2250 * time.Millisecond}} {
		clk3 := newFakeClock()
		s3 := &scripted{steps: repeat(3, reply(c.status))}
		srv3 := serve(t, s3)
		resp, err = (&http.Client{Transport: NewTransport(nil, WithClock(clk3))}).Get(srv3.URL)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("default backoff: %v, %v", resp, err)
		}
		resp.Body.Close()
		sl := clk3.Sleeps()
		if len(sl) != 3 || sl[0] < c.first/2 || sl[0] > c.first*3/2 || sl[2] < c.last/2 || sl[2] > c.last*3/2 {
			t.Errorf("default backoff sleeps after %d = %v, want about %v, x1.5, %v ±50%%", c.status, sl, c.first, c.last)
		}
	}
}

// TestMaxWait: a server asking for more than MaxWait gets its response back
// at once; one asking for exactly MaxWait is waited for.
func TestMaxWait(t *testing.T) {
	clk := newFakeClock()
	s := &scripted{steps: []func(http.ResponseWriter){reply(429, "Retry-After", "3600")}}
	srv := serve(t, s)
	tr := NewTransport(nil, WithClock(clk))
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	if err != nil || resp.StatusCode != 429 {
		t.Fatalf("got %v, %v; want the 429", resp, err)
	}
	if body := readBody(t, resp); body != "status 429\n" {
		t.Errorf("body = %q, want it readable", body)
	}
	if len(s.Hits()) != 1 || len(clk.Sleeps()) != 0 {
		t.Errorf("%d attempts, sleeps %v; want 1 attempt and no wait", len(s.Hits()), clk.Sleeps())
	}
	var rle *RateLimitError
	if err := CheckResponse(resp); !errors.As(err, &rle) || rle.RetryAfter != time.Hour {
		t.Errorf("CheckResponse = %v", err)
	}

	// The other requests to the host are not sent into the hour-long block:
	// they fail at once with a *RateLimitError, and the server sees nothing.
	_, err = (&http.Client{Transport: tr}).Get(srv.URL + "/other")
	if !errors.As(err, &rle) || rle.StatusCode != 0 || rle.RetryAfter != time.Hour {
		t.Fatalf("second request: err = %v, want a *RateLimitError for the host", err)
	}
	if len(s.Hits()) != 1 {
		t.Errorf("server saw %d requests, want 1", len(s.Hits()))
	}

	clk2 := newFakeClock()
	s2 := &scripted{steps: []func(http.ResponseWriter){reply(429, "Retry-After", "10")}}
	srv2 := serve(t, s2)
	resp, err = (&http.Client{Transport: NewTransport(nil, WithClock(clk2), WithMaxWait(10*time.Second))}).Get(srv2.URL)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("Retry-After == MaxWait: got %v, %v", resp, err)
	}
	resp.Body.Close()
	if sl := clk2.Sleeps(); len(sl) != 1 || sl[0] != 10*time.Second {
		t.Errorf("sleeps = %v, want exactly 10s (jitter is cut to MaxWait)", sl)
	}
}

// TestContextDeadline: the Transport returns at once when the next attempt
// could not start before the deadline, and waits when it could. Through
// the real net/http client and server on an in-memory network, in a
// synctest bubble: the waits are on the fake clock, so the bubble's clock
// does not move at all, however busy the machine (a wait taken on the real
// clock would move it by 1 or 2 s).
func TestContextDeadline(t *testing.T) {
	cases := []struct {
		name      string
		step      func(http.ResponseWriter)
		backOff   time.Duration
		attempts  int
		wantSleep bool
	}{
		{"hint past deadline", reply(429, "Retry-After", "10"), time.Millisecond, 1, false},
		{"hint within deadline", reply(429, "Retry-After", "2"), time.Millisecond, 2, true},
		{"reset past deadline", reply(429, "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", "30"), time.Millisecond, 1, false},
		{"backoff past deadline", reply(503), 10 * time.Second, 1, false},
		{"backoff within deadline", reply(503), time.Second, 2, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				clk := newFakeClock()
				s := &scripted{steps: []func(http.ResponseWriter){tc.step}}
				srv, base := servePipe(t, s)
				var events []RetryEvent
				c := &http.Client{Transport: NewTransport(base, WithClock(clk),
					WithRetryHook(func(e RetryEvent) { events = append(events, e) }),
					WithBackOff(func() backoff.BackOff { return backoff.NewConstantBackOff(tc.backOff) }))}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
				start := time.Now()
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if d := time.Since(start); d != 0 {
					t.Errorf("took %v of the bubble's time, want none: every wait is on the fake clock", d)
				}
				if n := len(s.Hits()); n != tc.attempts {
					t.Errorf("%d attempts, want %d", n, tc.attempts)
				}
				if slept := len(clk.Sleeps()) > 0; slept != tc.wantSleep {
					t.Errorf("sleeps = %v", clk.Sleeps())
				}
				if !tc.wantSleep && (len(events) != 1 || events[0].GiveUp != GiveUpDeadline) {
					t.Errorf("events = %+v, want one give-up for the deadline", events)
				}
			})
		})
	}
}

// TestCancelInterruptsWait: cancelling the context ends a 30 s wait at once.
func TestCancelInterruptsWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &scripted{steps: repeat(5, reply(429, "Retry-After", "30"))}
		c := &http.Client{Transport: NewTransport(handlerRT{h: s})}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Second, cancel)
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://api.test/", nil)
		start := time.Now()
		_, err := c.Do(req)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("returned after %v, want 1s", d)
		}
		// The host's block still holds, and a cancelled wait on it ends too.
		ctx2, cancel2 := context.WithCancel(context.Background())
		time.AfterFunc(2*time.Second, cancel2)
		req2, _ := http.NewRequestWithContext(ctx2, "GET", "http://api.test/again", nil)
		if _, err := c.Do(req2); !errors.Is(err, context.Canceled) {
			t.Errorf("held request: err = %v", err)
		}
		if len(s.Hits()) != 1 {
			t.Errorf("server saw %d requests, want 1", len(s.Hits()))
		}
	})
}

// TestExhaustion: when attempts run out, the last response comes back with a
// nil error and a readable body, as the RoundTripper contract says.
func TestExhaustion(t *testing.T) {
	clk := newFakeClock()
	var n atomic.Int32
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(429)
		io.WriteString(w, "attempt "+strconv.Itoa(int(n.Add(1))))
	}))
	var events []RetryEvent
	tr := NewTransport(nil, WithClock(clk), WithMaxAttempts(3), WithRetryHook(func(e RetryEvent) { events = append(events, e) }))
	req, _ := http.NewRequest("GET", srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil || resp.StatusCode != 429 {
		t.Fatalf("got %v, %v", resp, err)
	}
	if body := readBody(t, resp); body != "attempt 3" {
		t.Errorf("body = %q, want the last response's", body)
	}
	if n.Load() != 3 {
		t.Errorf("%d attempts, want 3", n.Load())
	}
	if len(events) != 3 || events[2].GiveUp != GiveUpAttempts || events[2].Attempt != 3 {
		t.Errorf("events = %+v", events)
	}
}

// TestBodyReplay: a retried POST sends the identical body and headers,
// through GetBody.
func TestBodyReplay(t *testing.T) {
	clk := newFakeClock()
	s := &scripted{steps: []func(http.ResponseWriter){reply(429, "Retry-After", "1"), reply(503), reply(429)}}
	srv := serve(t, s)
	c := &http.Client{Transport: NewTransport(nil, WithClock(clk))}
	payload := `{"sku":"launch-sneaker","qty":1}`
	req, _ := http.NewRequest("POST", srv.URL+"/buy", strings.NewReader(payload))
	req.Header.Set("Idempotency-Key", "order-42")
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("got %v, %v", resp, err)
	}
	resp.Body.Close()
	hits := s.Hits()
	if len(hits) != 4 {
		t.Fatalf("%d attempts, want 4", len(hits))
	}
	for i, h := range hits {
		if h.method != "POST" || h.body != payload || h.header.Get("Idempotency-Key") != "order-42" ||
			h.header.Get("Content-Length") != hits[0].header.Get("Content-Length") {
			t.Errorf("attempt %d: %s %q %v", i+1, h.method, h.body, h.header)
		}
	}
}

// TestNonReplayableBody: a body without GetBody is sent once.
func TestNonReplayableBody(t *testing.T) {
	clk := newFakeClock()
	s := &scripted{steps: repeat(3, reply(429, "Retry-After", "1"))}
	srv := serve(t, s)
	var events []RetryEvent
	c := &http.Client{Transport: NewTransport(nil, WithClock(clk), WithRetryHook(func(e RetryEvent) { events = append(events, e) }))}
	req, _ := http.NewRequest("PUT", srv.URL, io.MultiReader(strings.NewReader("stream")))
	if req.GetBody != nil {
		t.Fatal("test needs a body without GetBody")
	}
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != 429 {
		t.Fatalf("got %v, %v", resp, err)
	}
	resp.Body.Close()
	if len(s.Hits()) != 1 || len(events) != 1 || events[0].GiveUp != GiveUpBody {
		t.Errorf("%d attempts, events %+v; want 1 and a give-up", len(s.Hits()), events)
	}
}

type trackedBody struct {
	io.Reader
	read   int
	closed bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	b.read += n
	return n, err
}
func (b *trackedBody) Close() error { b.closed = true; return nil }

// TestIdempotency: 429 is retried for any method; 503 and transport errors
// only for idempotent methods or with an idempotency key; some errors never.
func TestIdempotency(t *testing.T) {
	errReset := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	cases := []struct {
		method string
		key    string
		status int   // 0: transport error
		err    error // the transport error
		want   int   // attempts
	}{
		{"POST", "", 429, nil, 3},
		{"PATCH", "", 429, nil, 3},
		{"POST", "", 503, nil, 1},
		{"POST", "Idempotency-Key", 503, nil, 3},
		{"POST", "X-Idempotency-Key", 503, nil, 3},
		{"GET", "", 503, nil, 3},
		{"HEAD", "", 503, nil, 3},
		{"PUT", "", 0, errReset, 3},
		{"DELETE", "", 0, io.ErrUnexpectedEOF, 3},
		{"POST", "", 0, errReset, 1},
		{"POST", "Idempotency-Key", 0, errReset, 3},
		{"GET", "", 0, x509.UnknownAuthorityError{}, 1},
		{"GET", "", 0, errors.New("unsupported protocol scheme \"ftp\""), 1},
		{"GET", "", 200, nil, 1},
		{"GET", "", 500, nil, 1},
	}
	for _, tc := range cases {
		name := tc.method + "/" + tc.key + "/" + strconv.Itoa(tc.status)
		if tc.err != nil {
			name += "/" + tc.err.Error()
		}
		// In a bubble the waits pass in virtual time, which advances only
		// once every goroutine is blocked: the background drain of each
		// replaced body ends before the retry, as it does in real time
		// during a real wait.
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				attempts := 0
				var bodies []*trackedBody
				base := rtFunc(func(r *http.Request) (*http.Response, error) {
					attempts++
					if r.Body != nil {
						r.Body.Close()
					}
					if tc.err != nil {
						return nil, tc.err
					}
					b := &trackedBody{Reader: strings.NewReader("body")}
					bodies = append(bodies, b)
					return &http.Response{StatusCode: tc.status, Header: http.Header{}, Body: b, Request: r}, nil
				})
				tr := NewTransport(base, WithMaxAttempts(3))
				req, _ := http.NewRequest(tc.method, "http://api.test/", strings.NewReader("x"))
				if tc.key != "" {
					req.Header.Set(tc.key, "k1")
				}
				resp, err := tr.RoundTrip(req)
				if attempts != tc.want {
					t.Errorf("%d attempts, want %d", attempts, tc.want)
				}
				if tc.err != nil {
					if !errors.Is(err, tc.err) && err != tc.err {
						t.Errorf("err = %v, want the transport error", err)
					}
					return
				}
				if err != nil || resp.StatusCode != tc.status {
					t.Fatalf("got %v, %v", resp, err)
				}
				// Intermediate bodies were drained and closed; the last is untouched.
				for i, b := range bodies[:len(bodies)-1] {
					if !b.closed || b.read != 4 {
						t.Errorf("intermediate body %d: closed=%v read=%d", i, b.closed, b.read)
					}
				}
				if last := bodies[len(bodies)-1]; last.closed || last.read != 0 {
					t.Errorf("last body touched: closed=%v read=%d", last.closed, last.read)
				}
			})
		})
	}
}

// TestDrainBoundedAndConnectionReuse: an intermediate body is read at most
// DrainLimit+1 bytes, and a small one is drained during the wait so that
// its connection is reused for the retry. In a bubble, over an in-memory
// network: the waits are virtual, and the drains (real work) end before
// them, as they do in real time.
func TestDrainBoundedAndConnectionReuse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var conns atomic.Int32
		s := &scripted{steps: repeat(3, reply(429, "Retry-After", "1"))}
		srv, base := servePipe(t, s)
		dial := base.DialContext
		base.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conns.Add(1)
			return dial(ctx, network, addr)
		}
		c := &http.Client{Transport: NewTransport(base)}
		resp, err := c.Get(srv.URL)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("got %v, %v", resp, err)
		}
		resp.Body.Close()
		if n := conns.Load(); n != 1 {
			t.Errorf("%d connections for 4 attempts, want 1 (bodies drained)", n)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		huge := &trackedBody{Reader: io.LimitReader(zeros{}, 10<<20)}
		first := true
		base := rtFunc(func(r *http.Request) (*http.Response, error) {
			if first {
				first = false
				return &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"1"}}, Body: huge}, nil
			}
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}, nil
		})
		req, _ := http.NewRequest("GET", "http://api.test/", nil)
		if _, err := NewTransport(base).RoundTrip(req); err != nil {
			t.Fatal(err)
		}
		if !huge.closed || huge.read > DrainLimit+1 {
			t.Errorf("huge body: closed=%v read=%d, want closed after at most %d", huge.closed, huge.read, DrainLimit+1)
		}
	})
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestParkedResponseReturned: a retry given up while held by the host's
// limit returns the previous response, its body readable.
func TestParkedResponseReturned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		base := rtFunc(func(r *http.Request) (*http.Response, error) {
			if r.URL.Path == "/b" { // B is slow, and comes back with a long block
				<-release
				return &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"120"}},
					Body: io.NopCloser(strings.NewReader("long")), Request: r}, nil
			}
			return &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"1"}},
				Body: io.NopCloser(strings.NewReader("first 429")), Request: r}, nil
		})
		tr := NewTransport(base)
		var wg sync.WaitGroup
		wg.Go(func() {
			req, _ := http.NewRequest("GET", "http://api.test/b", nil)
			resp, err := tr.RoundTrip(req)
			if err != nil || resp.StatusCode != 429 {
				t.Errorf("B: %v, %v", resp, err)
			}
		})
		synctest.Wait() // B is in flight
		var respA *http.Response
		var errA error
		wg.Go(func() {
			req, _ := http.NewRequest("GET", "http://api.test/a", nil)
			respA, errA = tr.RoundTrip(req)
		})
		time.Sleep(500 * time.Millisecond) // A is waiting out its second
		close(release)                     // B's answer blocks the host past MaxWait
		wg.Wait()
		if errA != nil || respA == nil || respA.StatusCode != 429 {
			t.Fatalf("A: %v, %v", respA, errA)
		}
		if b, _ := io.ReadAll(respA.Body); string(b) != "first 429" {
			t.Errorf("A's body = %q", b)
		}
		if d := time.Since(time.Unix(946684800, 0)); d > 1200*time.Millisecond {
			t.Errorf("A returned after %v; want right after its own wait", d)
		}
	})
}

// TestHostSharedView429: one 429 with Retry-After holds every other request
// to that host until the wait is over, and no other host.
func TestHostSharedView429(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := time.Now
		s := &scripted{now: clk, steps: []func(http.ResponseWriter){reply(429, "Retry-After", "2")}}
		other := &scripted{now: clk}
		tr := NewTransport(rtFunc(func(r *http.Request) (*http.Response, error) {
			if r.URL.Host == "other.test" {
				return handlerRT{h: other}.RoundTrip(r)
			}
			return handlerRT{h: s}.RoundTrip(r)
		}))
		start := time.Now()
		var wg sync.WaitGroup
		wg.Go(func() {
			resp, err := (&http.Client{Transport: tr}).Get("http://api.test/first")
			if err != nil || resp.StatusCode != 200 {
				t.Errorf("first: %v, %v", resp, err)
			}
		})
		synctest.Wait()
		for i := 0; i < 5; i++ {
			wg.Go(func() {
				time.Sleep(500 * time.Millisecond)
				resp, err := (&http.Client{Transport: tr}).Get("http://API.test/more")
				if err != nil || resp.StatusCode != 200 {
					t.Errorf("more: %v, %v", resp, err)
				}
			})
		}
		wg.Go(func() {
			time.Sleep(500 * time.Millisecond)
			resp, err := (&http.Client{Transport: tr}).Get("http://other.test/")
			if err != nil || resp.StatusCode != 200 {
				t.Errorf("other: %v, %v", resp, err)
			}
		})
		wg.Wait()
		hits := s.Hits()
		if len(hits) != 7 {
			t.Fatalf("%d requests, want 7 (1 rejected + 6 admitted)", len(hits))
		}
		for _, h := range hits[1:] {
			if h.at.Sub(start) < 2*time.Second {
				t.Errorf("request sent at %v, before the 2s block ended", h.at.Sub(start))
			}
		}
		if oh := other.Hits(); len(oh) != 1 || oh[0].at.Sub(start) != 500*time.Millisecond {
			t.Errorf("other host held: %+v", oh)
		}
	})
}

// TestHostSharedViewRemainingZero: a 200 that says no request remains holds
// the others until the reset, without any 429.
func TestHostSharedViewRemainingZero(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &api{now: time.Now, algo: &fixedWindow{limit: 2, window: 10 * time.Second}, style: draftStyle}
		c := &http.Client{Transport: NewTransport(handlerRT{h: a})}
		start := time.Now()
		for i := 0; i < 2; i++ {
			resp, err := c.Get("http://api.test/")
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("%v, %v", resp, err)
			}
			resp.Body.Close()
		}
		var wg sync.WaitGroup
		for i := 0; i < 2; i++ {
			wg.Go(func() {
				resp, err := c.Get("http://api.test/")
				if err != nil || resp.StatusCode != 200 {
					t.Errorf("%v, %v", resp, err)
					return
				}
				resp.Body.Close()
			})
		}
		wg.Wait()
		if n := a.count(429); n != 0 {
			t.Errorf("%d rejections, want 0", n)
		}
		hits := a.Hits()
		if d := hits[2].at.Sub(start); d != 10*time.Second {
			t.Errorf("first held request sent after %v, want at the 10s reset", d)
		}
		// After the reset the client paces at the announced 2 per 10s: the
		// last one goes half a window later.
		if d := hits[3].at.Sub(start); d < 10*time.Second || d > 15*time.Second {
			t.Errorf("last request sent after %v", d)
		}
	})
}

// load runs goroutines x perG GETs through one Transport against a and
// returns the virtual time it took. Every request must end in a 200.
func load(t *testing.T, a *api, goroutines, perG int, opts ...Option) time.Duration {
	t.Helper()
	tr := NewTransport(handlerRT{h: a, latency: 2 * time.Millisecond}, opts...)
	c := &http.Client{Transport: tr}
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int32
	for g := 0; g < goroutines; g++ {
		wg.Go(func() {
			for i := 0; i < perG; i++ {
				resp, err := c.Get("http://api.test/items")
				if err != nil || resp.StatusCode != 200 {
					failed.Add(1)
					if resp != nil {
						resp.Body.Close()
					}
					continue
				}
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d requests failed", n, goroutines*perG)
	}
	return time.Since(start)
}

// TestConcurrentFixedWindow is the case: 30 goroutines against a
// 10-per-second fixed window all succeed, and after the first blind wave
// (20 requests sent before any answer came back) the client sends no
// request it already knows will be rejected.
func TestConcurrentFixedWindow(t *testing.T) {
	for _, st := range []style{sluiceStyle, legacyStyle, draftStyle, githubStyle} {
		t.Run(st.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := &api{now: time.Now, algo: &fixedWindow{limit: 10, window: time.Second}, style: st}
				if st == githubStyle {
					// The bubble's clock says 2000, before any epoch reset
					// can be told from a delta: the server lives in 2026,
					// and its Date lets the client correct for the skew.
					a.skew = time.Until(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
				}
				const goroutines, perG = 30, 3
				elapsed := load(t, a, goroutines, perG)
				rejected := a.count(429)
				var late int
				for _, h := range a.Hits() {
					if h.status == 429 && h.at.Sub(a.Hits()[0].at) > 100*time.Millisecond {
						late++
					}
				}
				// 90 requests, 10 per aligned window: the last window starts 8 s in.
				t.Logf("%s: %d requests in %v (theoretical minimum 8s), %d rejected (%d after the first wave)",
					st, goroutines*perG, elapsed, rejected, late)
				if rejected > 20 || late > 0 {
					t.Errorf("%d rejections, %d after the first wave; want at most the 20 of the blind wave", rejected, late)
				}
				if elapsed > 9500*time.Millisecond { // typically 8.2s
					t.Errorf("took %v, want close to 8s", elapsed)
				}
			})
		})
	}
}

// TestConcurrentTokenBucket: 20 goroutines, 200 requests, 10/s with burst 5
// (the e2e scenario, in memory). Pacing keeps the server's bucket
// from running dry, so the run takes close to the theoretical minimum of
// (200-5)/10 = 19.5 s. Each style runs several times: the order in which
// the first wave's answers arrive varies from run to run, and one order
// once halved the rate (a late answer to the first wave poisoned the next
// crowd's budget, 1 run in 10).
func TestConcurrentTokenBucket(t *testing.T) {
	for _, st := range []style{sluiceStyle, legacyStyle} {
		for run := range 3 {
			t.Run(fmt.Sprintf("%s/%d", st, run), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					a := &api{now: time.Now, algo: &tokenBucket{limit: 10, window: time.Second, burst: 5}, style: st}
					elapsed := load(t, a, 20, 10)
					rejected := a.count(429)
					t.Logf("%s: 200 requests in %v (theoretical minimum 19.5s), %d rejected", st, elapsed, rejected)
					// The blind first wave: 20 sent, 5 admitted by the burst.
					if rejected > 15 {
						t.Errorf("%d rejections, want at most the 15 of the blind wave", rejected)
					}
					if elapsed > 21*time.Second {
						t.Errorf("took %v, want close to 19.5s", elapsed)
					}
				})
			})
		}
	}
}

// TestNoHeadersNoSlowdown: a host that never limits is never held.
func TestNoHeadersNoSlowdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &scripted{}
		var events atomic.Int32
		tr := NewTransport(handlerRT{h: s, latency: time.Millisecond}, WithRetryHook(func(RetryEvent) { events.Add(1) }))
		c := &http.Client{Transport: tr}
		start := time.Now()
		var wg sync.WaitGroup
		for i := 0; i < 50; i++ {
			wg.Go(func() {
				resp, err := c.Get("http://api.test/")
				if err == nil {
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
		if d := time.Since(start); d != time.Millisecond || events.Load() != 0 {
			t.Errorf("took %v with %d events, want 1ms and none", d, events.Load())
		}
	})
}

// TestHookAndLogger: every wait and give-up reaches the hook and the
// logger, with its attempt, reason, delay and limits; nothing is logged by
// default.
func TestHookAndLogger(t *testing.T) {
	var defaultLog bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&defaultLog, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer slog.SetDefault(prev)

	steps := []func(http.ResponseWriter){
		reply(429, "Retry-After", "2", "X-Ratelimit-Limit", "10", "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", "2"),
		reply(503),
		reply(429, "Retry-After", "2"),
	}
	srv := serve(t, &scripted{steps: steps})
	resp, err := (&http.Client{Transport: NewTransport(nil, WithClock(newFakeClock()))}).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if defaultLog.Len() != 0 {
		t.Errorf("silent by default, but logged:\n%s", defaultLog.String())
	}

	var logs bytes.Buffer
	var events []RetryEvent
	srv2 := serve(t, &scripted{steps: steps})
	tr := NewTransport(nil, WithClock(newFakeClock()), WithMaxAttempts(3),
		WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
		WithRetryHook(func(e RetryEvent) { events = append(events, e) }))
	resp, err = (&http.Client{Transport: tr}).Get(srv2.URL + "/path")
	if err != nil || resp.StatusCode != 429 {
		t.Fatalf("got %v, %v", resp, err)
	}
	resp.Body.Close()
	if len(events) != 3 {
		t.Fatalf("events = %+v", events)
	}
	e := events[0]
	if e.Attempt != 1 || e.Reason != RateLimited || e.StatusCode != 429 || e.Delay < 2*time.Second ||
		e.Limit != (RateLimit{Limit: 10, Reset: 2 * time.Second, RetryAfter: 2 * time.Second}) || e.GiveUp != "" {
		t.Errorf("event 1 = %+v", e)
	}
	if e := events[1]; e.Attempt != 2 || e.Reason != Unavailable || e.Delay <= 0 {
		t.Errorf("event 2 = %+v", e)
	}
	if e := events[2]; e.Attempt != 3 || e.GiveUp != GiveUpAttempts {
		t.Errorf("event 3 = %+v", e)
	}
	out := logs.String()
	for _, want := range []string{"sluice: retrying", "reason=rate_limited", "attempt=1", "limit.limit=10",
		"reason=unavailable", "sluice: giving up", `give_up="attempts exhausted"`, "path=/path"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

// TestCheckResponse: 429 and 503 become a *RateLimitError, usable with
// errors.As, carrying when to retry and the limits; anything else is nil.
func TestCheckResponse(t *testing.T) {
	u, _ := url.Parse("http://api.test/x")
	resp := &http.Response{StatusCode: 429, Request: &http.Request{URL: u}, Header: http.Header{
		"Retry-After": {"7"}, "Ratelimit-Policy": {`"burst";q=100;w=60`}, "Ratelimit": {`"burst";r=0;t=30`},
	}}
	err := CheckResponse(resp)
	var rle *RateLimitError
	if !errors.As(err, &rle) {
		t.Fatalf("CheckResponse = %v", err)
	}
	want := RateLimitError{StatusCode: 429, RetryAfter: 7 * time.Second, Host: "api.test",
		Limit: RateLimit{Limit: 100, Remaining: 0, Reset: 30 * time.Second, RetryAfter: 7 * time.Second, Policy: "burst"}}
	if *rle != want {
		t.Errorf("got %+v\nwant %+v", *rle, want)
	}
	if !strings.Contains(err.Error(), "429") || !strings.Contains(err.Error(), "retry after 7s") {
		t.Errorf("Error() = %q", err)
	}
	// Without Retry-After, the reset of an exhausted quota is the wait.
	resp.Header.Del("Retry-After")
	if errors.As(CheckResponse(resp), &rle); rle.RetryAfter != 30*time.Second {
		t.Errorf("RetryAfter = %v, want the reset", rle.RetryAfter)
	}
	if err := CheckResponse(&http.Response{StatusCode: 503, Header: http.Header{}}); !errors.As(err, &rle) || rle.StatusCode != 503 {
		t.Errorf("503: %v", err)
	}
	for _, r := range []*http.Response{nil, {StatusCode: 200}, {StatusCode: 500}, {StatusCode: 403}} {
		if err := CheckResponse(r); err != nil {
			t.Errorf("CheckResponse(%v) = %v, want nil", r, err)
		}
	}
}

// TestRequestUntouched: the caller's request is not modified, and its body
// is closed even when the Transport refuses to send it.
func TestRequestUntouched(t *testing.T) {
	clk := newFakeClock()
	s := &scripted{steps: []func(http.ResponseWriter){reply(429, "Retry-After", "1"), reply(429, "Retry-After", "600")}}
	srv := serve(t, s)
	tr := NewTransport(nil, WithClock(clk))
	req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("abc"))
	req.Header.Set("X-A", "1")
	before := req.Header.Clone()
	body := req.Body
	resp, err := tr.RoundTrip(req)
	if err != nil || resp.StatusCode != 429 {
		t.Fatalf("got %v, %v", resp, err)
	}
	resp.Body.Close()
	if req.Body != body || len(req.Header) != len(before) || req.Header.Get("X-A") != "1" {
		t.Errorf("request modified: %v", req.Header)
	}
	// Now the host is blocked for 10 minutes: a new request is refused, and
	// its body closed, as a RoundTripper must.
	tb := &trackedBody{Reader: strings.NewReader("x")}
	req2, _ := http.NewRequest("POST", srv.URL, tb)
	if _, err := tr.RoundTrip(req2); err == nil || !tb.closed {
		t.Errorf("err = %v, closed = %v", err, tb.closed)
	}
}

func TestParseRateLimit(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		h    http.Header
		want RateLimit
		ok   bool
	}{
		{"none", http.Header{"Content-Type": {"text/plain"}}, RateLimit{}, false},
		{"garbage", http.Header{"Retry-After": {"soon"}, "X-Ratelimit-Reset": {"x"}}, RateLimit{}, false},
		{"retry-after seconds", http.Header{"Retry-After": {"30"}}, RateLimit{RetryAfter: 30 * time.Second}, true},
		{"retry-after date", http.Header{"Retry-After": {now.Add(time.Minute).Format(http.TimeFormat)}},
			RateLimit{RetryAfter: time.Minute}, true},
		{"draft", http.Header{"Ratelimit-Policy": {`"burst";q=100;w=60`}, "Ratelimit": {`"burst";r=50;t=30`}},
			RateLimit{Limit: 100, Remaining: 50, Reset: 30 * time.Second, Policy: "burst"}, true},
		{"x-ratelimit", http.Header{"X-Ratelimit-Limit": {"60"}, "X-Ratelimit-Remaining": {"59"}, "X-Ratelimit-Reset": {"42"}},
			RateLimit{Limit: 60, Remaining: 59, Reset: 42 * time.Second}, true},
		{"x-rate-limit", http.Header{"X-Rate-Limit-Limit": {"60"}, "X-Rate-Limit-Remaining": {"0"}, "X-Rate-Limit-Reset": {"5"}},
			RateLimit{Limit: 60, Reset: 5 * time.Second}, true},
		{"github epoch", http.Header{"X-Ratelimit-Limit": {"5000"}, "X-Ratelimit-Used": {"5000"},
			"X-Ratelimit-Reset": {strconv.FormatInt(now.Unix()+300, 10)}},
			RateLimit{Limit: 5000, Reset: 5 * time.Minute}, true},
		{"github epoch with skewed Date", http.Header{"X-Ratelimit-Remaining": {"1"},
			"Date":              {now.Add(-time.Hour).Format(http.TimeFormat)},
			"X-Ratelimit-Reset": {strconv.FormatInt(now.Add(-time.Hour).Unix()+300, 10)}},
			RateLimit{Remaining: 1, Reset: 5 * time.Minute}, true},
	}
	for _, tt := range tests {
		got, ok := ParseRateLimit(tt.h, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: got %+v, %v; want %+v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

// drainOnce is a token bucket that another client empties once, at a
// given time: the next answer this client gets reads Remaining 0 (or is a
// 429), the late answer of the lock-in scenario below.
type drainOnce struct {
	tokenBucket
	at      time.Time
	drained bool
}

func (d *drainOnce) admit(now time.Time) verdict {
	if !d.drained && !now.Before(d.at) {
		d.drained = true
		for {
			if v := d.tokenBucket.admit(now); !v.ok || v.remaining <= 1 {
				break
			}
		}
	}
	return d.tokenBucket.admit(now)
}

// TestConcurrentTokenBucketLockIn is the half-rate lock-in, made to happen
// every run: 20 goroutines paced at exactly a token bucket's 10/s (burst
// 5); 3 s in, another client empties the bucket, and the next answer reads
// Remaining 0. A client that then holds every request until the full
// reset (rounded up to a second), and releases the crowd of waiters on the
// turns they reserved before the hold, empties the bucket at every reset
// and settles at 5 per reset: about 37 s for the 200 requests. Holding
// until the next token (100 ms), and re-pacing the crowd, keeps the rate.
func TestConcurrentTokenBucketLockIn(t *testing.T) {
	for _, st := range []style{sluiceStyle, legacyStyle, draftStyle} {
		t.Run(st.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				algo := &drainOnce{tokenBucket: tokenBucket{limit: 10, window: time.Second, burst: 5}, at: time.Now().Add(3 * time.Second)}
				a := &api{now: time.Now, algo: algo, style: st}
				elapsed := load(t, a, 20, 10)
				// The other client took up to 4 tokens: at most 0.4 s more.
				t.Logf("%s: 200 requests in %v (theoretical minimum 19.5s + 0.4s), %d rejected", st, elapsed, a.count(429))
				if !algo.drained {
					t.Fatal("the bucket was never drained")
				}
				if elapsed > 22*time.Second {
					t.Errorf("took %v, want close to 20s (locked into half the rate?)", elapsed)
				}
			})
		})
	}
}

// TestConcurrentAnnouncedRate: 10 goroutines, 80 requests, against a token
// bucket of 10/s with burst 5 that answers Sluice's headers, through the
// real net/http client and server (on an in-memory network, in virtual
// time, so that the bound holds whatever the machine's load). The
// theoretical minimum is (80-5)/10 = 7.5 s; pacing at the announced rate
// finishes within 1.3x of it, every run.
func TestConcurrentAnnouncedRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &api{now: time.Now, algo: &tokenBucket{limit: 10, window: time.Second, burst: 5}, style: sluiceStyle}
		srv, base := servePipe(t, a)
		c := &http.Client{Transport: NewTransport(base)}
		start := time.Now()
		var wg sync.WaitGroup
		var failed atomic.Int32
		for range 10 {
			wg.Go(func() {
				for range 8 {
					resp, err := c.Get(srv.URL + "/items")
					if err != nil || resp.StatusCode != 200 {
						failed.Add(1)
					}
					if err == nil {
						resp.Body.Close()
					}
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		const minimum = 7500 * time.Millisecond
		t.Logf("80 requests in %v (%.2fx the minimum of %v), %d rejected", elapsed, float64(elapsed)/float64(minimum), minimum, a.count(429))
		if n := failed.Load(); n > 0 {
			t.Errorf("%d requests failed", n)
		}
		if elapsed > minimum*13/10 {
			t.Errorf("took %v, more than 1.3x the minimum %v", elapsed, minimum)
		}
	})
}
