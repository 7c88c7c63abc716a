package envoytest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// NewClient returns an HTTP/1.1 client for load against loopback: no proxy,
// no compression, up to maxConns keep-alive connections per host, so that a
// burst of maxConns concurrent requests reuses connections instead of
// exhausting ephemeral ports.
func NewClient(maxConns int) *http.Client {
	if maxConns <= 0 {
		maxConns = 64
	}
	return &http.Client{
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        maxConns,
			MaxIdleConnsPerHost: maxConns,
			IdleConnTimeout:     30 * time.Second,
			DisableCompression:  true,
			ForceAttemptHTTP2:   false,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// ClientIP returns a distinct IPv4 address for every i in [0, 4325376):
// 198.18.0.0/15 (the benchmarking range) first, then 100.64.0.0/10; i wraps
// around beyond. Send it as X-Forwarded-For to an Envoy with
// XFFNumTrustedHops 1 to pose as client number i.
func ClientIP(i int) string {
	const n1, n2 = 1 << 17, 1 << 22
	if i < 0 {
		i = -i
	}
	i %= n1 + n2
	var base uint32
	if i < n1 {
		base = 198<<24 | 18<<16
	} else {
		base, i = 100<<24|64<<16, i-n1
	}
	a := base + uint32(i)
	return fmt.Sprintf("%d.%d.%d.%d", a>>24, a>>16&0xff, a>>8&0xff, a&0xff)
}

// ClientIPv6 returns an IPv6 address in 2001:db8::/32 with a distinct /64
// for every i in [0, 2^32) and interface id 1.
func ClientIPv6(i int) string {
	u := uint32(i)
	return fmt.Sprintf("2001:db8:%x:%x::1", u>>16, u&0xffff)
}

// LoadOptions describe a closed-model burst of requests: Concurrency workers
// send Requests requests in all, each as soon as the previous one finished.
type LoadOptions struct {
	Method   string      // default GET
	Path     string      // default "/"; may include a query
	Header   http.Header // sent with every request
	Body     []byte      // sent with every request (replayable)
	Requests int         // total requests; default 1
	// Concurrency is the number of workers; default min(Requests, 64). All
	// workers start together, so Requests == Concurrency is one burst of
	// simultaneous requests.
	Concurrency int
	// XForwardedFor, if set, gives the X-Forwarded-For value of request i
	// (0 <= i < Requests), e.g. ClientIP. Nil: every request comes from
	// 127.0.0.1 only.
	XForwardedFor func(i int) string
	// Request, if set, edits request i before it is sent (any header, path...).
	Request func(i int, r *http.Request)
	// Client sends the requests. Nil: NewClient(Concurrency).
	Client *http.Client
	// Timeout bounds each request; default 30s.
	Timeout time.Duration
	// KeepResponses keeps the status and headers of every response in
	// LoadResult.Responses (indexed by request number).
	KeepResponses bool
}

// Response is what Load keeps of one response when KeepResponses is set.
type Response struct {
	Status  int // 0 on a transport error
	Header  http.Header
	Latency time.Duration
	Err     error
	// Sent and Answered are the load generator's own timing, from the
	// moment Load started the workers: when the request was written out
	// (after any dial) and when the response's first byte came back. On a
	// busy machine Sent spreads a "simultaneous" burst, and Answered-Sent
	// is what the proxy took, without the client's dialing and scheduling.
	Sent, Answered time.Duration
}

// LoadResult summarizes a Load.
type LoadResult struct {
	Requests int
	Status   map[int]int // responses per status code
	Errors   int         // transport errors (no response)
	FirstErr error
	// Latencies of the completed responses, ascending.
	Latencies []time.Duration
	Elapsed   time.Duration
	// Sample holds the headers of the first response received per status.
	Sample    map[int]http.Header
	Responses []Response // with KeepResponses
}

// Count returns the number of responses with this status code.
func (r LoadResult) Count(status int) int { return r.Status[status] }

// Percentile returns the latency at quantile q in [0,1] (0 if none).
func (r LoadResult) Percentile(q float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	i := int(q * float64(len(r.Latencies)-1))
	i = max(0, min(i, len(r.Latencies)-1))
	return r.Latencies[i]
}

// RPS returns completed responses per second of Elapsed.
func (r LoadResult) RPS() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(len(r.Latencies)) / r.Elapsed.Seconds()
}

func (r LoadResult) String() string {
	return fmt.Sprintf("%d requests in %v (%.0f/s): status %v, %d errors, p50 %v p99 %v",
		r.Requests, r.Elapsed.Round(time.Millisecond), r.RPS(), r.Status, r.Errors,
		r.Percentile(0.5), r.Percentile(0.99))
}

// Load sends o.Requests requests to baseURL+o.Path with o.Concurrency workers
// and returns the tally. It stops early when ctx ends (the remaining requests
// count as errors).
func Load(ctx context.Context, baseURL string, o LoadOptions) LoadResult {
	if o.Requests <= 0 {
		o.Requests = 1
	}
	if o.Concurrency <= 0 {
		o.Concurrency = min(o.Requests, 64)
	}
	o.Concurrency = min(o.Concurrency, o.Requests)
	if o.Method == "" {
		o.Method = http.MethodGet
	}
	if o.Path == "" {
		o.Path = "/"
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	client := o.Client
	if client == nil {
		client = NewClient(o.Concurrency)
		defer client.CloseIdleConnections()
	}
	res := LoadResult{Requests: o.Requests, Status: map[int]int{}, Sample: map[int]http.Header{}}
	if o.KeepResponses {
		res.Responses = make([]Response, o.Requests)
	}
	var (
		mu   sync.Mutex
		next int
		wg   sync.WaitGroup
	)
	start := make(chan struct{})
	var t0 time.Time // set before start is closed
	one := func(i int) {
		rctx, cancel := context.WithTimeout(ctx, o.Timeout)
		defer cancel()
		var body io.Reader
		if o.Body != nil {
			body = bytes.NewReader(o.Body)
		}
		// The transport calls these on its own goroutines.
		var sent, answered atomic.Int64
		rctx = httptrace.WithClientTrace(rctx, &httptrace.ClientTrace{
			WroteRequest:         func(httptrace.WroteRequestInfo) { sent.Store(int64(time.Since(t0))) },
			GotFirstResponseByte: func() { answered.Store(int64(time.Since(t0))) },
		})
		req, err := http.NewRequestWithContext(rctx, o.Method, baseURL+o.Path, body)
		var resp *http.Response
		began := time.Now()
		if err == nil {
			for k, vs := range o.Header {
				req.Header[k] = append([]string(nil), vs...)
			}
			if o.XForwardedFor != nil {
				req.Header.Set("X-Forwarded-For", o.XForwardedFor(i))
			}
			if o.Request != nil {
				o.Request(i, req)
			}
			resp, err = client.Do(req)
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
		lat := time.Since(began)
		mu.Lock()
		defer mu.Unlock()
		r := Response{Latency: lat, Err: err, Sent: time.Duration(sent.Load()), Answered: time.Duration(answered.Load())}
		if err != nil {
			res.Errors++
			if res.FirstErr == nil {
				res.FirstErr = err
			}
		}
		if resp != nil {
			r.Status, r.Header = resp.StatusCode, resp.Header
			if err == nil {
				res.Status[resp.StatusCode]++
				res.Latencies = append(res.Latencies, lat)
				if _, ok := res.Sample[resp.StatusCode]; !ok {
					res.Sample[resp.StatusCode] = resp.Header
				}
			}
		}
		if o.KeepResponses {
			res.Responses[i] = r
		}
	}
	for w := 0; w < o.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= o.Requests {
					return
				}
				one(i)
			}
		}()
	}
	t0 = time.Now()
	close(start)
	wg.Wait()
	res.Elapsed = time.Since(t0)
	sort.Slice(res.Latencies, func(a, b int) bool { return res.Latencies[a] < res.Latencies[b] })
	return res
}

// Load sends a burst through this Envoy's listener; see the package-level
// Load. Without o.Client it uses a fresh client, so every worker opens a new
// connection (and so sees the newest listener configuration).
func (e *Envoy) Load(ctx context.Context, o LoadOptions) LoadResult {
	return Load(ctx, e.URL(), o)
}
