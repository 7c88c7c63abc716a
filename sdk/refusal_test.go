//go:build go1.25

package sdk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// stallingBody is a 429's body that delivers a few bytes and then blocks
// until released or until the request's context ends: a slow upstream, a
// proxy that streams the error page.
type stallingBody struct {
	ctx     context.Context
	release <-chan struct{}
	first   bool
	closed  atomic.Bool
}

func (b *stallingBody) Read(p []byte) (int, error) {
	if !b.first {
		b.first = true
		return copy(p, `{"title":"slow`), nil
	}
	select {
	case <-b.release:
		return 0, io.EOF
	case <-b.ctx.Done():
		return 0, b.ctx.Err()
	}
}

func (b *stallingBody) Close() error { b.closed.Store(true); return nil }

// TestStalledRefusalBodyDoesNotDelayRetry: a 429 with Retry-After: 1
// whose body stalls. The retry is due after one second (fake clock: at
// once), and is sent then: the body is drained in the background, never
// waited for, since a slow upstream or a proxy streaming its error page
// would otherwise hold the retry (without a deadline, for as long as the
// body stalls). The stalled body is closed once the retry has replaced it.
// In a synctest bubble: the fake clock's wait takes no time, so the
// retry's 200 comes back with the bubble's clock unmoved, however busy the
// machine; a Transport that waited for the body would be answered only at
// the context's deadline, 1.5 s on.
func TestStalledRefusalBodyDoesNotDelayRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		var attempts atomic.Int32
		var stalled *stallingBody
		base := rtFunc(func(r *http.Request) (*http.Response, error) {
			if attempts.Add(1) == 1 {
				stalled = &stallingBody{ctx: r.Context(), release: release}
				return &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"1"}},
					Body: stalled, Request: r}, nil
			}
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok")), Request: r}, nil
		})
		tr := NewTransport(base, WithClock(newFakeClock()))
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://api.test/", nil)
		start := time.Now()
		resp, err := tr.RoundTrip(req)
		el := time.Since(start)
		if err != nil || resp.StatusCode != 200 {
			t.Errorf("got %v, %v after %v (%d attempts); want the retry's 200 at once (Retry-After 1 s on a fake clock)",
				resp, err, el, attempts.Load())
		}
		if el != 0 {
			t.Errorf("took %v for a 1 s wait on a fake clock, want no time at all", el)
		}
		if !stalled.closed.Load() {
			t.Error("the 429's body was left open after the retry replaced it")
		}
	})
}

// TestStalledProblemBodyDoesNotDelayFinalAnswer: a final 429 (no retries
// left) of type application/problem+json whose body stalls. RoundTrip
// hands the response back once its headers are in, without waiting for
// the problem document beyond problemWait: the caller, not the
// Transport, decides how long to wait for a body. The body stays whole:
// what the Transport read ahead comes first, then the rest. In a synctest
// bubble, so the wait is measured exactly: at most problemWait (100 ms), where a
// Transport that read the body would wait for the context's second.
func TestStalledProblemBodyDoesNotDelayFinalAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		base := rtFunc(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 429,
				Header:  http.Header{"Content-Type": {"application/problem+json"}, "Retry-After": {"1"}},
				Body:    &stallingBody{ctx: r.Context(), release: release},
				Request: r}, nil
		})
		tr := NewTransport(base, WithClock(newFakeClock()), WithMaxAttempts(1))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://api.test/", nil)
		start := time.Now()
		resp, err := tr.RoundTrip(req)
		el := time.Since(start)
		if err != nil || resp == nil || resp.StatusCode != 429 {
			t.Fatalf("got %v, %v", resp, err)
		}
		if el > 100*time.Millisecond { // problemWait, as docs/sdk.md states it
			t.Errorf("RoundTrip returned the 429 after %v: blocked reading its body", el)
		}
		close(release) // the body ends
		if b := readBody(t, resp); b != `{"title":"slow` {
			t.Errorf("body %q, want every byte the server sent", b)
		}
	})
}

// TestGetBodyFailureReportedAsGiveUp: a 429 is retried; the retry's
// GetBody fails, so the retry is never sent and the 429 is returned,
// readable. The hook, which heard the retry announced, then hears it given
// up (GiveUpGetBody, with GetBody's error): it gets "every wait and
// give-up" (docs/sdk.md), so that its counts of retries add up.
func TestGetBodyFailureReportedAsGiveUp(t *testing.T) {
	var attempts atomic.Int32
	base := rtFunc(func(r *http.Request) (*http.Response, error) {
		attempts.Add(1)
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		return &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"1"}},
			Body: io.NopCloser(strings.NewReader("slow down")), Request: r}, nil
	})
	var events []RetryEvent
	tr := NewTransport(base, WithClock(newFakeClock()), WithRetryHook(func(e RetryEvent) { events = append(events, e) }))
	req, _ := http.NewRequest("POST", "http://api.test/", strings.NewReader("payload"))
	req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("spool gone") }
	resp, err := tr.RoundTrip(req)
	if err != nil || resp.StatusCode != 429 {
		t.Fatalf("got %v, %v", resp, err)
	}
	if b := readBody(t, resp); b != "slow down" {
		t.Errorf("body %q", b)
	}
	if attempts.Load() != 1 {
		t.Errorf("%d attempts, want 1", attempts.Load())
	}
	if len(events) == 0 || events[len(events)-1].GiveUp != GiveUpGetBody ||
		events[len(events)-1].Err == nil || events[len(events)-1].Err.Error() != "spool gone" {
		t.Errorf("events = %+v; want the last one to be a give-up (the retry the hook was told of never happened)", events)
	}
}

// TestMaxElapsedBoundsWholeSequence: DefaultMaxElapsed bounds the time the
// default backoff keeps retrying one request, waits included (options.go),
// whatever mix of failures it meets: transport errors for a minute, then
// 429s with Retry-After: 50 (another retry class, with its own base) start
// no wait past DefaultMaxElapsed after the first retry.
func TestMaxElapsedBoundsWholeSequence(t *testing.T) {
	clk := newFakeClock()
	start := clk.Now()
	base := rtFunc(func(r *http.Request) (*http.Response, error) {
		if clk.Now().Sub(start) < time.Minute {
			return nil, io.ErrUnexpectedEOF
		}
		return &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"50"}},
			Body: http.NoBody, Request: r}, nil
	})
	var waitsStarted []time.Duration
	tr := NewTransport(base, WithClock(clk), WithMaxAttempts(1000), WithRetryBudget(nil),
		WithRetryHook(func(e RetryEvent) {
			if e.GiveUp == "" {
				waitsStarted = append(waitsStarted, clk.Now().Sub(start))
			}
		}))
	req, _ := http.NewRequest("GET", "http://api.test/", nil)
	resp, err := tr.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
	}
	total := clk.Now().Sub(start)
	last := waitsStarted[len(waitsStarted)-1]
	if last > DefaultMaxElapsed {
		t.Errorf("a wait started %v after the request began (total %v, %d waits); DefaultMaxElapsed is %v",
			last, total, len(waitsStarted), DefaultMaxElapsed)
	}
}

// TestHostTableBounded: a Transport remembers at most 1024 hosts
// (docs/sdk.md, doc.go), even when every one still has something to
// enforce: a client that meets many hosts each answering one 429 with a
// long Retry-After (a crawler, a webhook sender) must not grow without
// bound. The hosts forgotten are the least recently used: a host in
// constant use keeps what it has learned.
func TestHostTableBounded(t *testing.T) {
	base := rtFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"3600"}},
			Body: http.NoBody, Request: r}, nil
	})
	clk := newFakeClock()
	tr := NewTransport(base, WithClock(clk))
	get := func(host string) {
		req, _ := http.NewRequest("GET", "http://"+host+"/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil && !errors.As(err, new(*RateLimitError)) {
			t.Fatal(err)
		}
		if err == nil {
			resp.Body.Close()
		}
	}
	get("busy.test")
	busy, _ := tr.hosts.m.Load("busy.test")
	for i := range 3 * maxHosts {
		clk.Advance(time.Second)
		get(fmt.Sprintf("h%d.test", i))
		get("busy.test")
	}
	if n := tr.hosts.n.Load(); n > maxHosts {
		t.Errorf("Transport remembers %d hosts, bound is %d", n, maxHosts)
	}
	if h, _ := tr.hosts.m.Load("busy.test"); h != busy {
		t.Error("the host in constant use was forgotten")
	}
}

// countingRT wraps a base and counts response bodies left open.
type countingRT struct {
	base http.RoundTripper
	open atomic.Int64
}

type countedBody struct {
	io.ReadCloser
	rt   *countingRT
	once sync.Once
}

func (b *countedBody) Close() error {
	b.once.Do(func() { b.rt.open.Add(-1) })
	return b.ReadCloser.Close()
}

func (c *countingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if resp != nil && resp.Body != nil {
		c.open.Add(1)
		resp.Body = &countedBody{ReadCloser: resp.Body, rt: c}
	}
	return resp, err
}

// TestLargeBodyReplayedWhole: a 1 MiB POST refused twice with 429 arrives
// byte for byte three times; a PUT whose first body errors mid-way is
// retried (transport error, idempotent) with an intact body.
func TestLargeBodyReplayedWhole(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	s := &scripted{steps: repeat(2, reply(429, "Retry-After", "1"))}
	srv := serve(t, s)
	c := &http.Client{Transport: NewTransport(nil, WithClock(newFakeClock()))}
	req, _ := http.NewRequest("POST", srv.URL+"/up", bytes.NewReader(payload))
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v, %v", resp, err)
	}
	resp.Body.Close()
	for i, h := range s.Hits() {
		if h.body != string(payload) {
			t.Errorf("attempt %d: body of %d bytes differs", i+1, len(h.body))
		}
	}

	s2 := &scripted{}
	srv2 := serve(t, s2)
	calls := 0
	req, _ = http.NewRequest("PUT", srv2.URL+"/up", bytes.NewReader(payload))
	req.GetBody = func() (io.ReadCloser, error) {
		calls++
		return io.NopCloser(bytes.NewReader(payload)), nil
	}
	req.Body = io.NopCloser(io.MultiReader(bytes.NewReader(payload[:1000]), errReader{errors.New("disk")}))
	resp, err = c.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v, %v", resp, err)
	}
	resp.Body.Close()
	// The first attempt may reach the server cut short; the last is whole.
	if h := s2.Hits(); len(h) == 0 || h[len(h)-1].body != string(payload) || calls != 1 {
		t.Errorf("%d hits, GetBody called %d times", len(h), calls)
	}
}

// TestStreamedBodySentOnce: a streamed body (no GetBody) refused with
// 429 is sent once; the 429 comes back readable.
func TestStreamedBodySentOnce(t *testing.T) {
	s := &scripted{steps: repeat(3, reply(429, "Retry-After", "1"))}
	srv := serve(t, s)
	c := &http.Client{Transport: NewTransport(nil, WithClock(newFakeClock()))}
	pr, pw := io.Pipe()
	go func() { pw.Write([]byte("stream")); pw.Close() }()
	req, _ := http.NewRequest("POST", srv.URL, pr)
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != 429 {
		t.Fatalf("%v, %v", resp, err)
	}
	if b := readBody(t, resp); b != "status 429\n" {
		t.Errorf("body %q", b)
	}
	if h := s.Hits(); len(h) != 1 || h[0].body != "stream" {
		t.Errorf("hits %+v", h)
	}
}

// TestCancelDuringWaitClosesBody: a context cancelled during a 30 s wait ends the
// call at once with ctx.Err(), the 429's body closed, nothing left running.
func TestCancelDuringWaitClosesBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &scripted{steps: repeat(5, reply(429, "Retry-After", "30"))}
		crt := &countingRT{base: handlerRT{h: s}}
		tr := NewTransport(crt)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(3*time.Second, cancel)
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://api.test/", strings.NewReader("x"))
		start := time.Now()
		resp, err := tr.RoundTrip(req)
		if resp != nil || !errors.Is(err, context.Canceled) || time.Since(start) != 3*time.Second {
			t.Errorf("%v, %v after %v", resp, err, time.Since(start))
		}
		if n := crt.open.Load(); n != 0 {
			t.Errorf("%d response bodies left open", n)
		}
	})
}

// TestEndless429sEndReadable: a server that refuses forever gets MaxAttempts
// attempts, bodies closed, the last one returned readable, in bounded time;
// with a bare 429 the waits are a growing backoff from about a second.
func TestEndless429sEndReadable(t *testing.T) {
	for _, hdr := range [][]string{{"Retry-After", "2"}, nil} {
		clk := newFakeClock()
		var n atomic.Int32
		crt := &countingRT{base: rtFunc(func(r *http.Request) (*http.Response, error) {
			h := http.Header{}
			if hdr != nil {
				h.Set(hdr[0], hdr[1])
			}
			return &http.Response{StatusCode: 429, Header: h, Request: r,
				Body: io.NopCloser(strings.NewReader(fmt.Sprint("no ", n.Add(1))))}, nil
		})}
		tr := NewTransport(crt, WithClock(clk))
		req, _ := http.NewRequest("POST", "http://api.test/", strings.NewReader("x"))
		start := clk.Now()
		resp, err := tr.RoundTrip(req)
		if err != nil || resp.StatusCode != 429 {
			t.Fatalf("%v %v", resp, err)
		}
		if b := readBody(t, resp); b != "no 4" || n.Load() != 4 || crt.open.Load() != 0 {
			t.Errorf("body %q, %d attempts, %d open", b, n.Load(), crt.open.Load())
		}
		if el := clk.Now().Sub(start); el > 20*time.Second {
			t.Errorf("took %v", el)
		}
		for _, d := range clk.Sleeps() {
			if d < 500*time.Millisecond {
				t.Errorf("%v: slept %v", hdr, d)
			}
		}
	}
}

// TestRetryAfterForms: dates in the past and future, huge, negative,
// garbage, several values.
func TestRetryAfterForms(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	cases := []struct {
		name     string
		kv       []string
		attempts int
		min, max time.Duration // the first wait
	}{
		{"past date", []string{"Date", now.Format(http.TimeFormat), "Retry-After", now.Add(-time.Hour).Format(http.TimeFormat)}, 2, 0, 2 * time.Second},
		{"future date", []string{"Date", now.Format(http.TimeFormat), "Retry-After", now.Add(20 * time.Second).Format(http.TimeFormat)}, 2, 20 * time.Second, 22 * time.Second},
		{"huge", []string{"Retry-After", "99999999999999999999999"}, 1, 0, 0},
		{"negative", []string{"Retry-After", "-5"}, 2, 0, 2 * time.Second},
		{"garbage", []string{"Retry-After", "soon"}, 2, 0, 2 * time.Second},
		{"several", []string{"Retry-After", "3", "Retry-After", "1"}, 2, 3 * time.Second, 4 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			s := &scripted{steps: []func(http.ResponseWriter){reply(429, tc.kv...)}}
			srv := serve(t, s)
			c := &http.Client{Transport: NewTransport(nil, WithClock(clk))}
			resp, err := c.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if len(s.Hits()) != tc.attempts {
				t.Errorf("%d attempts, want %d", len(s.Hits()), tc.attempts)
			}
			sl := clk.Sleeps()
			if tc.attempts == 1 {
				if len(sl) != 0 {
					t.Errorf("slept %v", sl)
				}
				return
			}
			if len(sl) == 0 || sl[0] < tc.min || sl[0] > tc.max {
				t.Errorf("sleeps %v, want first in [%v, %v]", sl, tc.min, tc.max)
			}
		})
	}
}

// TestLongerHintIsTheFloor: the hints are a floor whichever is
// longer: a Retry-After of 2 s with RateLimit r=0;t=10 sends the retry no
// sooner than 10 s; Retry-After of 10 s with r=0;t=2, no sooner than 10 s.
func TestLongerHintIsTheFloor(t *testing.T) {
	for _, tc := range [][2]string{{"2", `"api";r=0;t=10`}, {"10", `"api";r=0;t=2`}} {
		clk := newFakeClock()
		s := &scripted{now: clk.Now, steps: []func(http.ResponseWriter){reply(429, "Retry-After", tc[0], "RateLimit", tc[1], "RateLimit-Policy", `"api";q=5;w=10`)}}
		srv := serve(t, s)
		c := &http.Client{Transport: NewTransport(nil, WithClock(clk))}
		resp, err := c.Get(srv.URL)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%v %v", resp, err)
		}
		resp.Body.Close()
		h := s.Hits()
		if d := h[1].at.Sub(h[0].at); d < 10*time.Second || d > 12*time.Second {
			t.Errorf("%v: retry after %v, want 10s..12s", tc, d)
		}
	}
}

// TestRetriedStatusByMethod: a 429 on a POST is retried; a 503 on a POST is not, a
// 503 on a POST with an Idempotency-Key is.
func TestRetriedStatusByMethod(t *testing.T) {
	for _, tc := range []struct {
		status int
		key    bool
		want   int
	}{{429, false, 2}, {503, false, 1}, {503, true, 2}} {
		s := &scripted{steps: []func(http.ResponseWriter){reply(tc.status)}}
		srv := serve(t, s)
		c := &http.Client{Transport: NewTransport(nil, WithClock(newFakeClock()))}
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("b"))
		if tc.key {
			req.Header.Set("Idempotency-Key", "k")
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if h := s.Hits(); len(h) != tc.want {
			t.Errorf("%+v: %d attempts", tc, len(h))
		}
	}
}

// TestHostsIsolated: a 429 with a long wait, and bare 429s under
// WithAdaptiveRate, from host A never slow host B.
func TestHostsIsolated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &scripted{now: time.Now, steps: repeat(50, reply(429))}
		a.steps[0] = reply(429, "Retry-After", "30")
		b := &scripted{now: time.Now}
		tr := NewTransport(rtFunc(func(r *http.Request) (*http.Response, error) {
			if r.URL.Host == "b.test" {
				return handlerRT{h: b, latency: time.Millisecond}.RoundTrip(r)
			}
			return handlerRT{h: a, latency: time.Millisecond}.RoundTrip(r)
		}), WithAdaptiveRate(), WithMaxWait(2*time.Minute))
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() {
				for range 5 {
					req, _ := http.NewRequest("GET", "http://a.test/x", nil)
					if resp, err := tr.RoundTrip(req); err == nil {
						resp.Body.Close()
					}
				}
			})
		}
		time.Sleep(time.Second)
		start := time.Now()
		for range 50 {
			req, _ := http.NewRequest("GET", "http://b.test/x", nil)
			resp, err := tr.RoundTrip(req)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("%v %v", resp, err)
			}
			resp.Body.Close()
		}
		if d := time.Since(start); d != 50*time.Millisecond {
			t.Errorf("50 requests to B took %v, want 50ms", d)
		}
		wg.Wait()
	})
}

// TestConcurrentHostsAndDialects: many goroutines, several hosts and dialects,
// adaptive on, through the race detector; every body closed, every request
// answered.
func TestConcurrentHostsAndDialects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		apis := map[string]http.Handler{
			"a.test": &api{now: time.Now, algo: &tokenBucket{limit: 20, window: time.Second, burst: 5}, style: sluiceStyle},
			"b.test": &api{now: time.Now, algo: &fixedWindow{limit: 10, window: time.Second}, style: legacyStyle},
			"c.test": &api{now: time.Now, algo: &fixedWindow{limit: 10, window: time.Second}, style: bareStyle},
			"d.test": &api{now: time.Now, algo: &tokenBucket{limit: 10, window: time.Second, burst: 3}, style: draftStyle, name: "pol"},
		}
		crt := &countingRT{base: rtFunc(func(r *http.Request) (*http.Response, error) {
			return handlerRT{h: apis[r.URL.Host], latency: 3 * time.Millisecond}.RoundTrip(r)
		})}
		tr := NewTransport(crt, WithAdaptiveRate(), WithMaxAttempts(20), WithRetryBudget(nil))
		var wg sync.WaitGroup
		var fails atomic.Int32
		for g := range 40 {
			wg.Go(func() {
				host := []string{"a", "b", "c", "d"}[g%4]
				for i := range 10 {
					req, _ := http.NewRequest("POST", fmt.Sprintf("http://%s.test/orders/%d", host, i), strings.NewReader("body"))
					resp, err := tr.RoundTrip(req)
					if err != nil {
						fails.Add(1)
						continue
					}
					if resp.StatusCode != 200 {
						fails.Add(1)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
		if n := crt.open.Load(); n != 0 {
			t.Errorf("%d bodies left open", n)
		}
		if f := fails.Load(); f > 0 {
			t.Logf("%d of 400 requests did not end in 200", f)
		}
	})
}

// TestBackOffMaxRetriesBoundsWholeSequence: WithBackOff's f is called once
// per request, and its BackOff serves every retry of it, so that
// backoff.WithMaxRetries and MaxElapsedTime bound the whole sequence
// (options.go): a server alternating 503 and 429 (two retry classes) gets
// the 2 retries WithMaxRetries allows, not 2 of each.
func TestBackOffMaxRetriesBoundsWholeSequence(t *testing.T) {
	var n atomic.Int32
	base := rtFunc(func(r *http.Request) (*http.Response, error) {
		st := 503
		if n.Add(1)%2 == 0 {
			st = 429
		}
		return &http.Response{StatusCode: st, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})
	made := 0
	tr := NewTransport(base, WithClock(newFakeClock()), WithMaxAttempts(10), WithRetryBudget(nil),
		WithBackOff(func() backoff.BackOff {
			made++
			return backoff.WithMaxRetries(backoff.NewConstantBackOff(10*time.Millisecond), 2)
		}))
	req, _ := http.NewRequest("GET", "http://api.test/", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n.Load() != 3 || made != 1 {
		t.Errorf("%d attempts and %d BackOffs for WithMaxRetries(…, 2); want 3 attempts, f called once", n.Load(), made)
	}
}

// TestBudgetRefillNoOverflow: RetryBudget allows Burst up to a million and
// any MinPerSecond > 0. With Burst 1e6 and MinPerSecond 1e-4, the time it
// takes to fill the budget (1e10 s) is longer than any time.Duration; a
// refill must still only add retries, so that a budget of a million
// retries pays for the second one.
func TestBudgetRefillNoOverflow(t *testing.T) {
	b := newRetryBudget(RetryBudget{Ratio: 0.1, MinPerSecond: 1e-4, Burst: 1_000_000})
	now := time.Now()
	b.refill(now)
	if !b.withdraw(now, transientRetry) {
		t.Fatal("first retry refused")
	}
	before := b.tokens
	b.refill(now.Add(time.Second))
	if b.tokens < before {
		t.Errorf("a second of refill took the budget from %d to %d micro-tokens", before, b.tokens)
	}
	if !b.withdraw(now.Add(time.Second), transientRetry) {
		t.Errorf("second retry refused with a budget of 999999 retries")
	}
}
