// Package store is the demo shop behind the launch-day scenario: a small HTTP
// service that behaves like an application server with a fixed pool of worker
// threads.
//
// Every shop request needs one of a fixed number of worker slots (20 by
// default). A request that finds every slot busy waits in a FIFO queue, as in a
// thread pool, and its waiting time is part of the latency its client sees. A
// request whose client goes away while it is still queued is dropped without
// being served; once a request holds a slot it is served to the end, as a
// worker thread would.
//
// Routes and their service times (time spent holding a slot):
//
//	GET  /          home page        2-5 ms
//	POST /login     login            3-5 ms
//	GET  /products  product list     15-25 ms
//	GET  /cart      the user's cart  5-10 ms
//	POST /buy       place an order   100-200 ms (touches a pretend database)
//
// GET /metrics answers at once, outside the worker pool, with a JSON
// [Metrics] document.
package store

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// maxBodyBytes bounds the request body the store reads.
const maxBodyBytes = 64 << 10

// DefaultWorkers is the number of worker slots of a store built with a zero
// [Options.Workers].
const DefaultWorkers = 20

// ServiceTime is the range of time a request of one route holds its worker
// slot. Each request draws a duration uniformly from [Min, Max].
type ServiceTime struct {
	Min, Max time.Duration
}

// draw returns a duration drawn uniformly from [st.Min, st.Max].
func (st ServiceTime) draw() time.Duration {
	if st.Max <= st.Min {
		return st.Min
	}
	return st.Min + rand.N(st.Max-st.Min+1)
}

// ServiceTimes holds the service time of each shop route.
type ServiceTimes struct {
	Home, Login, Products, Cart, Buy ServiceTime
}

// DefaultServiceTimes returns the service times described in the package
// documentation.
func DefaultServiceTimes() ServiceTimes {
	return ServiceTimes{
		Home:     ServiceTime{2 * time.Millisecond, 5 * time.Millisecond},
		Login:    ServiceTime{3 * time.Millisecond, 5 * time.Millisecond},
		Products: ServiceTime{15 * time.Millisecond, 25 * time.Millisecond},
		Cart:     ServiceTime{5 * time.Millisecond, 10 * time.Millisecond},
		Buy:      ServiceTime{100 * time.Millisecond, 200 * time.Millisecond},
	}
}

// Options configures a [Store]. The zero value gives the store described in
// the package documentation.
type Options struct {
	// Workers is the number of requests served at the same time; the others
	// queue. Zero means DefaultWorkers.
	Workers int
	// ServiceTimes sets how long each route holds its slot. A zero value
	// means DefaultServiceTimes.
	ServiceTimes *ServiceTimes
}

// route is one shop route: its method, path, service time and counters.
type route struct {
	name    string // "METHOD /path", the key in Metrics.Endpoints
	method  string
	service ServiceTime
	respond func(w http.ResponseWriter, r *http.Request, s *Store)

	received  atomic.Int64 // requests that arrived at the store
	served    atomic.Int64 // requests that held a slot and were answered
	abandoned atomic.Int64 // requests whose client left while they were queued
	queueWait atomic.Int64 // total nanoseconds spent queued by served requests
	maxWait   atomic.Int64 // longest time, in nanoseconds, a served request queued
}

// Store is the demo shop. It is an [http.Handler]; build it with [New].
type Store struct {
	workers int
	slots   chan struct{} // a token in the channel is a busy worker slot
	routes  map[string]*route
	order   []*route // routes in the order they are reported
	started time.Time

	queued      atomic.Int64 // requests waiting for a slot now
	queuedMax   atomic.Int64 // most requests ever waiting at once
	inService   atomic.Int64 // requests holding a slot now
	inServiceMx atomic.Int64 // most requests ever holding a slot at once
	busy        atomic.Int64 // total nanoseconds of slot time used

	// buys is the POST /buy requests at the store now, queued or in
	// service; buysPeak the most at once since the last Snapshot.
	buys, buysPeak atomic.Int64

	orders     atomic.Int64 // orders placed, the pretend database's row count
	inventoryM sync.Mutex   // guards inventory, the pretend database's hot row
	inventory  int64
}

// New returns a store configured by opts.
func New(opts Options) *Store {
	workers := opts.Workers
	if workers <= 0 {
		workers = DefaultWorkers
	}
	st := DefaultServiceTimes()
	if opts.ServiceTimes != nil {
		st = *opts.ServiceTimes
	}
	s := &Store{
		workers:   workers,
		slots:     make(chan struct{}, workers),
		routes:    make(map[string]*route),
		started:   time.Now(),
		inventory: 1_000_000,
	}
	add := func(method, path string, service ServiceTime, respond func(http.ResponseWriter, *http.Request, *Store)) {
		rt := &route{name: method + " " + path, method: method, service: service, respond: respond}
		s.routes[path] = rt
		s.order = append(s.order, rt)
	}
	add(http.MethodGet, "/", st.Home, respondHome)
	add(http.MethodPost, "/login", st.Login, respondLogin)
	add(http.MethodGet, "/products", st.Products, respondProducts)
	add(http.MethodGet, "/cart", st.Cart, respondCart)
	add(http.MethodPost, "/buy", st.Buy, respondBuy)
	return s
}

// Workers returns the number of worker slots.
func (s *Store) Workers() int { return s.workers }

// ServeHTTP serves the shop routes through the worker pool and /metrics
// directly.
func (s *Store) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/metrics" {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s.Metrics())
		return
	}
	rt, ok := s.routes[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	if r.Method != rt.method {
		w.Header().Set("Allow", rt.method)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	rt.received.Add(1)
	if rt.method == http.MethodPost && r.URL.Path == "/buy" {
		storeMax(&s.buysPeak, s.buys.Add(1))
		defer s.buys.Add(-1)
	}
	// Read the (small) request body before queueing, as a server's I/O layer
	// does before it hands a request to a worker. It also lets net/http watch
	// the connection, so a client that leaves is noticed while queued.
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, maxBodyBytes))
	}

	queuedAt := time.Now()
	storeMax(&s.queuedMax, s.queued.Add(1))
	select {
	case s.slots <- struct{}{}:
		s.queued.Add(-1)
	case <-r.Context().Done():
		// The client (or the proxy in front) gave up while the request was
		// queued: a worker never picks it up.
		s.queued.Add(-1)
		rt.abandoned.Add(1)
		return
	}
	start := time.Now()
	wait := start.Sub(queuedAt)
	storeMax(&s.inServiceMx, s.inService.Add(1))

	// The worker is busy for the service time whether or not the client is
	// still there, like a thread that does not notice a closed socket.
	time.Sleep(rt.service.draw())
	rt.respond(w, r, s)

	s.inService.Add(-1)
	s.busy.Add(int64(time.Since(start)))
	<-s.slots
	rt.served.Add(1)
	rt.queueWait.Add(int64(wait))
	storeMax(&rt.maxWait, int64(wait))
}

// storeMax raises *m to v if v is larger.
func storeMax(m *atomic.Int64, v int64) {
	for {
		cur := m.Load()
		if v <= cur || m.CompareAndSwap(cur, v) {
			return
		}
	}
}

// EndpointMetrics counts the requests of one route.
type EndpointMetrics struct {
	// Received is the number of requests that reached the store.
	Received int64 `json:"received"`
	// Served is the number of requests a worker served.
	Served int64 `json:"served"`
	// Abandoned is the number of requests dropped while queued because
	// their client went away.
	Abandoned int64 `json:"abandoned"`
	// MeanQueueWaitSeconds is the mean time served requests spent queued.
	MeanQueueWaitSeconds float64 `json:"mean_queue_wait_seconds"`
	// MaxQueueWaitSeconds is the longest time a served request spent queued.
	MaxQueueWaitSeconds float64 `json:"max_queue_wait_seconds"`
}

// Metrics is a snapshot of the store's counters, served at GET /metrics.
type Metrics struct {
	// Workers is the number of worker slots.
	Workers int `json:"workers"`
	// UptimeSeconds is the time since the store was built.
	UptimeSeconds float64 `json:"uptime_seconds"`
	// BusySeconds is the slot time used by served requests, summed over
	// all slots.
	BusySeconds float64 `json:"busy_seconds"`
	// Utilization is BusySeconds / (Workers * UptimeSeconds).
	Utilization float64 `json:"utilization"`
	// QueueDepth is the number of requests waiting for a slot now.
	QueueDepth int64 `json:"queue_depth"`
	// QueueDepthMax is the most requests ever waiting for a slot at once.
	QueueDepthMax int64 `json:"queue_depth_max"`
	// InService is the number of requests holding a slot now.
	InService int64 `json:"in_service"`
	// InServiceMax is the most requests ever holding a slot at once; it
	// never exceeds Workers.
	InServiceMax int64 `json:"in_service_max"`
	// Orders is the number of orders placed by POST /buy.
	Orders int64 `json:"orders"`
	// Endpoints holds per-route counters keyed by "METHOD /path".
	Endpoints map[string]EndpointMetrics `json:"endpoints"`
}

// Metrics returns a snapshot of the store's counters.
func (s *Store) Metrics() Metrics {
	up := time.Since(s.started).Seconds()
	busy := time.Duration(s.busy.Load()).Seconds()
	m := Metrics{
		Workers:       s.workers,
		UptimeSeconds: up,
		BusySeconds:   busy,
		QueueDepth:    s.queued.Load(),
		QueueDepthMax: s.queuedMax.Load(),
		InService:     s.inService.Load(),
		InServiceMax:  s.inServiceMx.Load(),
		Orders:        s.orders.Load(),
		Endpoints:     make(map[string]EndpointMetrics, len(s.order)),
	}
	if up > 0 {
		m.Utilization = busy / (float64(s.workers) * up)
	}
	for _, rt := range s.order {
		em := EndpointMetrics{
			Received:            rt.received.Load(),
			Served:              rt.served.Load(),
			Abandoned:           rt.abandoned.Load(),
			MaxQueueWaitSeconds: time.Duration(rt.maxWait.Load()).Seconds(),
		}
		if em.Served > 0 {
			em.MeanQueueWaitSeconds = time.Duration(rt.queueWait.Load()).Seconds() / float64(em.Served)
		}
		m.Endpoints[rt.name] = em
	}
	return m
}

// Gauges are the store's instantaneous counters, cheap enough to sample
// every few milliseconds.
type Gauges struct {
	InService, Queued, Orders int64
	// BuysPeak is the most POST /buy requests at the store at once
	// (queued or in service) since the previous Snapshot: more than the
	// store's slots means buys waited for one.
	BuysPeak int64
}

// Snapshot returns the store's gauges now. It starts the next BuysPeak
// period: one sampler should call it.
func (s *Store) Snapshot() Gauges {
	peak := s.buysPeak.Swap(s.buys.Load())
	return Gauges{InService: s.inService.Load(), Queued: s.queued.Load(), Orders: s.orders.Load(), BuysPeak: peak}
}

// Endpoints returns the "METHOD /path" names of the shop routes, in a fixed
// order.
func (s *Store) Endpoints() []string {
	names := make([]string, len(s.order))
	for i, rt := range s.order {
		names[i] = rt.name
	}
	return names
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func respondHome(w http.ResponseWriter, _ *http.Request, _ *Store) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprint(w, "<!doctype html><title>Sluice Sneakers</title><h1>The launch is today</h1><a href=/products>Shop</a>\n")
}

func respondLogin(w http.ResponseWriter, _ *http.Request, _ *Store) {
	writeJSON(w, http.StatusOK, map[string]string{"session": fmt.Sprintf("%016x", rand.Uint64())})
}

// product is one item of the product list.
type product struct {
	SKU   string `json:"sku"`
	Name  string `json:"name"`
	Price int    `json:"price_cents"`
}

var catalogue = []product{
	{"launch-sneaker", "Launch Sneaker, limited edition", 18900},
	{"everyday-sneaker", "Everyday Sneaker", 8900},
	{"laces", "Spare laces", 500},
	{"socks", "Socks, three pairs", 1500},
}

func respondProducts(w http.ResponseWriter, _ *http.Request, _ *Store) {
	writeJSON(w, http.StatusOK, catalogue)
}

func respondCart(w http.ResponseWriter, _ *http.Request, _ *Store) {
	writeJSON(w, http.StatusOK, map[string]any{"items": []map[string]any{{"sku": "socks", "qty": 1}}, "total_cents": 1500})
}

// respondBuy places an order: it takes one item off the pretend database's
// inventory row.
func respondBuy(w http.ResponseWriter, _ *http.Request, s *Store) {
	s.inventoryM.Lock()
	left := s.inventory
	if left > 0 {
		s.inventory--
	}
	s.inventoryM.Unlock()
	if left <= 0 {
		writeJSON(w, http.StatusConflict, map[string]string{"error": "sold out"})
		return
	}
	id := s.orders.Add(1)
	writeJSON(w, http.StatusCreated, map[string]any{"order": id, "sku": "launch-sneaker"})
}
