package sdk

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/sluicehq/sluice/sdk/header"
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
// context's deadline, when the host's retry budget cannot pay for a retry
// the server did not schedule (see RetryBudget), and when GetBody fails to
// give the retry its body. If the last outcome was a transport error, that
// error is returned instead. Cancelling the context interrupts any wait
// and returns the context's error.
//
// A slow body holds up neither a retry nor the answer: the body of a
// response that a retry replaces is drained in the background during the
// wait, never waited for (see park), and a refusal's problem document is
// waited for at most problemWait (see readRefusal).
//
// Before each attempt, the request waits if a shared view of a limit that
// governs it (its policy's, or the host's) says no request can succeed yet
// (see the package documentation). If that wait
// exceeds MaxWait or passes the deadline, the first attempt is not sent at
// all and RoundTrip returns a *RateLimitError; but a hold longer than
// LongHold and MaxWait lets one request through per max(MaxWait,
// ProbeEvery) without a word from the server, and that probe's answer
// replaces the hold (see ProbeEvery).
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	c := t.newCall(req)
	for {
		if resp, err, stop := c.hold(); stop {
			return resp, err
		}
		reason, stop := c.send()
		if stop || reason == 0 {
			return c.resp, c.err
		}
		ev, stop := c.plan(reason)
		if stop {
			return c.resp, c.err
		}
		if err := c.wait(ev); err != nil {
			return nil, err
		}
	}
}

// call is one RoundTrip in progress: the request, what the Transport knows
// of its host, and the outcome of its latest attempt. Its phases run in
// turn for every attempt: hold (until the views that govern it let it
// go), send, plan (whether and when to retry) and wait.
type call struct {
	t          *Transport
	req        *http.Request
	ctx        context.Context
	h          *host
	rk         routeKey
	replayable bool
	now        time.Time // time.Now is not free: read once per step

	bos     [2]backoff.BackOff // by retry class (see retryClass), made together: see config
	resp    *http.Response     // outcome of the latest attempt
	err     error
	info    header.Info // its rate-limit headers
	g       governing
	reason  Reason    // why it is retried, if it is
	known   bool      // the route's policies are known
	pl      places    // its ticket, and the lines it waits in (see line)
	inLine  time.Time // when its wait in line began (see sleepHeld); zero: not in line
	attempt int       // attempts sent so far
	// cut: the latest attempt was refused by a bare 429 that cut a learned
	// rate (WithAdaptiveRate), a probe past the rate (see gap).
	cut bool
}

func (t *Transport) newCall(req *http.Request) *call {
	c := &call{t: t, req: req, ctx: req.Context(), now: t.cfg.clock.Now()}
	c.h = t.hosts.get(req.URL.Host, c.now, t.cfg.budget, t.cfg.adaptive)
	c.pl.ticket = c.h.tickets.Add(1)
	c.rk = routeOf(c.h.id, req.Method, req.URL.Path)
	c.replayable = req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	return c
}

// send makes the attempt that hold admitted, reports its outcome to the
// views, and says why it should be retried (0: it should not). stop says
// the body could not be replayed, and the previous outcome stands.
func (c *call) send() (reason Reason, stop bool) {
	t := c.t
	r, ok := c.request()
	if !ok {
		return 0, true
	}
	prev := c.resp
	c.attempt++
	c.resp, c.err = t.base.RoundTrip(r)
	c.now = t.cfg.clock.Now()
	discard(prev) // replaced: see park

	status := 0
	c.info = header.Info{}
	switch {
	case c.err != nil:
		if c.ctx.Err() == nil && !permanent(c.err) {
			reason = TransportError
		}
	case c.resp.StatusCode == http.StatusTooManyRequests:
		reason = RateLimited
	case c.resp.StatusCode == http.StatusServiceUnavailable:
		reason = Unavailable
	}
	var also []string
	if c.resp != nil {
		status = c.resp.StatusCode
		c.info, _ = header.Parse(c.resp.Header, c.now)
		if reason != 0 {
			also = readRefusal(c.ctx, c.resp, &c.info)
		}
		c.info = requestsOnly(c.info)
	}
	c.cut = c.h.observe(&t.routes, c.rk, c.known, &c.g, c.now, status, c.info, also)
	c.reason = reason
	return reason, false
}

// request returns what the next attempt sends: the caller's request, or
// for a retry of a request with a body, a copy with the body from GetBody.
// ok false: GetBody failed, so the retry announced cannot be sent; the
// hook hears it given up (GiveUpGetBody), and the previous outcome stands.
func (c *call) request() (r *http.Request, ok bool) {
	t, req := c.t, c.req
	if c.attempt == 0 || req.GetBody == nil || req.Body == nil || req.Body == http.NoBody {
		return req, true
	}
	body, err := req.GetBody()
	if err != nil {
		c.h.observe(&t.routes, c.rk, true, &c.g, t.cfg.clock.Now(), 0, header.Info{}, nil) // admitted, never sent
		ev := RetryEvent{Request: req, Attempt: c.attempt, Reason: c.reason, Err: err,
			Limit: fromInfo(c.info), GiveUp: GiveUpGetBody}
		if c.resp != nil {
			ev.StatusCode = c.resp.StatusCode
		}
		t.emit(c.ctx, ev)
		return nil, false
	}
	r = new(http.Request)
	*r = *req
	r.Body = body
	return r, true
}

// plan decides whether the outcome of the last attempt is retried, and
// after which wait; stop says it is not (the hook has heard why).
func (c *call) plan(reason Reason) (ev RetryEvent, stop bool) {
	t, cfg := c.t, &c.t.cfg
	ev = RetryEvent{Request: c.req, Attempt: c.attempt, Reason: reason, Err: c.err, Limit: fromInfo(c.info)}
	if c.resp != nil {
		ev.StatusCode = c.resp.StatusCode
	}
	var hint time.Duration
	if reason != TransportError {
		hint = c.info.Wait()
	}
	switch {
	case !c.replayable:
		ev.GiveUp = GiveUpBody
	case reason != RateLimited && !idempotent(c.req):
		ev.GiveUp = GiveUpIdempotent
	case c.attempt >= cfg.maxAttempts:
		ev.GiveUp = GiveUpAttempts
	}
	class := retryClass(reason, hint)
	if ev.GiveUp == "" {
		if c.bos[class] == nil {
			c.bos = cfg.newBackOffs()
		}
		ev.Delay = c.bos[class].NextBackOff()
		switch {
		case ev.Delay == backoff.Stop:
			ev.Delay, ev.GiveUp = hint, GiveUpBackOff
		case hint > 0:
			ev.Delay = hint + jitter(hint)
		case ev.Delay > cfg.maxWait:
			ev.Delay = cfg.maxWait // a computed wait is shortened, a server's is not
		}
	}
	if ev.GiveUp == "" {
		ev.Delay, ev.GiveUp = t.fit(c.ctx, c.now, hint, ev.Delay)
	}
	if ev.GiveUp == "" {
		ev.Delay, ev.GiveUp = c.heldPast(ev.Delay)
	}
	// A retry the server did not schedule spends the host's retry budget
	// (see RetryBudget), at the cost of its class; one it asked for is free.
	if ev.GiveUp == "" && (reason != RateLimited || hint <= 0) && !c.h.withdraw(c.now, class) {
		ev.GiveUp = GiveUpBudget
	}
	if ev.GiveUp != "" {
		t.emit(c.ctx, ev)
		return ev, true
	}
	return ev, false
}

// wait announces the retry and waits for it; the latest response is
// parked meanwhile (see park).
func (c *call) wait(ev RetryEvent) error {
	t := c.t
	t.emit(c.ctx, ev)
	if c.resp != nil {
		park(c.resp)
	}
	if e := t.sleep(c.ctx, ev.Delay); e != nil {
		discard(c.resp)
		if t.cfg.observed() {
			ev.GiveUp, ev.Err = GiveUpContextDone, e
			t.emit(c.ctx, ev)
		}
		return e
	}
	return nil
}

// heldPast checks a retry's wait of d against the holds the server has
// asked for (a Retry-After, an exhausted quota's reset: blocked) on the
// views that govern the retry: one that outlasts the wait by more than
// MaxWait, or passes the deadline, means the retry cannot be sent, and the
// call returns now rather than after sleeping d to find it out (the
// contract: return as soon as the next attempt is known not to start in
// time). It returns the wait, or the hold that does not fit, and why.
// Holds on a spent quota are not counted: answers may restore it sooner.
func (c *call) heldPast(d time.Duration) (time.Duration, string) {
	var g governing
	c.h.govern(&c.t.routes, c.rk, &g)
	b := time.Duration(0)
	for _, v := range g.vs[:g.n] {
		b = max(b, v.blockedFor(c.now))
	}
	if b <= d {
		return d, ""
	}
	if why := c.t.tooLong(c.ctx, c.now.Add(d), b-d); why != "" {
		return b, why
	}
	return d, ""
}

// The two classes of retries, with their own backoff base and their own
// cost against the retry budget (the AWS SDKs' split): a throttle (a 429,
// or a 503 that pushes back with a wait: the server sheds load, and a
// short wait would meet the same answer) and a transient failure (a
// transport error, a 503 without a wait: a lost connection, a restarting
// instance, usually over at once).
const (
	throttleRetry  = 0
	transientRetry = 1
)

func retryClass(r Reason, hint time.Duration) int {
	if r == RateLimited || (r == Unavailable && hint > 0) {
		return throttleRetry
	}
	return transientRetry
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
	return t.sleepWake(ctx, d, nil, nil)
}

// sleepWake waits for d on the Transport's clock, until wake or moved is
// closed (a hold that ended early, a pace that changed; nil: never), or
// until ctx is done.
func (t *Transport) sleepWake(ctx context.Context, d time.Duration, wake, moved <-chan struct{}) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	tm := t.cfg.clock.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C():
		return nil
	case <-wake:
		return nil
	case <-moved:
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
