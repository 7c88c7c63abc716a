package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/e2e/envoytest"
)

// push runs n clients that send POSTs to path as fast as they can until
// ctx ends (a 429 waits 10 ms: no spinning on a loaded machine); it returns
// how many got each status, and the count of transport errors.
func push(ctx context.Context, url string, n int, path string) (map[int]int, int) {
	client := envoytest.NewClient(n)
	defer client.CloseIdleConnections()
	var mu sync.Mutex
	codes, errs := map[int]int{}, 0
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "POST", url+path, nil)
				resp, err := client.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						errs++
						mu.Unlock()
					}
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				codes[resp.StatusCode]++
				mu.Unlock()
				if resp.StatusCode == 429 {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	return codes, errs
}

// TestAdaptiveConcurrencyInEnvoy: the real Envoy with 2 workers in front of
// an upstream of 8 slots × 50 ms (160/s) that queues the rest inside
// itself, 64 clients pushing as hard as they can. With no limit the
// upstream's queue holds about 56. The adaptive rule, given no number,
// keeps the upstream at >= 70% of its capacity with a short queue (90th
// percentile of waiters at arrival <= 8), from cold within a few seconds,
// and again after the service time doubles and when it is restored.
func TestAdaptiveConcurrencyInEnvoy(t *testing.T) {
	up := envoytest.NewSlotServer(8, 50*time.Millisecond)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: up}
	go srv.Serve(ln)
	defer srv.Close()
	e := startSluice(t, 2, `{"rules":[{"name":"buy","match":{"path_prefix":"/buy"},"key":["path"],
		"algorithm":"adaptive_concurrency","max_delay":"10s"}]}`, func(o *envoytest.Options) {
		o.Upstream = ln.Addr().String()
	})

	// phase pushes for d and logs a timeline (per 500 ms: served/s, upstream
	// queue p90, the learnt limit); it returns the throughput and queue
	// p90 of the last `measure` of it.
	phase := func(name, path string, d, measure time.Duration) (float64, int64) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		var codes map[int]int
		var errs int
		done := make(chan struct{})
		go func() { codes, errs = push(ctx, e.URL(), 64, path); close(done) }()
		up.Take()
		start := time.Now()
		var line []string
		var served, bins int64
		var q []int64
		for tick := time.NewTicker(500 * time.Millisecond); time.Since(start) < d-100*time.Millisecond; {
			<-tick.C
			n, p90 := up.Take()
			lim, _ := e.Stat("wasmcustom.sluice.rule.buy.limit")
			line = append(line, fmt.Sprintf("%.1fs:%d/s,q%d,L%d", time.Since(start).Seconds(), n*2, p90, lim))
			if time.Since(start) > d-measure {
				served += n
				bins++
				q = append(q, p90)
			}
		}
		<-done
		sort.Slice(q, func(i, j int) bool { return q[i] < q[j] })
		x := float64(served) * 2 / float64(max(bins, 1))
		qp := int64(0)
		if len(q) > 0 {
			qp = q[len(q)*9/10]
		}
		t.Logf("%s: %.0f/s, queue p90 %d over the last %v; statuses %v, errors %d\n  %s", name, x, qp, measure, codes, errs, strings.Join(line, " "))
		if errs > 0 || codes[429] > 0 || codes[503] > 0 || codes[504] > 0 {
			t.Errorf("%s: statuses %v, transport errors %d", name, codes, errs)
		}
		return x, qp
	}

	// No limit: the upstream's own queue fills with the clients.
	if _, q := phase("no limit", "/free", 3*time.Second, 2*time.Second); q < 40 {
		t.Errorf("without a limit the upstream queue p90 is %d: the load is too light to show anything", q)
	}
	for _, ph := range []struct {
		name     string
		service  time.Duration
		capacity float64
	}{
		{"cold, 50 ms", 50 * time.Millisecond, 160},
		{"doubled, 100 ms", 100 * time.Millisecond, 80},
		{"restored, 50 ms", 50 * time.Millisecond, 160},
	} {
		up.SetService(ph.service)
		x, q := phase(ph.name, "/buy", 7*time.Second, 3*time.Second)
		if x < 0.7*ph.capacity || q > 8 {
			t.Errorf("%s: %.0f/s of %.0f, upstream queue p90 %d (want >= 70%% and <= 8)", ph.name, x, ph.capacity, q)
		}
	}
	for _, l := range strings.Split(e.Logs(), "\n") {
		if strings.Contains(l, "GAUGE") {
			t.Log(l[strings.Index(l, "GAUGE"):])
		}
	}
	lat, _ := e.Stat("wasmcustom.sluice.rule.buy.latency_us")
	if lat < 45000 || lat > 80000 {
		t.Errorf("learnt latency %d µs for a 50 ms upstream", lat)
	}
}
