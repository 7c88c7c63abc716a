package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sdk/header"
)

// store is a stand-in for the demo store behind Sluice: POST /buy, a fixed
// window of limit orders per second, and the headers the plugin sends.
type store struct {
	mu      sync.Mutex
	limit   int
	window  int64
	count   int
	keys    map[string]int
	bad     int
	served  int
	limited int
}

func (s *store) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var order struct {
		Partner string `json:"partner_order"`
		Qty     int    `json:"quantity"`
	}
	err := json.NewDecoder(r.Body).Decode(&order)
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Method != http.MethodPost || r.URL.Path != "/buy" || err != nil || order.Qty != 1 ||
		r.Header.Get("Idempotency-Key") == "" || r.Header.Get("Content-Type") != "application/json" {
		s.bad++
		http.Error(w, "bad order", http.StatusBadRequest)
		return
	}
	win := now.Unix()
	if win != s.window {
		s.window, s.count = win, 0
	}
	left := time.Unix(win+1, 0).Sub(now)
	h := w.Header()
	h.Set(header.XLimit, strconv.Itoa(s.limit))
	h.Set(header.Policy, string(header.AppendPolicy(nil, "buy", int64(s.limit), time.Second)))
	if s.count >= s.limit {
		s.limited++
		h.Set(header.RetryAfter, string(header.AppendRetryAfter(nil, left)))
		h.Set(header.XRemaining, "0")
		h.Set(header.XReset, string(header.AppendSeconds(nil, left)))
		h.Set(header.RateLimit, string(header.AppendRateLimit(nil, "buy", 0, left)))
		http.Error(w, "rate limited", http.StatusTooManyRequests)
		return
	}
	s.count++
	s.served++
	s.keys[r.Header.Get("Idempotency-Key")]++
	h.Set(header.XRemaining, strconv.Itoa(s.limit-s.count))
	h.Set(header.XReset, string(header.AppendSeconds(nil, left)))
	h.Set(header.RateLimit, string(header.AppendRateLimit(nil, "buy", int64(s.limit-s.count), left)))
	w.WriteHeader(http.StatusCreated)
	w.Write([]byte(`{"order":` + strconv.Itoa(s.served) + `}`))
}

func TestPartnerJob(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a real one-second window")
	}
	st := &store{limit: 5, keys: map[string]int{}}
	srv := httptest.NewServer(st)
	defer srv.Close()
	var out bytes.Buffer
	c := config{base: srv.URL + "/", path: "/buy", orders: 12, workers: 12, attempts: 8, maxWait: 10 * time.Second}
	s, err := run(context.Background(), c, &out)
	if err != nil {
		t.Fatal(err)
	}
	s.print(&out, c)
	t.Log("\n" + out.String())
	if s.placed.Load() != 12 || s.failed.Load() != 0 || st.bad != 0 {
		t.Errorf("placed %d, failed %d, bad requests %d", s.placed.Load(), s.failed.Load(), st.bad)
	}
	if len(st.keys) != 12 {
		t.Errorf("%d distinct idempotency keys for 12 orders", len(st.keys))
	}
	// 12 orders at 5 per second need the window after next; the first wave
	// of 12 blind requests costs 7 rejections, and none follow.
	if st.limited > 7 || s.wire429.Load() != int64(st.limited) {
		t.Errorf("store rejected %d, job saw %d; want at most the 7 of the first wave", st.limited, s.wire429.Load())
	}
	for _, want := range []string{"placed    12", "failed    0", "attempts  ", "elapsed   "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	if _, err := run(context.Background(), config{base: "127.0.0.1:10000", workers: 1}, &bytes.Buffer{}); err == nil {
		t.Error("a base without a scheme was accepted")
	}
}
