package sdk

import (
	"bytes"
	"io"
	"net/http"

	"github.com/sluicehq/sluice/shared/header"
)

// maxProblem is how much of a refusal's body the Transport reads to find
// its problem document: the draft's are a few hundred bytes.
const maxProblem = 16 << 10

// readRefusal completes what the headers of a refusal (429 or 503) said
// with its application/problem+json body (draft-ietf-httpapi-ratelimit-
// headers): the policies it names as violated (the first becomes
// in.Policy when the headers named none; the others are returned, for
// their views to hold the request's route too), and its retry-after member
// when no Retry-After field came. The body stays whole for the caller:
// what is read is put back in front of the rest.
func readRefusal(resp *http.Response, in *header.Info) (also []string) {
	if !header.IsProblem(resp.Header.Get("Content-Type")) || header.Cached(resp.Header) {
		return nil
	}
	b := peekBody(resp, maxProblem)
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

// peekBody reads up to n bytes of resp's body and puts them back: the
// body reads the same bytes, then the rest, and closes the original. A
// read error is kept for the caller to meet after the bytes read.
func peekBody(resp *http.Response, n int) []byte {
	if resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, int64(n)))
	var rest io.Reader = resp.Body
	if err != nil {
		rest = errReader{err}
	}
	resp.Body = peekedBody{Reader: io.MultiReader(bytes.NewReader(b), rest), Closer: resp.Body}
	return b
}

type peekedBody struct {
	io.Reader
	io.Closer
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
