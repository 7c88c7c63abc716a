//go:build go1.25

package sdk

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// liar answers every request with the same lying (or absurd) rate-limit
// headers, until recover is set: then a plain 200 with no rate-limit
// header (or the headers in ok), the answer of a server that has recovered.
type liar struct {
	status    int
	kv        []string
	ok        []string
	recovered atomic.Bool
	mu        sync.Mutex
	hits      []time.Time
}

func (l *liar) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	l.hits = append(l.hits, time.Now())
	l.mu.Unlock()
	if l.recovered.Load() {
		reply(200, l.ok...)(w)
		return
	}
	reply(l.status, l.kv...)(w)
}

func (l *liar) Hits() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.hits...)
}

// absurdHolds are answers that hold a host far longer than MaxWait: resets
// centuries ahead, a correct epoch reset read against a Date of 1970, and
// a delta reset of three years. Built inside a synctest bubble (time.Now is
// the bubble's).
func absurdHolds() map[string]*liar {
	now := time.Now()
	soon := now.Add(time.Minute)
	year2500 := strconv.FormatInt(time.Date(2500, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), 10)
	const date1970 = "Thu, 01 Jan 1970 00:00:00 GMT"
	return map[string]*liar{
		"epoch reset in 2500": {status: 200, kv: []string{
			"X-Ratelimit-Limit", "10", "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", year2500}},
		"epoch reset next to Date 1970": {status: 200, kv: []string{"Date", date1970,
			"X-Ratelimit-Limit", "10", "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", strconv.FormatInt(soon.Unix(), 10)}},
		"delta reset 99999999": {status: 200, kv: []string{
			"X-Ratelimit-Limit", "10", "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", "99999999"}},
		"429 retry-after 99999999": {status: 429, kv: []string{"Retry-After", "99999999"}},
		"429 retry-after date next to Date 1970": {status: 429, kv: []string{"Date", date1970,
			"Retry-After", soon.UTC().Format(http.TimeFormat)}},
		"draft t huge": {status: 200, kv: []string{
			"Ratelimit-Policy", `"p";q=10;w=99999999`, "Ratelimit", `"p";r=0;t=99999999`}},
		"429 two days": {status: 429, kv: []string{"Retry-After", "172800"}},
	}
}

// TestAbsurdHoldIsProbed: one answer that holds the host for years (or
// over a day) must not lock the host out for good. Requests made within the
// probe interval fail fast with a *RateLimitError and are not sent (the
// contract: no waits beyond MaxWait, no hammering); the first request
// made after the interval is sent, and when the server has recovered its
// 200 lifts the hold, and the next requests flow.
func TestAbsurdHoldIsProbed(t *testing.T) {
	for _, name := range absurdNames() {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { probeRecovers(t, absurdHolds()[name]) })
		})
	}
}

// absurdNames lists absurdHolds' cases in a stable order.
func absurdNames() []string {
	var names []string
	for name := range absurdHolds() {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// probeEvery is how often an absurd hold lets a request through to re-check
// it, with the default MaxWait (60 s): max(MaxWait, 1 h).
const probeEvery = time.Hour

func probeRecovers(t *testing.T, srv *liar) {
	c := &http.Client{Transport: NewTransport(handlerRT{h: srv, latency: 10 * time.Millisecond})}
	get := func() (*http.Response, error) { return c.Get("http://liar.test/x") }
	resp, err := get()
	if err != nil {
		t.Fatalf("first request: %v", err)
	}
	resp.Body.Close()
	start := time.Now()
	for _, at := range []time.Duration{0, time.Second, 30 * time.Minute, 59 * time.Minute} {
		time.Sleep(at - time.Since(start))
		_, err := get()
		var rle *RateLimitError
		if !errors.As(err, &rle) {
			t.Fatalf("request %v after the hold: err %v, want a *RateLimitError", at, err)
		}
	}
	if n := len(srv.Hits()); n != 1 {
		t.Fatalf("%d requests sent within the probe interval, want 1", n)
	}
	srv.recovered.Store(true)
	time.Sleep(probeEvery + time.Second - time.Since(start))
	for i := range 5 {
		resp, err := get()
		if err != nil {
			t.Fatalf("request %d after the probe interval: %v (the host is locked out)", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d after the probe interval: status %d", i, resp.StatusCode)
		}
	}
	if n := len(srv.Hits()); n != 6 {
		t.Errorf("%d requests sent, want 6", n)
	}
}

// TestAbsurdHoldProbeNamesPolicy: the host-level view holds every request
// after a legacy 429 asking for years; the probe's answer, a 200, names a
// policy instead (the server now speaks draft headers). The host-level
// hold is not the server's word any more and is lifted: the next requests
// flow, counted by the policy's view.
func TestAbsurdHoldProbeNamesPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &liar{status: 429, kv: []string{"Retry-After", "99999999"},
			ok: []string{"Ratelimit-Policy", `"p";q=100;w=60`, "Ratelimit", `"p";r=90;t=60`}}
		probeRecovers(t, srv)
	})
}

// TestAbsurdHoldProbesRarely: while the server keeps answering with a hold
// far beyond MaxWait, after one request has learnt it, 8 callers asking as
// fast as they can (a pause of a sixtieth of the interval after an error)
// send one request per probe interval, max(MaxWait, 1 h): a server that
// says "come back in two days" gets an occasional request, and each answer
// renews the hold.
func TestAbsurdHoldProbesRarely(t *testing.T) {
	for _, name := range absurdNames() {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { probesRarely(t, absurdHolds()[name], DefaultMaxWait, probeEvery) })
		})
	}
	for _, maxWait := range []time.Duration{0, time.Second, 2 * time.Hour} {
		t.Run(fmt.Sprintf("429 two days, MaxWait %v", maxWait), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				probesRarely(t, absurdHolds()["429 two days"], maxWait, max(maxWait, probeEvery))
			})
		})
	}
}

func probesRarely(t *testing.T, srv *liar, maxWait, every time.Duration) {
	c := &http.Client{Transport: NewTransport(handlerRT{h: srv, latency: 10 * time.Millisecond}, WithMaxWait(maxWait))}
	resp, err := c.Get("http://liar.test/x") // the lesson
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	d := 10 * every
	calls := hammer(c, "http://liar.test/x", 8, d, every/60)
	hits := srv.Hits()
	t.Logf("%d calls in %v, %d sent (the first before the hold)", calls, d, len(hits))
	if len(hits) > 11 {
		t.Errorf("%d requests sent in %v, want at most 11 (one per %v)", len(hits), d, every)
	}
	if len(hits) < 9 {
		t.Errorf("%d requests sent in %v, want at least 9 (one probe per %v)", len(hits), d, every)
	}
	for i := 1; i < len(hits); i++ {
		if gap := hits[i].Sub(hits[i-1]); gap < every {
			t.Errorf("requests %d and %d sent %v apart, want at least %v", i-1, i, gap, every)
		}
	}
}

// TestHonestLongHoldIsNotProbed: a hold of an hour or less is the server's
// word: while it lasts, requests fail fast, unsent (the
// hold is longer than MaxWait), and none goes out as a probe.
func TestHonestLongHoldIsNotProbed(t *testing.T) {
	for _, hold := range []string{"300", "3600"} {
		t.Run("Retry-After "+hold, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &liar{status: 429, kv: []string{"Retry-After", hold}}
				c := &http.Client{Transport: NewTransport(handlerRT{h: srv, latency: 10 * time.Millisecond})}
				resp, err := c.Get("http://liar.test/x") // the lesson
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				secs, _ := strconv.Atoi(hold)
				d := time.Duration(secs)*time.Second - time.Minute
				calls := hammer(c, "http://liar.test/x", 4, d, d/100)
				if n := len(srv.Hits()); n != 1 {
					t.Errorf("%d calls in %v of a %ss hold sent %d requests, want 1 (the lesson)", calls, d, hold, n)
				}
			})
		})
	}
}
