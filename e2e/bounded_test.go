package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// TestFloodKeepsMemoryFlatAndLimitsHeld floods Envoy with far more distinct
// client addresses than max_keys (Envoy's xff_num_trusted_hops: 1 makes the
// last X-Forwarded-For entry the client): Envoy's memory stays flat past
// max_keys, and a client that used its budget stays limited throughout.
func TestFloodKeepsMemoryFlatAndLimitsHeld(t *testing.T) {
	const cfg = `{"rules":[{"name":"per-ip","limit":5,"window":"1h"}],"max_keys":2000}`
	e := startSluice(t, 2, cfg, func(o *envoytest.Options) { o.XFFNumTrustedHops = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	victim := func(int) string { return "192.0.2.1" }
	if res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Requests: 8, Concurrency: 1, XForwardedFor: victim}); res.Count(200) != 5 {
		t.Fatalf("victim: %v, want 5 admitted", res.Status)
	}
	flood := func(from, n int) envoytest.LoadResult {
		return envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{
			Requests: n, Concurrency: 32,
			XForwardedFor: func(i int) string { return envoytest.ClientIP(from + i) },
		})
	}
	// Warm up well past max_keys (Envoy's and the wasm VMs' own buffers grow
	// to a steady size in the first ~15,000 requests), and on until a batch
	// of 5,000 more clients leaves the RSS within 256 KiB: each VM's Go heap
	// grows to its first GC goal (4 MB) at the rate the plugin makes
	// garbage, so the less it makes, the longer that takes. Then measure
	// across thirty times max_keys more clients.
	warm := flood(0, 16000)
	rss0, err := e.ResidentMemory()
	if err != nil {
		t.Fatal(err)
	}
	start := 16000
	for k := 0; k < 8; k++ {
		flood(start, 5000)
		start += 5000
		r, err := e.ResidentMemory()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("warm-up, after %d clients: RSS %d KiB", start, r>>10)
		grew := int64(r) - int64(rss0)
		rss0 = r
		if grew < 256<<10 {
			break
		}
	}
	var res envoytest.LoadResult
	for k := 0; k < 12; k++ {
		res = flood(start+k*5000, 5000)
		r, _ := e.ResidentMemory()
		t.Logf("after %d clients: RSS %d KiB", start+(k+1)*5000, r>>10)
	}
	rss1, err := e.ResidentMemory()
	if err != nil {
		t.Fatal(err)
	}
	growth := int64(rss1) - int64(rss0)
	t.Logf("flood: warm-up %v; flood %v; RSS %d KiB -> %d KiB (%+d KiB) over 60,000 new clients with max_keys 2000",
		warm, res, rss0>>10, rss1>>10, growth>>10)
	if res.Errors > 0 {
		t.Fatalf("flood errors: %d (%v)", res.Errors, res.FirstErr)
	}
	// One shared-data key per client would cost Envoy at least ~100 bytes
	// each (key, value, hash node): 60,000 clients, 6 MB. Envoy's own
	// allocator drift over 60,000 requests is well under 2 MiB.
	if growth > 2<<20 {
		t.Errorf("Envoy grew %d KiB during the flood: memory is not bounded by max_keys", growth>>10)
	}
	if res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Requests: 3, Concurrency: 1, XForwardedFor: victim}); res.Count(429) != 3 {
		t.Errorf("after the flood the victim got %v: its spent budget was reset", res.Status)
	}
	var st map[string]uint64
	pollUntil(func() bool {
		st, _ = e.Stats(`sluice\.`)
		return st["wasmcustom.sluice.table.overflow"] > 0
	})
	t.Logf("stats after flood: %v", st)
	if st["wasmcustom.sluice.table.overflow"] == 0 {
		t.Error("no overflow counted although the flood exceeded max_keys")
	}
}

// TestExactUnderContention: 5,000 simultaneous requests from one client, and
// the CAS retries they cost.
func TestExactUnderContention(t *testing.T) {
	const cfg = `{"rules":[{"name":"hot","limit":100,"window":"1h","burst":100}]}`
	for _, workers := range []int{2, 4} {
		t.Run(fmt.Sprintf("concurrency=%d", workers), func(t *testing.T) {
			e := startSluice(t, workers, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Requests: 5000, Concurrency: 1000})
			if res.Errors != 0 || res.Count(200) != 100 || res.Count(429) != 4900 {
				t.Fatalf("%v, want exactly 100 admitted of 5000", res)
			}
			// Each worker publishes its CAS counters with its rule counters.
			pollUntil(func() bool {
				n, err := e.Stat("wasmcustom.sluice.rule.hot.rejected")
				return err == nil && n >= 4900
			})
			st, _ := e.Stats(`sluice\.(cas|on_error)`)
			t.Logf("concurrency %d: %v; CAS retries %d (%.4f per request), exhausted %d, on_error decisions %d",
				workers, res, st["wasmcustom.sluice.cas.retries"], float64(st["wasmcustom.sluice.cas.retries"])/5000,
				st["wasmcustom.sluice.cas.exhausted"], st["wasmcustom.sluice.on_error.allowed"]+st["wasmcustom.sluice.on_error.denied"])
			if st["wasmcustom.sluice.cas.exhausted"] != 0 {
				t.Errorf("CAS retries exhausted %d times", st["wasmcustom.sluice.cas.exhausted"])
			}
		})
	}
}

// TestOverloadAdmitsTheRate sends twice the allowed rate for 10 seconds at a
// constant pace (open model): admissions match what a token bucket of the
// rule's rate and burst admits of the requests as they reached Envoy
// (their arrival times in the access log), within 1%. On a busy machine
// the load generator sends late and in clumps, and the bucket, full for a
// moment, rightly wastes what it cannot hold: the arrivals, not the
// nominal pace, say what the rule should have admitted. Over-admission is
// bounded independently: never more than the burst plus the rate over the
// arrivals' span.
func TestOverloadAdmitsTheRate(t *testing.T) {
	const limit, burst, dur = 100, 20, 10 * time.Second
	e := startSluice(t, 2, fmt.Sprintf(`{"rules":[{"name":"rate","limit":%d,"window":"1s","burst":%d}]}`, limit, burst), withTimingLog)
	admitted, sent := paced(t, e.URL(), 2*limit, dur)
	ls := envoyTimings(t, e, "/", sent)
	arrivals := make([]time.Time, 0, len(ls))
	for _, l := range ls {
		arrivals = append(arrivals, l.start)
	}
	slices.SortFunc(arrivals, func(a, b time.Time) int { return a.Compare(b) })
	// The bucket on the arrivals: full at the first, refilled at limit/s.
	tokens, want := float64(burst), 0
	for i, a := range arrivals {
		if i > 0 {
			tokens = min(burst, tokens+a.Sub(arrivals[i-1]).Seconds()*limit)
		}
		if tokens >= 1 {
			tokens--
			want++
		}
	}
	span := arrivals[len(arrivals)-1].Sub(arrivals[0])
	most := float64(burst) + float64(limit)*span.Seconds()
	nominal := float64(burst) + float64(limit)*(dur-time.Second/(2*limit)).Seconds()
	t.Logf("overload: sent %d at %d/s for %v, arriving over %v; admitted %d, a bucket on the arrivals admits %d (%.2f%% off; %.0f at the nominal pace, at most %.0f over the span)",
		sent, 2*limit, dur, span.Round(time.Millisecond), admitted, want, 100*float64(admitted-want)/float64(want), nominal, most)
	if d := float64(admitted - want); d > float64(want)/100 || d < -float64(want)/100 {
		t.Errorf("admitted %d, want %d within 1%%", admitted, want)
	}
	if float64(admitted) > most+1 {
		t.Errorf("admitted %d, more than the burst plus the rate over the arrivals' span (%.0f)", admitted, most)
	}
}

// paced sends rate requests per second for dur, each on its own goroutine
// (an open model: a slow response does not delay the next send).
func paced(t *testing.T, url string, rate int, dur time.Duration) (admitted, sent int) {
	t.Helper()
	client := envoytest.NewClient(256)
	defer client.CloseIdleConnections()
	var ok, total atomic.Int64
	var wg sync.WaitGroup
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	n := int(dur / interval)
	for i := 0; i < n; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Get(url + "/")
			if err != nil {
				return
			}
			resp.Body.Close()
			total.Add(1)
			if resp.StatusCode == http.StatusOK {
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	if int(total.Load()) != n {
		t.Errorf("%d of %d paced requests failed", n-int(total.Load()), n)
	}
	return int(ok.Load()), n
}

// TestStateSurvivesConfigUpdate replaces the listener (with the plugin
// configuration) while Envoy runs: an unchanged rule keeps its clients'
// state, a changed rule starts clean.
const (
	stateUpdateBefore = `{"rules":[
	  {"name":"kept","match":{"path_prefix":"/kept"},"limit":3,"window":"1h"},
	  {"name":"changed","match":{"path_prefix":"/changed"},"limit":3,"window":"1h"}]}`
	stateUpdateAfter = `{"rules":[
	  {"name":"kept","match":{"path_prefix":"/kept"},"limit":3,"window":"1h"},
	  {"name":"changed","match":{"path_prefix":"/changed"},"limit":4,"window":"1h"}],"status":429}`
)

func TestStateSurvivesConfigUpdate(t *testing.T) {
	e := startSluice(t, 2, stateUpdateBefore, func(o *envoytest.Options) { o.DynamicListeners = true })
	stateSurvivesConfigUpdate(t, e, stateUpdateAfter)
}

// TestStateSurvivesConfigUpdateUncounted: the same with a stats matcher
// that rejects the count of layout record writes (Envoy hands out a null
// counter, which reads 0): the workers see it does not count, say so, and
// read the layout record before every new client's state instead.
func TestStateSurvivesConfigUpdateUncounted(t *testing.T) {
	const name = "wasmcustom.sluice.table.layout_writes"
	e := startSluice(t, 2, stateUpdateBefore, func(o *envoytest.Options) {
		o.DynamicListeners = true
		o.StatsRejected = []string{name}
	})
	stateSurvivesConfigUpdate(t, e, stateUpdateAfter)
	waitStat(t, e, "wasmcustom.sluice.rule.kept.rejected", 2) // the other stats still count
	stats, err := e.Stats("sluice")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := stats[name]; ok {
		t.Errorf("%s listed though the stats matcher rejects it", name)
	}
	if !strings.Contains(e.Logs(), "sluice.table.layout_writes does not count") {
		t.Error("Envoy's log does not say the count is rejected")
	}
}

func stateSurvivesConfigUpdate(t *testing.T, e *envoytest.Envoy, after string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, p := range []string{"/kept", "/changed"} {
		if res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Path: p, Requests: 3, Concurrency: 1}); res.Count(200) != 3 {
			t.Fatalf("%s before update: %v", p, res.Status)
		}
	}
	if err := e.SetPluginConfig(ctx, after); err != nil {
		t.Fatal(err)
	}
	if res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Path: "/kept", Requests: 2, Concurrency: 1}); res.Count(429) != 2 {
		t.Errorf("unchanged rule lost its state across the update: %v", res.Status)
	}
	if res := envoytest.Load(ctx, e.URL(), envoytest.LoadOptions{Path: "/changed", Requests: 5, Concurrency: 1}); res.Count(200) != 4 {
		t.Errorf("changed rule (limit 4) did not start clean: %v", res.Status)
	}
}
