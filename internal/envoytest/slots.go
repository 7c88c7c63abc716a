package envoytest

import (
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
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

func (s *SlotServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := s.waiting.Add(1) - 1
	s.mu.Lock()
	s.arrival = append(s.arrival, n)
	s.mu.Unlock()
	s.sem <- struct{}{}
	s.waiting.Add(-1)
	d, sp := s.service.Load(), s.spread.Load()
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
