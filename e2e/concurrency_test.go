package e2e_test

import (
	"context"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// concConfig: three concurrency rules of 10 slots, shop-wide (keyed by
// path), each on its own path: rejecting at once, queueing, and one for the
// disconnect test.
const concConfig = `{
  "rules": [
    {"name": "now", "match": {"path_prefix": "/now"}, "key": ["path"], "algorithm": "concurrency", "limit": 10},
    {"name": "queue", "match": {"path_prefix": "/queue"}, "key": ["path"], "algorithm": "concurrency", "limit": 10, "max_delay": "10s"},
    {"name": "leak", "match": {"path_prefix": "/leak"}, "key": ["path"], "algorithm": "concurrency", "limit": 10, "max_delay": "10s"},
    {"name": "dead", "match": {"path_prefix": "/dead"}, "key": ["path"], "algorithm": "concurrency", "limit": 2}
  ]
}`

// TestConcurrencyInEnvoy runs the concurrency rule in Envoy with 4 workers
// in front of an upstream that holds each request 200 ms, and measures at
// the upstream how many requests it works on at once.
func TestConcurrencyInEnvoy(t *testing.T) {
	// /dead goes to a cluster nobody listens on: the router answers 503
	// itself, a local reply of a filter after Sluice.
	deadPort, err := envoytest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	e := startSluice(t, 4, concConfig, func(o *envoytest.Options) {
		o.StartTimeHeader = "X-Envoy-Start"
		o.Clusters = map[string]string{"dead": "127.0.0.1:" + strconv.Itoa(deadPort)}
		o.Routes = []envoytest.Route{{Name: "dead", Prefix: "/dead", Cluster: "dead"}, {Name: "default", Prefix: "/"}}
		withTimingLog(o)
	})
	up := e.Upstream
	up.SetDelay(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("reject_at_once", func(t *testing.T) {
		// 200 simultaneous requests, no max_delay: exactly 10 reach the
		// upstream, 190 get 429 with Retry-After at once. The upstream holds
		// them 2 s, so that on a loaded machine, where the 200 can take
		// several hundred ms to arrive, none of the 10 has finished (and
		// freed its slot) before the last arrives.
		const hold = 2 * time.Second
		up.SetDelay(hold)
		defer up.SetDelay(200 * time.Millisecond)
		up.ResetInFlight()
		res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Path: "/now", Requests: 200, Concurrency: 200, KeepResponses: true})
		st := up.InFlight()
		t.Logf("200 simultaneous, limit 10, no max_delay: %v; upstream max in flight %d", res, st.Max)
		if res.Count(200) != 10 || res.Count(429) != 190 {
			t.Errorf("admitted %d, rejected %d: want 10 and 190", res.Count(200), res.Count(429))
		}
		if st.Max > 10 {
			t.Errorf("the upstream saw %d at once, limit 10", st.Max)
		}
		// "At once" on two clocks. The client's, from the moment the
		// request was written to the answer's first byte (its dial and its
		// own scheduling excluded): before any slot could have freed, so
		// no 429 waited for one. Envoy's own %DURATION% of each 429: within
		// 150 ms, where a rejection held back (a queue, a wait for a tick
		// or a slot) takes its whole wait; the loaded machine's lateness in
		// dialing, sending and reading 200 connections is not in it.
		var slowest time.Duration
		for _, r := range res.Responses {
			if r.Status == 429 {
				slowest = max(slowest, r.Answered-r.Sent)
				if ra, _ := strconv.Atoi(r.Header.Get("Retry-After")); ra < 1 || r.Answered-r.Sent >= hold {
					t.Errorf("429 with Retry-After %q answered %v after it was sent: want >= 1, before any slot freed", r.Header.Get("Retry-After"), r.Answered-r.Sent)
				}
				if r.Header.Get("Ratelimit-Policy") != `"now";q=10;qu="concurrent-requests"` || r.Header.Get("X-Ratelimit-Remaining") != "0" {
					t.Errorf("429 headers: %v", r.Header)
				}
			}
		}
		var inEnvoy time.Duration
		for _, l := range envoyTimings(t, e, "/now", 200) {
			if l.status == 429 {
				inEnvoy = max(inEnvoy, l.duration)
				if l.duration > 150*time.Millisecond || l.decision != "rejected" {
					t.Errorf("a 429 took %v in Envoy, decision %q: want rejected at once (<= 150 ms)", l.duration, l.decision)
				}
			}
		}
		t.Logf("429s: slowest %v from sent to answered at the client, %v in Envoy", slowest.Round(time.Millisecond), inEnvoy)
	})

	t.Run("queue_fifo", func(t *testing.T) {
		// 200 requests sent 1 ms apart (all in flight at once: the upstream
		// holds each 200 ms), max_delay 10s: all are served, never more than
		// 10 at once at the upstream, 10 at once most of the time, and in
		// arrival order.
		up.ResetInFlight()
		const n = 200
		client := envoytest.NewClient(n)
		var wg sync.WaitGroup
		status := make([]int, n)
		start := time.Now()
		for i := 0; i < n; i++ {
			time.Sleep(time.Until(start.Add(time.Duration(i) * time.Millisecond)))
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				req, _ := http.NewRequestWithContext(ctx, "GET", e.URL()+"/queue", nil)
				req.Header.Set("X-Seq", strconv.Itoa(i))
				resp, err := client.Do(req)
				if err != nil {
					t.Errorf("request %d: %v", i, err)
					return
				}
				resp.Body.Close()
				status[i] = resp.StatusCode
			}(i)
		}
		wg.Wait()
		elapsed := time.Since(start)
		st := up.InFlight()
		for i, s := range status {
			if s != 200 {
				t.Errorf("request %d: status %d", i, s)
			}
		}
		full := st.AtLeast(10)
		// Arrival order: the order in which requests reached Envoy (its
		// START_TIME, as it forwarded them: a worker that is busy for a
		// moment takes in its requests late, whatever the order they were
		// sent in) against the order they reached the upstream. A FIFO
		// queue serves them in Envoy's order, up to the requests admitted
		// in the same few milliseconds on different workers.
		order := up.Arrivals()
		type arrival struct {
			upstream int
			envoy    float64
		}
		as := make([]arrival, len(order))
		for p, a := range order {
			f, err := strconv.ParseFloat(a.EnvoyStart, 64)
			if err != nil {
				t.Fatalf("X-Envoy-Start %q: %v", a.EnvoyStart, err)
			}
			as[p] = arrival{upstream: p, envoy: f}
		}
		byEnvoy := append([]arrival(nil), as...)
		sort.Slice(byEnvoy, func(i, j int) bool { return byEnvoy[i].envoy < byEnvoy[j].envoy })
		maxShift := 0
		for p, a := range byEnvoy {
			maxShift = max(maxShift, abs(a.upstream-p))
		}
		// s: a worker that stalls between Envoy's START_TIME and the
		// filter's ticket reorders requests that close (on a loaded
		// machine, tens of milliseconds; once over 100 ms, with two
		// Envoys under valgrind beside the suite: 12 overtakes, the
		// largest shift 7 places); a queue out of order would move them
		// by up to the 4 s the queue spans.
		const orderSlack = 0.3
		overtakes := 0
		for i := range as {
			for j := range as {
				// j reached Envoy 100 ms or more after i, and the upstream
				// before it.
				if as[j].envoy-as[i].envoy >= orderSlack && as[j].upstream < as[i].upstream {
					overtakes++
				}
			}
		}
		t.Logf("200 requests 1 ms apart, limit 10, max_delay 10s: all served in %v; upstream max in flight %d, at 10 for %.0f%% of %v busy; "+
			"order: largest shift %d places from the order requests reached Envoy, %d requests overtook one that reached Envoy %v or more before them",
			elapsed.Round(time.Millisecond), st.Max, 100*full, st.Busy.Round(time.Millisecond), maxShift, overtakes, time.Duration(orderSlack*float64(time.Second)))
		if st.Max > 10 {
			t.Errorf("the upstream saw %d at once, limit 10", st.Max)
		}
		if full < 0.75 {
			t.Errorf("the upstream had 10 in progress only %.0f%% of the time, want most of it (>= 75%%)", 100*full)
		}
		if len(order) != n {
			t.Fatalf("%d arrivals recorded", len(order))
		}
		if overtakes > 0 {
			t.Errorf("%d requests were served before one that reached Envoy %v or more before them (largest shift %d places)",
				overtakes, time.Duration(orderSlack*float64(time.Second)), maxShift)
		}
	})

	t.Run("local_reply_releases", func(t *testing.T) {
		// 20 requests one after the other on a rule of 2 slots, each
		// answered 503 by the router (no upstream): every one gets past
		// Sluice, so each stream's end gave its slot back.
		codes := map[int]int{}
		for i := 0; i < 20; i++ {
			resp, _, err := e.Get(ctx, "/dead", nil)
			if err != nil {
				t.Fatal(err)
			}
			codes[resp.StatusCode]++
		}
		t.Logf("20 sequential requests answered by the router's local reply: %v", codes)
		if codes[503] != 20 {
			t.Errorf("statuses %v, want 20 x 503 (a 429 means a slot was not given back)", codes)
		}
	})

	t.Run("disconnects_leak_nothing", func(t *testing.T) {
		// 1,000 requests whose clients give up after 20..400 ms: some in
		// progress at the upstream, most waiting in the queue. Afterwards no
		// slot is held: a burst of 30 gets exactly 10 at once.
		r := rand.New(rand.NewPCG(1, 2))
		timeouts := make([]time.Duration, 1000)
		for i := range timeouts {
			timeouts[i] = time.Duration(20+r.IntN(380)) * time.Millisecond
		}
		up.ResetInFlight()
		res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{
			Path: "/leak", Requests: 1000, Concurrency: 500,
			Request: func(i int, req *http.Request) {
				c, cancel := context.WithTimeout(req.Context(), timeouts[i])
				_ = cancel // the request ends with the timeout
				*req = *req.WithContext(c)
			},
			Timeout: 5 * time.Second,
		})
		// (The upstream notices a reset a moment after Envoy has freed the
		// slot and admitted the next request, so it may count one more.)
		t.Logf("1,000 requests disconnecting after 20..400 ms: %v; upstream max in flight %d", res, up.InFlight().Max)
		if res.Errors < 500 || res.Errors+res.Count(200)+res.Count(429) != 1000 {
			t.Errorf("%d clients disconnected mid-flight (want most), %d answered", res.Errors, res.Count(200)+res.Count(429))
		}
		// Let Envoy finish the resets and the workers publish their gauges.
		var stats map[string]uint64
		var err error
		pollUntil(func() bool {
			stats, err = e.Stats("sluice")
			return err == nil && stats["wasmcustom.sluice.concurrency.slots_held"] == 0 && stats["wasmcustom.sluice.concurrency.waiting"] == 0
		})
		if err != nil {
			t.Fatal(err)
		}
		if g := stats["wasmcustom.sluice.concurrency.slots_held"]; g != 0 {
			t.Errorf("slots_held gauge %d after every client left", g)
		}
		if g := stats["wasmcustom.sluice.concurrency.waiting"]; g != 0 {
			t.Errorf("waiting gauge %d after every client left", g)
		}
		up.ResetInFlight()
		burst := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Path: "/leak", Requests: 30, Concurrency: 30, KeepResponses: true})
		st := up.InFlight()
		t.Logf("then 30 at once: %v; upstream max in flight %d", burst, st.Max)
		if burst.Count(200) != 30 || st.Max != 10 {
			t.Errorf("after the disconnects a burst of 30 got %d served with %d at once, want 30 with exactly 10 at once", burst.Count(200), st.Max)
		}
	})
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
