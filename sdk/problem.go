package sdk

import (
	"context"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/sdk/header"
)

// maxProblem is how much of a refusal's body the Transport reads to find
// its problem document: the draft's are a few hundred bytes.
const maxProblem = 16 << 10

// problemWait is how long the Transport waits for a refusal's problem
// document after its headers. A server sends so short a body with its
// headers, or right behind them; one that has not arrived by then is
// stalled (a slow upstream, a proxy streaming an error page), and the
// refusal is acted on by its headers alone rather than wait for it.
const problemWait = 100 * time.Millisecond

// readRefusal completes what the headers of a refusal (429 or 503) said
// with its application/problem+json body (draft-ietf-httpapi-ratelimit-
// headers): the policies it names as violated (the first becomes
// in.Policy when the headers named none; the others are returned, for
// their views to hold the request's route too), and its retry-after member
// when no Retry-After field came. The document is read ahead (see
// readAhead) and waited for up to problemWait, or until ctx is done. The
// body stays whole for the caller, whether the document came in time or
// not: what is read ahead is put back in front of the rest.
func readRefusal(ctx context.Context, resp *http.Response, in *header.Info) (also []string) {
	if !header.IsProblem(resp.Header.Get("Content-Type")) || header.Cached(resp.Header) ||
		resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	b, ok := readAheadOf(resp, maxProblem, false).await(ctx, problemWait)
	if !ok {
		return nil
	}
	pr, ok := header.ParseProblem(b)
	if !ok {
		return nil
	}
	if in.Has&header.HasRetryAfter == 0 && pr.HasRetryAfter {
		in.RetryAfter = pr.RetryAfter
		in.Has |= header.HasRetryAfter
	}
	if len(pr.ViolatedPolicies) == 0 {
		return nil
	}
	if in.Policy == "" {
		in.Policy = pr.ViolatedPolicies[0]
	}
	return pr.ViolatedPolicies
}

// requestsOnly keeps of in what counts requests: a policy whose quota unit
// (qu) is content bytes or requests in flight says nothing about how many
// requests the client may send in a window, so only its waits (Retry-After,
// the wait of an exhausted quota) are kept.
func requestsOnly(in header.Info) header.Info {
	if in.Unit == "" || in.Unit == "requests" {
		return in
	}
	wait := in.Wait()
	out := header.Info{Policy: in.Policy, Unit: in.Unit}
	if wait > 0 {
		out.RetryAfter, out.Has = wait, header.HasRetryAfter
	}
	return out
}
