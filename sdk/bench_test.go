//go:build go1.25

package sdk

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// sluiceHeaders is what an admitted request's response carries behind
// Sluice (headers: both): the SDK parses all of it on every response.
var sluiceHeaders = http.Header{
	"X-Ratelimit-Limit":     {"1000"},
	"X-Ratelimit-Remaining": {"999"},
	"X-Ratelimit-Reset":     {"1"},
	"Ratelimit-Policy":      {`"api";q=1000;w=1`},
	"Ratelimit":             {`"api";r=999;t=1`},
	"Content-Type":          {"text/plain; charset=utf-8"},
	"Date":                  {"Sun, 01 Mar 2026 12:00:00 GMT"},
}

// BenchmarkOverhead measures what the Transport adds to a plain 200: once
// against a loopback server through a real http.Transport, where the
// network dominates, and once against an in-memory RoundTripper, where the
// Transport's own cost is all there is.
func BenchmarkOverhead(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range sluiceHeaders {
			w.Header()[k] = v
		}
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	bare := &http.Transport{MaxIdleConnsPerHost: 16}
	defer bare.CloseIdleConnections()

	canned := rtFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: sluiceHeaders, Body: http.NoBody, Request: r}, nil
	})
	cases := []struct {
		name string
		rt   http.RoundTripper
		url  string
	}{
		{"loopback/bare", bare, srv.URL},
		{"loopback/sdk", NewTransport(bare), srv.URL},
		{"memory/bare", canned, "http://api.test/"},
		{"memory/sdk", NewTransport(canned), "http://api.test/"},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			req, _ := http.NewRequest("GET", c.url, nil)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := c.rt.RoundTrip(req)
				if err != nil || resp.StatusCode != 200 {
					b.Fatal(resp, err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
