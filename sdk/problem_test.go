//go:build go1.25

package sdk

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/sdk/header"
)

// problem answers a refusal as Sluice does with `"body": "problem"`:
// application/problem+json naming the violated policies, with or without
// the rate-limit fields.
func problem(status int, retryAfter string, policies ...string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", header.ProblemContentType)
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(status)
		w.Write(header.AppendProblem(nil, status, policies, 2*time.Second))
	}
}

// TestProblemBodyHoldsViolatedPolicies: a 429 whose only hint is its
// problem document (no rate-limit header, no Retry-After field) holds the
// routes of every policy it names, for the wait its retry-after member
// says, and no other route.
func TestProblemBodyHoldsViolatedPolicies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &scripted{now: time.Now, steps: []func(http.ResponseWriter){problem(429, "", "checkout", "global")}}
		log := newHoldLog()
		c := &http.Client{Transport: NewTransport(handlerRT{h: s, latency: time.Millisecond}, WithRetryHook(log.hook))}
		start := time.Now()
		var wg sync.WaitGroup
		wg.Go(func() { do(t, c, "POST", "http://api.test/checkout") })
		time.Sleep(100 * time.Millisecond)
		wg.Go(func() { do(t, c, "POST", "http://api.test/checkout") })
		wg.Go(func() { do(t, c, "GET", "http://api.test/browse") })
		wg.Wait()
		hits := s.Hits()
		var checkout []time.Duration
		for _, h := range hits {
			if h.path == "/checkout" {
				checkout = append(checkout, h.at.Sub(start))
			} else if d := h.at.Sub(start); d > 200*time.Millisecond {
				t.Errorf("/browse sent after %v: held by a policy that does not govern it", d)
			}
		}
		// The refused request and the second one both wait for the 2 s of
		// the body's retry-after.
		if len(checkout) != 3 || checkout[1] < 2*time.Second || checkout[2] < 2*time.Second {
			t.Errorf("/checkout sent at %v; want the refusal, then two after its 2 s", checkout)
		}
		n, _, pols := log.get("/checkout")
		if n == 0 || !(pols["checkout"] || pols["global"]) {
			t.Errorf("second /checkout held %d times by %v; want held by the violated policies", n, pols)
		}
	})
}

// TestProblemBodyStaysReadable: the Transport reads a refusal's problem
// document, and the caller still gets every byte of the body, whether it
// is returned at once (a wait longer than MaxWait), after the retries run
// out, or longer than what the Transport reads.
func TestProblemBodyStaysReadable(t *testing.T) {
	doc := string(header.AppendProblem(nil, 429, []string{"checkout"}, time.Hour))
	long := `{"violated-policies":["p"],"pad":"` + strings.Repeat("x", 3*maxProblem) + `"}`
	for _, c := range []struct {
		name, body string
		opts       []Option
	}{
		{"MaxWait", doc, nil},
		{"attempts run out", doc, []Option{WithMaxAttempts(2), WithMaxWait(2 * time.Hour)}},
		{"longer than read", long, []Option{WithMaxAttempts(1)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "application/problem+json; charset=utf-8")
					w.Header().Set("Retry-After", "3600")
					w.WriteHeader(429)
					io.WriteString(w, c.body)
				})
				tr := NewTransport(handlerRT{h: h, latency: time.Millisecond}, c.opts...)
				resp, err := (&http.Client{Transport: tr}).Get("http://api.test/checkout")
				if err != nil || resp.StatusCode != 429 {
					t.Fatalf("%v, %v", resp, err)
				}
				if got := readBody(t, resp); got != c.body {
					t.Errorf("body: %d bytes, want the %d the server sent", len(got), len(c.body))
				}
			})
		})
	}
}

// TestCachedAndNonRequestLimits: rate-limit fields on a response served
// from a cache (Age) are ignored, as draft-11 asks; a policy counting
// content bytes (qu) holds nothing at Remaining 0 unless it asks for a
// wait.
func TestCachedAndNonRequestLimits(t *testing.T) {
	for _, c := range []struct {
		name string
		kv   []string
	}{
		{"cached", []string{"Age", "120", "RateLimit", `"api";r=0;t=30`, "RateLimit-Policy", `"api";q=10;w=60`}},
		{"content-bytes", []string{"RateLimit", `"bytes";r=0;t=30`, "RateLimit-Policy", `"bytes";q=1000;w=60;qu="content-bytes"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &scripted{now: time.Now, steps: []func(http.ResponseWriter){reply(200, c.kv...)}}
				cl := &http.Client{Transport: NewTransport(handlerRT{h: s, latency: time.Millisecond})}
				start := time.Now()
				do(t, cl, "GET", "http://api.test/")
				do(t, cl, "GET", "http://api.test/")
				if d := time.Since(start); d != 2*time.Millisecond {
					t.Errorf("two requests took %v, want 2ms: the second was held", d)
				}
			})
		})
	}
}
