package sdk

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/sluicehq/sluice/shared/header"
	"golang.org/x/time/rate"
)

// Transport is an http.RoundTripper that retries what a rate-limited or
// overloaded server asks it to retry, no sooner than the server asks, and
// keeps requests to a host that it already knows would be rejected from
// being sent at all.
//
// A Transport is safe for concurrent use, and should be reused: the view
// of each host's limit that it learns from responses is shared by every
// request through it.
type Transport struct {
	base   http.RoundTripper
	cfg    config
	hosts  hosts
	routes routes
}

// NewTransport returns a Transport that sends requests through base
// (http.DefaultTransport when nil), configured by opts.
func NewTransport(base http.RoundTripper, opts ...Option) *Transport {
	if base == nil {
		base = http.DefaultTransport
	}
	return &Transport{base: base, cfg: newConfig(opts)}
}

// NewClient returns an http.Client whose Transport is
// NewTransport(nil, opts...). Set its Timeout, or give requests a context
// deadline, to bound a call as a whole: the Transport never sleeps past
// the deadline.
func NewClient(opts ...Option) *http.Client {
	return &http.Client{Transport: NewTransport(nil, opts...)}
}

// RoundTrip sends req, retrying as follows.
//
// Which outcomes are retried: a 429 for any method, since the server did
// not process the request; a 503 or a transport error only for idempotent
// methods (GET, HEAD, OPTIONS, TRACE, PUT, DELETE) or requests with an
// Idempotency-Key (or X-Idempotency-Key) header, since the request may
// have had effects. A request whose body cannot be replayed (a body
// without GetBody) is sent once. A retry sends the same method, URL,
// headers and, through GetBody, the same body.
//
// How long it waits: what the server asks (Retry-After, or the reset of an
// exhausted quota) is a floor: the wait is that plus up to 10% jitter
// (at most a second), never less. Without a hint, the BackOff decides.
//
// When it gives up and returns the last response with a nil error, its body
// unread, as the RoundTripper contract asks: when attempts run out, when
// the BackOff says Stop, when the server asks for a wait longer than
// MaxWait, as soon as the next attempt could not start before the
// context's deadline, and when the host's retry budget cannot pay for a
// retry the server did not schedule (see RetryBudget). If the last outcome was a transport error, that error
// is returned instead. Cancelling the context interrupts any wait and
// returns the context's error.
//
// Before each attempt, the request waits if a shared view of a limit that
// governs it (its policy's, or the host's) says no request can succeed yet
// (see the package documentation). If that wait
// exceeds MaxWait or passes the deadline, the first attempt is not sent at
// all and RoundTrip returns a *RateLimitError.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	c := &t.cfg
	now := c.clock.Now() // time.Now is not free: read it once per step
	h := t.hosts.get(req.URL.Host, now, c.budget)
	rk := routeOf(h.id, req.Method, req.URL.Path)
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil

	var (
		bo       backoff.BackOff
		resp     *http.Response // outcome of the latest attempt
		err      error
		lastInfo header.Info
		g        governing
		known    bool
	)
	for attempt := 0; ; {
		// Hold the attempt while a view that governs it says it would
		// fail, and pace it at the policy's rate once it has limited us.
		// The views are looked up again before every attempt: the answer to
		// the last one may have taught the route its policy.
		known = h.govern(&t.routes, rk, &g)
		var paced turns // the views whose pace this attempt has reserved
		for fresh := attempt == 0; ; fresh = false {
			if !fresh { // after any wait, and before a retry
				now = c.clock.Now()
			}
			if d, v, ok := t.pace(ctx, &g, &paced, now); ok {
				t.emit(ctx, RetryEvent{Request: req, Attempt: attempt, Reason: HostLimit, Delay: d, Limit: fromInfo(lastInfo), Policy: v.name})
				if e := t.sleep(ctx, d); e != nil {
					if attempt == 0 {
						closeBody(req)
					}
					return nil, e
				}
				continue
			}
			wait, holder, refills := h.acquire(&g, now, attempt == 0)
			if wait <= 0 {
				break
			}
			if refills {
				// Held by a token bucket until its next token: the turns
				// reserved before the hold are given back and taken again
				// after it, in the pacer's order. Kept, they would release
				// the whole crowd of waiters at once when the hold ends,
				// to empty the server's bucket again. (A window restores
				// its whole quota at the reset: there, the crowd that the
				// budget releases at once is what the server admits.)
				paced.giveBack(now)
			}
			ev := RetryEvent{Request: req, Attempt: attempt, Reason: HostLimit, Delay: wait, Limit: fromInfo(lastInfo), Policy: holder.name}
			if resp != nil {
				ev.StatusCode = resp.StatusCode
			}
			if why := t.tooLong(ctx, now, wait); why != "" {
				ev.GiveUp = why
				t.emit(ctx, ev)
				if attempt > 0 {
					return resp, err
				}
				closeBody(req)
				return nil, &RateLimitError{RetryAfter: wait, Host: req.URL.Host}
			}
			t.emit(ctx, ev)
			if e := t.sleep(ctx, wait); e != nil {
				if attempt == 0 {
					closeBody(req)
				}
				return nil, e
			}
			known = h.govern(&t.routes, rk, &g) // a concurrent answer may have taught the route
		}

		r := req
		if attempt > 0 && req.GetBody != nil && req.Body != nil && req.Body != http.NoBody {
			body, e := req.GetBody()
			if e != nil {
				h.observe(&t.routes, rk, true, &g, c.clock.Now(), 0, header.Info{}) // admitted, never sent
				return resp, err                                                    // the previous outcome stands
			}
			r = new(http.Request)
			*r = *req
			r.Body = body
		}
		attempt++
		resp, err = t.base.RoundTrip(r)
		now = c.clock.Now()

		var reason Reason
		status := 0
		lastInfo = header.Info{}
		switch {
		case err != nil:
			if ctx.Err() == nil && !permanent(err) {
				reason = TransportError
			}
		case resp.StatusCode == http.StatusTooManyRequests:
			reason = RateLimited
		case resp.StatusCode == http.StatusServiceUnavailable:
			reason = Unavailable
		}
		if resp != nil {
			status = resp.StatusCode
			lastInfo, _ = header.Parse(resp.Header, now)
		}
		h.observe(&t.routes, rk, known, &g, now, status, lastInfo)
		if reason == 0 {
			return resp, err
		}

		// A retry is wanted. Find out whether it is allowed, and when.
		ev := RetryEvent{Request: req, Attempt: attempt, Reason: reason, StatusCode: status, Err: err, Limit: fromInfo(lastInfo)}
		var hint time.Duration
		if reason != TransportError {
			hint = lastInfo.Wait()
		}
		switch {
		case !replayable:
			ev.GiveUp = GiveUpBody
		case reason != RateLimited && !idempotent(req):
			ev.GiveUp = GiveUpIdempotent
		case attempt >= c.maxAttempts:
			ev.GiveUp = GiveUpAttempts
		}
		if ev.GiveUp == "" {
			if bo == nil {
				bo = c.newBackOff()
				bo.Reset()
			}
			ev.Delay = bo.NextBackOff()
			switch {
			case ev.Delay == backoff.Stop:
				ev.Delay, ev.GiveUp = hint, GiveUpBackOff
			case hint > 0:
				ev.Delay = hint + jitter(hint)
			case ev.Delay > c.maxWait:
				ev.Delay = c.maxWait // a computed wait is shortened, a server's is not
			}
		}
		if ev.GiveUp == "" {
			ev.Delay, ev.GiveUp = t.fit(ctx, now, hint, ev.Delay)
		}
		// A retry the server did not schedule spends the host's retry
		// budget (see RetryBudget); one it asked for is free.
		if ev.GiveUp == "" && (reason != RateLimited || hint <= 0) && !h.withdraw(now) {
			ev.GiveUp = GiveUpBudget
		}
		if ev.GiveUp != "" {
			if c.observed() {
				t.emit(ctx, ev)
			}
			return resp, err
		}
		t.emit(ctx, ev)
		if resp != nil {
			park(resp)
		}
		if e := t.sleep(ctx, ev.Delay); e != nil {
			if c.observed() {
				ev.GiveUp, ev.Err = GiveUpContextDone, e
				t.emit(ctx, ev)
			}
			return nil, e
		}
	}
}

// pace reserves the attempt's turn at the rate of each view of g that
// paces (see view), in order, and returns the first wait to make, with the
// view that asks for it. paced marks the views already reserved for this
// attempt. Pacing is advice: a wait that would exceed MaxWait or pass the
// deadline is cancelled and skipped, never a reason to fail.
func (t *Transport) pace(ctx context.Context, g *governing, paced *turns, now time.Time) (time.Duration, *view, bool) {
next:
	for _, v := range g.vs[:g.n] {
		free := -1
		for j, p := range paced.vs {
			if p == v {
				continue next
			}
			if p == nil && free < 0 {
				free = j
			}
		}
		d, res, ok := v.pace(now)
		if !ok {
			continue
		}
		if t.tooLong(ctx, now, d) != "" {
			res.CancelAt(now)
			continue
		}
		if free >= 0 {
			paced.vs[free], paced.rs[free] = v, res
		}
		if d <= 0 {
			continue
		}
		return d, v, true
	}
	return 0, nil, false
}

// turns are the pacing turns one attempt has reserved, one per view.
type turns struct {
	vs [maxViews]*view
	rs [maxViews]*rate.Reservation
}

// giveBack cancels the reserved turns (those not yet due go back to their
// pacer) and forgets them, so that the attempt reserves new ones.
func (p *turns) giveBack(now time.Time) {
	for i, r := range p.rs {
		if r != nil {
			r.CancelAt(now)
		}
		p.vs[i], p.rs[i] = nil, nil
	}
}

// fit checks a wait of d, of which hint is what the server asked for,
// against MaxWait and the context's deadline. A server's hint that does
// not fit gives up; the jitter on top of it shrinks to fit.
func (t *Transport) fit(ctx context.Context, now time.Time, hint, d time.Duration) (time.Duration, string) {
	if hint > t.cfg.maxWait {
		return hint, GiveUpMaxWait
	}
	if d > t.cfg.maxWait {
		d = t.cfg.maxWait
	}
	if dl, ok := ctx.Deadline(); ok {
		left := dl.Sub(now)
		if hint >= left || (hint == 0 && d >= left) {
			return max(hint, d), GiveUpDeadline
		}
		if d >= left {
			d = hint + (left-hint)/2
		}
	}
	return d, ""
}

// tooLong reports why a wait of d cannot be made, or "".
func (t *Transport) tooLong(ctx context.Context, now time.Time, d time.Duration) string {
	if d > t.cfg.maxWait {
		return GiveUpMaxWait
	}
	if dl, ok := ctx.Deadline(); ok && !now.Add(d).Before(dl) {
		return GiveUpDeadline
	}
	return ""
}

func (t *Transport) emit(ctx context.Context, ev RetryEvent) {
	if t.cfg.observed() {
		t.cfg.emit(ctx, ev)
	}
}

// sleep waits for d on the Transport's clock, or until ctx is done.
func (t *Transport) sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	tm := t.cfg.clock.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// jitter returns a random extra wait of up to a tenth of the server's hint,
// at most a second: enough to spread clients that were told the same
// instant, never so much that the wait is noticeably longer than asked.
func jitter(hint time.Duration) time.Duration {
	j := min(hint/10, time.Second)
	if j <= 0 {
		return 0
	}
	return rand.N(j + 1)
}

// park reads the body of a response that a retry is about to replace, up to
// DrainLimit, and closes it, so that its connection goes back to the pool
// during the wait. The response keeps a readable copy of the body, since it
// is returned if the retry is given up before it is sent. A body longer than
// DrainLimit keeps its first DrainLimit bytes and then reads as an error.
func park(resp *http.Response) {
	if resp.Body == nil || resp.Body == http.NoBody {
		return
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, DrainLimit+1))
	resp.Body.Close()
	switch {
	case err != nil:
		resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b), errReader{err}))
	case len(b) > DrainLimit:
		resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b[:DrainLimit]), errReader{errTruncated}))
	default:
		resp.Body = io.NopCloser(bytes.NewReader(b))
	}
}

var errTruncated = errors.New("sdk: body of a retried response cut at DrainLimit")

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// idempotent reports whether req may be sent twice without a second effect
// (RFC 9110 section 9.2.2), or says so with an idempotency key; net/http's
// own retry rules look at the same headers.
func idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace,
		http.MethodPut, http.MethodDelete:
		return true
	}
	if _, ok := req.Header["Idempotency-Key"]; ok {
		return true
	}
	_, ok := req.Header["X-Idempotency-Key"]
	return ok
}

// permanent reports transport errors that a retry cannot fix.
func permanent(err error) bool {
	var (
		cv *tls.CertificateVerificationError
		ua x509.UnknownAuthorityError
		hn x509.HostnameError
		ci x509.CertificateInvalidError
		rh tls.RecordHeaderError
	)
	if errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &hn) ||
		errors.As(err, &ci) || errors.As(err, &rh) {
		return true
	}
	return strings.Contains(err.Error(), "unsupported protocol scheme")
}
