package store

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fixed returns service times of exactly d for every route.
func fixed(d time.Duration) *ServiceTimes {
	st := ServiceTime{d, d}
	return &ServiceTimes{Home: st, Login: st, Products: st, Cart: st, Buy: st}
}

func TestWorkerSlotsCapConcurrency(t *testing.T) {
	const (
		requests = 100
		service  = 40 * time.Millisecond
	)
	s := New(Options{ServiceTimes: fixed(service)})
	if s.Workers() != 20 {
		t.Fatalf("Workers() = %d, want 20", s.Workers())
	}

	var peak atomic.Int64 // sampled in-service gauge
	srv := httptest.NewServer(s)
	defer srv.Close()

	var wg sync.WaitGroup
	start := time.Now()
	for i := range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path, method := "/", http.MethodGet
			if i%2 == 1 {
				path, method = "/buy", http.MethodPost
			}
			req, _ := http.NewRequest(method, srv.URL+path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode >= 300 {
				t.Errorf("%s %s: status %d", method, path, resp.StatusCode)
			}
		}()
	}
	// Sample the store's in-service gauge while the requests run.
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			storeMax(&peak, s.Metrics().InService)
			time.Sleep(time.Millisecond)
		}
	}()
	wg.Wait()
	close(done)
	elapsed := time.Since(start)

	m := s.Metrics()
	if m.InServiceMax != 20 {
		t.Errorf("InServiceMax = %d, want exactly 20 (100 requests for 20 slots)", m.InServiceMax)
	}
	if peak.Load() > 20 {
		t.Errorf("sampled in-service peak %d > 20", peak.Load())
	}
	// 100 requests of 40 ms on 20 slots need at least 5 rounds.
	if min := 5 * service; elapsed < min {
		t.Errorf("100 requests took %v, faster than 5 rounds of %v: slots do not cap concurrency", elapsed, service)
	}
	if m.QueueDepthMax < requests-20-10 {
		t.Errorf("QueueDepthMax = %d, want about %d", m.QueueDepthMax, requests-20)
	}
	got := m.Endpoints["GET /"].Served + m.Endpoints["POST /buy"].Served
	if got != requests {
		t.Errorf("served %d requests, want %d", got, requests)
	}
	if want := float64(requests) * service.Seconds(); m.BusySeconds < want*0.99 {
		t.Errorf("BusySeconds = %.3f, want at least %.3f", m.BusySeconds, want)
	}
	if m.Orders != requests/2 {
		t.Errorf("Orders = %d, want %d", m.Orders, requests/2)
	}
}

func TestQueuedRequestAbandonedWhenClientLeaves(t *testing.T) {
	s := New(Options{Workers: 1, ServiceTimes: fixed(300 * time.Millisecond)})
	srv := httptest.NewServer(s)
	defer srv.Close()

	// Occupy the only slot.
	go func() {
		resp, err := http.Get(srv.URL + "/")
		if err == nil {
			resp.Body.Close()
		}
	}()
	waitFor(t, func() bool { return s.Metrics().InService == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/cart", nil)
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("request with a 50 ms deadline succeeded behind a 300 ms request on one slot")
	}
	// A request with a body too: the store reads it before queueing, so it
	// notices the client leaving.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	req, _ = http.NewRequestWithContext(ctx2, http.MethodPost, srv.URL+"/buy", strings.NewReader(`{"sku":"x"}`))
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("POST with a 50 ms deadline succeeded behind a 300 ms request on one slot")
	}
	waitFor(t, func() bool {
		m := s.Metrics()
		return m.Endpoints["GET /cart"].Abandoned == 1 && m.Endpoints["POST /buy"].Abandoned == 1
	})
	m := s.Metrics()
	for _, name := range []string{"GET /cart", "POST /buy"} {
		if c := m.Endpoints[name]; c.Received != 1 || c.Served != 0 {
			t.Errorf("%s = %+v, want received 1, served 0, abandoned 1", name, c)
		}
	}
	if m.Orders != 0 {
		t.Errorf("Orders = %d, want 0: the abandoned buy must not be placed", m.Orders)
	}
}

func TestRoutesAndMetricsEndpoint(t *testing.T) {
	s := New(Options{ServiceTimes: fixed(0)})
	srv := httptest.NewServer(s)
	defer srv.Close()

	cases := []struct {
		method, path string
		want         int
	}{
		{"GET", "/", 200},
		{"POST", "/login", 200},
		{"GET", "/products", 200},
		{"GET", "/cart", 200},
		{"POST", "/buy", 201},
		{"GET", "/buy", 405},
		{"GET", "/nope", 404},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s %s = %d, want %d", c.method, c.path, resp.StatusCode, c.want)
		}
	}

	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m Metrics
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	if m.Workers != 20 || len(m.Endpoints) != 5 {
		t.Errorf("metrics = %+v, want 20 workers and 5 endpoints", m)
	}
	for _, name := range s.Endpoints() {
		if e := m.Endpoints[name]; e.Received != 1 || e.Served != 1 {
			t.Errorf("%s: %+v, want received 1 served 1", name, e)
		}
	}
	if m.Orders != 1 {
		t.Errorf("Orders = %d, want 1", m.Orders)
	}
}

func TestDefaultServiceTimesAreInRange(t *testing.T) {
	st := DefaultServiceTimes()
	for range 1000 {
		if d := st.Buy.draw(); d < 100*time.Millisecond || d > 200*time.Millisecond {
			t.Fatalf("buy service time %v outside 100-200 ms", d)
		}
		if d := st.Home.draw(); d < 2*time.Millisecond || d > 5*time.Millisecond {
			t.Fatalf("home service time %v outside 2-5 ms", d)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBuysPeak: three buys on a store of two slots (one queued) and a home
// page: the snapshot's BuysPeak counts the buys at the store, queued ones
// included and other routes not; a period starts with the buys there at
// its start, and once they have left the next one is 0.
func TestBuysPeak(t *testing.T) {
	s := New(Options{Workers: 2, ServiceTimes: fixed(2 * time.Second)})
	srv := httptest.NewServer(s)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	send := func(method, path string) {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, method, srv.URL+path, strings.NewReader(`{"sku":"t"}`))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	for range 3 {
		send(http.MethodPost, "/buy")
	}
	send(http.MethodGet, "/")
	// Each holds a slot for 2 s: all four arrive while the first two hold.
	waitFor(t, func() bool { return s.buys.Load() == 3 && s.Metrics().Endpoints["GET /"].Received == 1 })
	if g := s.Snapshot(); g.BuysPeak != 3 {
		t.Fatalf("BuysPeak = %d with 3 buys at the store, want 3", g.BuysPeak)
	}
	cancel() // the queued ones leave; the served ones end after their 2 s
	waitFor(t, func() bool { return s.buys.Load() == 0 })
	if g := s.Snapshot(); g.BuysPeak != 3 {
		t.Fatalf("BuysPeak = %d for the period that began with 3 buys at the store, want 3", g.BuysPeak)
	}
	if g := s.Snapshot(); g.BuysPeak != 0 {
		t.Fatalf("BuysPeak = %d with no buy at the store since the last snapshot, want 0", g.BuysPeak)
	}
}
