//go:build go1.25

package sdk

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sdk/header"
)

// fakeClock is an instant clock: a timer fires at once and moves the clock
// forward by its duration, so a sequence of retries that would take minutes
// runs in microseconds, and every wait is recorded. It suits one request at
// a time; concurrent tests run in a testing/synctest bubble instead.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Now()} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.sleeps = append(c.sleeps, d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return fakeTimer{ch}
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

type fakeTimer struct{ ch chan time.Time }

func (t fakeTimer) C() <-chan time.Time { return t.ch }
func (t fakeTimer) Stop() bool          { return false }

// verdict is a rate limiter's answer to one request.
type verdict struct {
	ok         bool
	limit      int
	remaining  int
	reset      time.Duration // until the quota is fully restored
	retryAfter time.Duration // until a rejected client would be admitted
	window     time.Duration
}

type algorithm interface {
	admit(now time.Time) verdict
}

// fixedWindow admits limit requests per aligned window.
type fixedWindow struct {
	limit  int
	window time.Duration
	cur    int64
	count  int
}

func (f *fixedWindow) admit(now time.Time) verdict {
	idx := now.UnixNano() / int64(f.window)
	if idx != f.cur {
		f.cur, f.count = idx, 0
	}
	left := time.Unix(0, (idx+1)*int64(f.window)).Sub(now)
	v := verdict{limit: f.limit, window: f.window, reset: left}
	if f.count < f.limit {
		f.count++
		v.ok, v.remaining = true, f.limit-f.count
		return v
	}
	v.retryAfter = left
	return v
}

// tokenBucket refills limit tokens per window up to burst, in exact integer
// arithmetic (GCRA: tat is the theoretical arrival time of the next request).
type tokenBucket struct {
	limit  int
	window time.Duration
	burst  int
	tat    time.Time
}

func (b *tokenBucket) admit(now time.Time) verdict {
	t := b.window / time.Duration(b.limit) // time per token
	tau := time.Duration(b.burst-1) * t
	if b.tat.Before(now) {
		b.tat = now
	}
	v := verdict{limit: b.limit, window: b.window}
	if ahead := b.tat.Sub(now); ahead > tau {
		v.retryAfter = ahead - tau
	} else {
		b.tat = b.tat.Add(t)
		v.ok = true
	}
	ahead := b.tat.Sub(now)
	v.remaining = max(b.burst-int((ahead+t-1)/t), 0)
	v.reset = ahead
	return v
}

// style is the header dialect an emulated API speaks.
type style int

const (
	sluiceStyle  style = iota // what the contract says Sluice sends: everything
	legacyStyle               // X-RateLimit-* and Retry-After
	draftStyle                // RateLimit, RateLimit-Policy and Retry-After
	githubStyle               // X-RateLimit-* with epoch reset and Used, Date, no Retry-After
	twitterStyle              // X-Rate-Limit-* with epoch reset
	dateStyle                 // Retry-After as an IMF-fixdate, with Date
	bareStyle                 // a 429 with no hint at all
	garbageStyle              // every header present, every value broken
)

func (s style) String() string {
	return [...]string{"sluice", "legacy", "draft", "github", "twitter", "http-date", "bare", "garbage"}[s]
}

type hit struct {
	at     time.Time
	status int
	method string
	path   string
	body   string
	header http.Header
}

// api emulates a rate-limited API: an algorithm, a header dialect and a
// clock of its own, which may run ahead of or behind the client's.
type api struct {
	mu    sync.Mutex
	now   func() time.Time
	algo  algorithm
	style style
	skew  time.Duration // the server's clock minus the client's
	name  string        // the policy's name in draft headers; "" is "api"
	hits  []hit
}

func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	now := a.now()
	v := a.algo.admit(now)
	status := http.StatusOK
	if !v.ok {
		status = http.StatusTooManyRequests
	}
	a.hits = append(a.hits, hit{at: now, status: status, method: r.Method, path: r.URL.Path, body: string(body), header: r.Header.Clone()})
	n := len(a.hits)
	a.mu.Unlock()

	h := w.Header()
	server := now.Add(a.skew)
	var buf []byte
	set := func(name string, b []byte) { h.Set(name, string(b)) }
	legacy := func(p string) {
		h.Set(p+"Limit", strconv.Itoa(v.limit))
		h.Set(p+"Remaining", strconv.Itoa(v.remaining))
	}
	switch a.style {
	case sluiceStyle, legacyStyle, draftStyle:
		if !v.ok {
			set(header.RetryAfter, header.AppendRetryAfter(buf, v.retryAfter))
		}
		if a.style != draftStyle {
			legacy("X-Ratelimit-")
			set(header.XReset, header.AppendSeconds(buf, v.reset))
		}
		if a.style != legacyStyle {
			name := a.name
			if name == "" {
				name = "api"
			}
			set(header.Policy, header.AppendPolicy(buf, name, int64(v.limit), v.window))
			set(header.RateLimit, header.AppendRateLimit(buf, name, int64(v.remaining), v.reset))
		}
	case githubStyle, twitterStyle:
		p := "X-Ratelimit-"
		if a.style == twitterStyle {
			p = "X-Rate-Limit-"
		}
		h.Set("Date", server.UTC().Format(http.TimeFormat))
		legacy(p)
		h.Set(p+"Used", strconv.Itoa(v.limit-v.remaining))
		h.Set(p+"Reset", strconv.FormatInt(ceilSecond(server.Add(v.reset)).Unix(), 10))
	case dateStyle:
		h.Set("Date", server.UTC().Format(http.TimeFormat))
		if !v.ok {
			h.Set("Retry-After", ceilSecond(server.Add(v.retryAfter)).UTC().Format(http.TimeFormat))
		}
	case garbageStyle:
		h.Set("Retry-After", "soon")
		h.Set("X-Ratelimit-Limit", "many")
		h.Set("X-Ratelimit-Remaining", "-")
		h.Set("X-Ratelimit-Reset", "-30")
		h.Set("Ratelimit", `"x";r=;t=1, ((`)
		h.Set("Ratelimit-Policy", `"x";q=-1;w=0.5`)
		h.Set("Date", "not a date")
	}
	w.WriteHeader(status)
	if v.ok {
		fmt.Fprintf(w, "ok %d\n", n)
	} else {
		fmt.Fprintf(w, "rate limited %d\n", n)
	}
}

func ceilSecond(t time.Time) time.Time {
	if tr := t.Truncate(time.Second); !tr.Equal(t) {
		return tr.Add(time.Second)
	}
	return t
}

func (a *api) Hits() []hit {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]hit(nil), a.hits...)
}

func (a *api) count(status int) int {
	n := 0
	for _, h := range a.Hits() {
		if h.status == status {
			n++
		}
	}
	return n
}

// handlerRT serves requests in memory with a handler, after a simulated
// network latency, so that concurrent tests can run in a synctest bubble
// where time is virtual.
type handlerRT struct {
	h       http.Handler
	latency time.Duration
}

func (rt handlerRT) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := req.Context().Err(); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	time.Sleep(rt.latency / 2)
	sreq := req.Clone(req.Context())
	sreq.RequestURI = req.URL.RequestURI()
	if sreq.Body == nil {
		sreq.Body = http.NoBody
	}
	rec := httptest.NewRecorder()
	rt.h.ServeHTTP(rec, sreq)
	if req.Body != nil {
		req.Body.Close()
	}
	time.Sleep(rt.latency - rt.latency/2)
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}

// scripted answers each request with the next step of a script, then 200.
type scripted struct {
	mu    sync.Mutex
	steps []func(w http.ResponseWriter)
	hits  []hit
	now   func() time.Time
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	n := len(s.hits)
	at := time.Time{}
	if s.now != nil {
		at = s.now()
	}
	s.hits = append(s.hits, hit{at: at, method: r.Method, path: r.URL.Path, body: string(body), header: r.Header.Clone()})
	var step func(http.ResponseWriter)
	if n < len(s.steps) {
		step = s.steps[n]
	}
	s.mu.Unlock()
	if step == nil {
		fmt.Fprintf(w, "ok %d\n", n+1)
		return
	}
	step(w)
}

func (s *scripted) Hits() []hit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]hit(nil), s.hits...)
}

// reply returns a script step that answers status with the header pairs
// and a body naming the attempt.
func reply(status int, kv ...string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(kv); i += 2 {
			w.Header().Add(kv[i], kv[i+1])
		}
		w.WriteHeader(status)
		fmt.Fprintf(w, "status %d\n", status)
	}
}

func repeat(n int, step func(http.ResponseWriter)) []func(http.ResponseWriter) {
	s := make([]func(http.ResponseWriter), n)
	for i := range s {
		s[i] = step
	}
	return s
}

func serve(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// rtFunc adapts a function to http.RoundTripper.
type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return string(b)
}

// routed sends each request to the handler of the longest path prefix that
// matches it, and answers 200 with no rate-limit headers when none does: a
// server with one rule per route, as Sluice is configured.
type routed map[string]http.Handler

func (rt routed) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	best := ""
	for p := range rt {
		if strings.HasPrefix(r.URL.Path, p) && len(p) > len(best) {
			best = p
		}
	}
	if best == "" {
		io.WriteString(w, "ok\n")
		return
	}
	rt[best].ServeHTTP(w, r)
}

// hammer has callers goroutines GET url through c as fast as they can for d
// (of the test's clock), pausing pause after an error; it returns how many
// calls they made.
func hammer(c *http.Client, url string, callers int, d, pause time.Duration) int64 {
	start := time.Now()
	var wg sync.WaitGroup
	var calls atomic.Int64
	for range callers {
		wg.Go(func() {
			for time.Since(start) < d {
				calls.Add(1)
				resp, err := c.Get(url)
				if err != nil {
					time.Sleep(pause)
					continue
				}
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	return calls.Load()
}

// testBucket is a token bucket for test servers: rate tokens a second up
// to burst, full at the start (x/time/rate's semantics, without making the
// SDK module require it), safe for concurrent use as x/time/rate's is: a
// server's handlers call it from one goroutine per connection.
type testBucket struct {
	mu                  sync.Mutex
	rate, burst, tokens float64
	last                time.Time
}

func newTestBucket(rate, burst float64) *testBucket {
	return &testBucket{rate: rate, burst: burst, tokens: burst}
}

// AllowN reports whether n tokens are available at now and takes them.
func (b *testBucket) AllowN(now time.Time, n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.last.IsZero() && now.After(b.last) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	if b.last.IsZero() || now.After(b.last) {
		b.last = now
	}
	if b.tokens < float64(n) {
		return false
	}
	b.tokens -= float64(n)
	return true
}
