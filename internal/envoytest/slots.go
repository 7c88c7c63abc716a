package envoytest

import (
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// SlotServer is an upstream that serves `slots` requests at once for the
// service time each and queues the rest inside itself (a thread pool):
// capacity slots/service per second. It records, for each request, how
// many were waiting in its queue when it arrived.
type SlotServer struct {
	sem     chan struct{}
	service atomic.Int64 // ns
	spread  atomic.Int64 // ns: service times vary uniformly by ± this
	waiting atomic.Int64
	served  atomic.Int64
	path    atomic.Pointer[pathService]
	mu      sync.Mutex
	arrival []int64 // waiters seen at arrival, since the last Take
}

// NewSlotServer returns a SlotServer with slots slots and a service time.
func NewSlotServer(slots int, service time.Duration) *SlotServer {
	s := &SlotServer{sem: make(chan struct{}, slots)}
	s.SetService(service)
	return s
}

// SetService changes the service time of the requests that start next.
func (s *SlotServer) SetService(d time.Duration) { s.service.Store(int64(d)) }

// SetSpread makes the service times of the requests that start next vary
// uniformly within ± d of the service time.
func (s *SlotServer) SetSpread(d time.Duration) { s.spread.Store(int64(d)) }

// pathService is the service time of the requests whose path has prefix
// (see SetPathService).
type pathService struct {
	prefix          string
	service, spread time.Duration
}

// SetPathService gives the requests whose path starts with prefix a
// service time of their own, uniformly within ± spread of service (a
// store whose logins take a few milliseconds of the same slots its buys
// hold for a hundred). They take a slot like any other request, and wait
// for one in the same queue.
func (s *SlotServer) SetPathService(prefix string, service, spread time.Duration) {
	s.path.Store(&pathService{prefix: prefix, service: service, spread: spread})
}

func (s *SlotServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := s.waiting.Add(1) - 1
	s.mu.Lock()
	s.arrival = append(s.arrival, n)
	s.mu.Unlock()
	s.sem <- struct{}{}
	s.waiting.Add(-1)
	d, sp := s.service.Load(), s.spread.Load()
	if ps := s.path.Load(); ps != nil && strings.HasPrefix(r.URL.Path, ps.prefix) {
		d, sp = int64(ps.service), int64(ps.spread)
	}
	if sp > 0 {
		d += rand.Int64N(2*sp+1) - sp
	}
	time.Sleep(time.Duration(d))
	<-s.sem
	s.served.Add(1)
	io.WriteString(w, "ok")
}

// Busy returns the requests in the server now: served or waiting for a
// slot.
func (s *SlotServer) Busy() int64 { return s.waiting.Load() + int64(len(s.sem)) }

// Take returns the requests served since the last Take and the 90th
// percentile of the queue they found at arrival.
func (s *SlotServer) Take() (served int64, p90 int64) {
	s.mu.Lock()
	a := s.arrival
	s.arrival = nil
	s.mu.Unlock()
	slices.Sort(a)
	if len(a) > 0 {
		p90 = a[len(a)*9/10]
	}
	return s.served.Swap(0), p90
}
