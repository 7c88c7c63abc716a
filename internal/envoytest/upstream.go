package envoytest

import (
	"context"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"
)

// UpstreamBody is the body of every Upstream response.
const UpstreamBody = "ok\n"

// Upstream is a backend HTTP server on 127.0.0.1 that answers every request
// with 200 and UpstreamBody and counts the requests that reach it per path,
// so a test can tell how many requests Envoy let through. Each response
// carries "X-Upstream-Forwarded-For", the X-Forwarded-For header the request
// arrived with. It also measures the requests it is working on at once
// (InFlight), which is what a concurrency limit in front of it bounds, and
// records the X-Seq header of each request in arrival order (Arrivals).
// Its methods are safe for concurrent use.
type Upstream struct {
	srv   *http.Server
	ln    net.Listener
	mu    sync.Mutex
	count map[string]int
	total int
	delay time.Duration

	inflight, maxInflight int
	lastChange            time.Time
	levels                []time.Duration // time spent at each in-flight level since ResetInFlight
	arrivals              []Arrival
}

// Arrival is one request that carried X-Seq, in the order it reached the
// Upstream.
type Arrival struct {
	Seq string
	// EnvoyStart is the value of the X-Envoy-Start header (see
	// Options.StartTimeHeader): when Envoy received the request.
	EnvoyStart string
}

// InFlightStats is what the Upstream saw of requests in progress at once
// since ResetInFlight.
type InFlightStats struct {
	Now, Max int
	// At[n] is how long exactly n requests were in progress; Busy is the
	// time at least one was.
	At   []time.Duration
	Busy time.Duration
}

// AtLeast returns the share of the busy time with at least n requests in
// progress.
func (s InFlightStats) AtLeast(n int) float64 {
	if s.Busy <= 0 {
		return 0
	}
	var d time.Duration
	for i := n; i < len(s.At); i++ {
		d += s.At[i]
	}
	return float64(d) / float64(s.Busy)
}

// StartUpstream starts an Upstream on 127.0.0.1 with a kernel-chosen port.
func StartUpstream() (*Upstream, error) { return StartUpstreamOn("127.0.0.1:0") }

// StartUpstreamOn starts an Upstream listening on addr, for a configuration
// that names a fixed backend address (the shipped envoy.yaml's store).
func StartUpstreamOn(addr string) (*Upstream, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	u := &Upstream{ln: ln, count: map[string]int{}}
	u.srv = &http.Server{Handler: u, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = u.srv.Serve(ln) }()
	return u, nil
}

// ServeHTTP counts the request and answers 200.
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.count[r.URL.Path]++
	u.total++
	d := u.delay
	if seq := r.Header.Get("X-Seq"); seq != "" {
		u.arrivals = append(u.arrivals, Arrival{Seq: seq, EnvoyStart: r.Header.Get("X-Envoy-Start")})
	}
	u.changeInFlight(+1)
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		u.changeInFlight(-1)
		u.mu.Unlock()
	}()
	if d > 0 {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
		}
	}
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(UpstreamBody)))
	if xff := r.Header.Get("X-Forwarded-For"); xff != "" {
		h.Set("X-Upstream-Forwarded-For", xff)
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(UpstreamBody))
}

// changeInFlight accounts the time spent at the current level and moves to
// the next (u.mu held).
func (u *Upstream) changeInFlight(delta int) {
	now := time.Now()
	if !u.lastChange.IsZero() {
		for len(u.levels) <= u.inflight {
			u.levels = append(u.levels, 0)
		}
		u.levels[u.inflight] += now.Sub(u.lastChange)
	}
	u.lastChange = now
	u.inflight += delta
	u.maxInflight = max(u.maxInflight, u.inflight)
}

// InFlight returns what the Upstream saw of requests in progress at once
// since ResetInFlight (or its start).
func (u *Upstream) InFlight() InFlightStats {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.changeInFlight(0)
	s := InFlightStats{Now: u.inflight, Max: u.maxInflight, At: append([]time.Duration(nil), u.levels...)}
	for i := 1; i < len(s.At); i++ {
		s.Busy += s.At[i]
	}
	return s
}

// ResetInFlight starts the in-flight measurements and the arrival record
// afresh (the requests in progress stay counted).
func (u *Upstream) ResetInFlight() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.maxInflight, u.levels, u.lastChange, u.arrivals = u.inflight, nil, time.Time{}, nil
}

// Arrivals returns the requests with an X-Seq header received since
// ResetInFlight, in arrival order.
func (u *Upstream) Arrivals() []Arrival {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]Arrival(nil), u.arrivals...)
}

// Addr returns the host:port the Upstream listens on.
func (u *Upstream) Addr() string { return u.ln.Addr().String() }

// URL returns "http://<Addr>".
func (u *Upstream) URL() string { return "http://" + u.Addr() }

// Count returns how many requests for exactly this path (no query) arrived.
func (u *Upstream) Count(path string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.count[path]
}

// Total returns how many requests arrived in all.
func (u *Upstream) Total() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.total
}

// Counts returns a copy of the per-path counts.
func (u *Upstream) Counts() map[string]int {
	u.mu.Lock()
	defer u.mu.Unlock()
	m := make(map[string]int, len(u.count))
	for k, v := range u.count {
		m[k] = v
	}
	return m
}

// Paths returns the paths seen so far, sorted.
func (u *Upstream) Paths() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	ps := make([]string, 0, len(u.count))
	for p := range u.count {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	return ps
}

// Reset sets all counts to zero.
func (u *Upstream) Reset() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.count = map[string]int{}
	u.total = 0
}

// SetDelay makes every following response wait d before it is written
// (a slow backend).
func (u *Upstream) SetDelay(d time.Duration) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.delay = d
}

// Close stops the server, closing open connections.
func (u *Upstream) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := u.srv.Shutdown(ctx); err != nil {
		return u.srv.Close()
	}
	return nil
}
