// Package sdk is the Go client for APIs that rate-limit their callers, such
// as those behind the Sluice Envoy plugin. It is an http.RoundTripper that
// makes the well-behaved client the easy one to write:
//
//	client := sdk.NewClient(sdk.WithMaxAttempts(5))
//	resp, err := client.Do(req) // retried, paced, never sooner than asked
//
// or, around an existing transport:
//
//	client := &http.Client{Transport: sdk.NewTransport(myTransport)}
//
// # Retries
//
// A 429 is retried for any method, because the server did not process the
// request; a 503 or a transport error only for idempotent methods or
// requests carrying an Idempotency-Key header, because a retry of a request
// that had an effect would repeat it. Bodies are replayed through
// Request.GetBody (which http.NewRequest sets for in-memory bodies); a body
// that cannot be replayed is sent once, and a retry whose GetBody fails is
// given up (GiveUpGetBody), returning the last response.
//
// The server's hints are a floor: Retry-After (seconds or any HTTP-date),
// the IETF draft's RateLimit and RateLimit-Policy fields, X-RateLimit-* and
// X-Rate-Limit-* (epoch resets, as GitHub sends, are told apart from delta
// resets, and the response's Date corrects for clock skew). The client
// never retries sooner than asked; jitter only adds to a hint. Without a
// hint, an exponential backoff with jitter (github.com/cenkalti/backoff/v4)
// decides, from a base of its class, as the AWS SDKs do: 1 s after a
// throttle (a 429, a 503 with Retry-After), 50 ms after a transient failure
// (a transport error, a 503 without).
//
// Every wait is bounded. A server that asks for more than MaxWait gets its
// response returned at once, so the caller decides rather than a goroutine
// sleeping for an hour; a hold of the shared view longer than MaxWait fails
// requests fast, unsent, except that a hold longer than LongHold lets one
// probe through per max(MaxWait, ProbeEvery), whose answer replaces the
// hold (one absurd reset cannot lock a host out for good). A wait that would pass the context's deadline is not
// started: the Transport returns as soon as it knows the next attempt could
// not start in time. Cancelling the context interrupts any wait. When
// attempts run out, the last response is returned with a nil error and its
// body readable, as the RoundTripper contract requires; CheckResponse turns
// it into a *RateLimitError for callers who want an error. Nor does a slow
// body hold anything up: the body of a response that a retry replaces is
// drained in the background during the wait, and a refusal's problem
// document is waited for at most 100 ms after its headers.
//
// # One view of the limit per policy, and per host
//
// Requests through one Transport share what the server has said. After a
// 429 with a wait, or once Remaining reaches 0, the other requests that the
// same limit governs wait for the reset instead of being sent and
// rejected; and when the reset comes, no more requests are released than
// the quota the server has shown, so that thirty goroutines sharing a limit
// of ten do not send a wave of twenty requests that are bound to fail. The
// view only delays requests the server has said it would reject; a host
// that sends no rate-limit headers is not slowed at all.
//
// Which requests a limit governs: a server that names its policies (the
// IETF draft's RateLimit and RateLimit-Policy fields; Sluice names each
// policy after its rule, and names in every answer the rule that rejected
// the request or, for an admitted one, the most constrained rule that
// matched) limits them separately, so the Transport keeps one view per
// policy, and learns from the answers which routes (method and path, with
// identifiers such as /orders/1234 taken as /orders/{}) each policy
// governs. A cool-down of the checkout policy then holds requests to
// /checkout, never those to /browse. A route the Transport has no answer
// for yet is held by no policy, except while the host has named only one:
// a server with a single limit applies it to every route, so that one
// holds them all, as before. Answers that name no policy (X-RateLimit-*,
// Retry-After alone, a 503 with Retry-After) update a view of the whole
// host, which holds every request to it. What is learned is bounded: 64
// policies per host, 8192 routes and 1024 hosts per Transport (past that,
// hosts with nothing to enforce are forgotten first, then the least
// recently used).
//
// # Retry budget
//
// Retries during an outage multiply the load on a server that is already
// failing, by up to MaxAttempts for every client. So each host has a retry
// budget (see RetryBudget, WithRetryBudget): by default, retries after a
// 503, a transport error or a 429 without a hint add at most 10% to the
// requests sent to the host, plus 1 per second, plus a one-time allowance
// of 100, where a throttle's retry costs 5/14 of a transient one's. A retry
// that a 429 scheduled (Retry-After, or the reset of an exhausted quota)
// is free: the server asked for it, and the views above hold the other
// requests until then. With the budget empty, the Transport returns the
// last response at once and the retry hook hears GiveUpBudget.
//
// # Adaptive rate
//
// Many servers answer 429 with no hint at all. With WithAdaptiveRate, the
// Transport learns from those the rate the host admits (per policy when
// the answer names one), the AWS SDKs' way (a CUBIC curve: see
// WithAdaptiveRate), and paces every attempt to it; a wait for a turn
// that would exceed MaxWait or pass the deadline gives up at once, as a
// hold does. The rate climbs back as the 429s stop.
//
// # Observability
//
// The Transport is silent by default. WithRetryHook reports every wait and
// give-up with its attempt, reason, delay, the parsed limits and the policy
// that holds the request;
// WithLogger logs them with log/slog.
package sdk
