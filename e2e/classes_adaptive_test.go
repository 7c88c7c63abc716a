//go:build quiet

// This test measures an adaptive rule's learning in a real Envoy: a stall
// of a loaded machine reads as the upstream's queueing and cuts the learnt
// limit, so it runs on a quiet machine only, with `make e2e-quiet` (the
// build tag quiet), not in `make test`.

package e2e_test

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// adaptiveClassesConfig: one adaptive rule over the whole store ("key":
// [], no number), logins above the buys with a quarter of the learnt limit
// kept for them. (Named buy for the load helper's timeline.)
const adaptiveClassesConfig = `{"rules":[{"name":"buy","key":[],"algorithm":"adaptive_concurrency","max_delay":"10s",
 "classes":[{"name":"login","match":{"path_prefix":"/login"},"reserve":0.25}]}]}`

// TestClassesAdaptiveInEnvoy: the real Envoy (2 workers) in front of an
// upstream of 8 slots x 50 ms (160/s) that queues the rest inside itself.
// First only buys, 64 clients, for 10 s from cold: the learnt limit ends
// near the capacity, 6..10 (it would drift to 8 / 0.75 = 10.7 or more if
// it learnt from the buys' latency as if they held the whole limit, and
// stay at its start, 4, if it grew only when the whole limit is used).
// Then a login every 100 ms joins the 64 buyers: every login is served,
// its p90 within 100 ms (two service times), and the buys keep >= 55% of
// the upstream's capacity.
func TestClassesAdaptiveInEnvoy(t *testing.T) {
	up := startSlotServer(t, 8, 50*time.Millisecond)
	e := startSluice(t, 2, adaptiveClassesConfig, func(o *envoytest.Options) { o.Upstream, o.WasmDebug = up.addr, true })
	defer func() {
		if t.Failed() {
			for _, l := range strings.Split(e.Logs(), "\n") {
				if j := strings.Index(l, "rule buy learnt"); j >= 0 {
					t.Logf("%s", l[j:])
				}
			}
		}
	}()

	x, q := up.load(t, "only buys, from cold", "/buy", 64, 10*time.Second, 4*time.Second, e)
	lim, err := e.Stat("wasmcustom.sluice.rule.buy.limit")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("only buys: %.0f/s, upstream queue p90 %d, learnt limit %d", x, q, lim)
	if lim < 6 || lim > 10 {
		t.Errorf("only buys for 10 s: learnt limit %d, want 6..10 (capacity 8)", lim)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Second)
	defer cancel()
	var (
		mu   sync.Mutex
		lat  []time.Duration
		bad  []int
		wg   sync.WaitGroup
		sent int
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(time.Second) // the buyers are back at the limit
		for next := time.Now(); ctx.Err() == nil; next = next.Add(100 * time.Millisecond) {
			time.Sleep(time.Until(next))
			if ctx.Err() != nil {
				return
			}
			sent++
			wg.Add(1)
			go func() {
				defer wg.Done()
				client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
				t0 := time.Now()
				code := getStatus(context.Background(), client, e.URL()+"/login")
				d := time.Since(t0)
				mu.Lock()
				lat = append(lat, d)
				if code != 200 {
					bad = append(bad, code)
				}
				mu.Unlock()
			}()
		}
	}()
	x, q = up.load(t, "buys and a login every 100 ms", "/buy", 64, 9*time.Second, 6*time.Second, e)
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	var p90 time.Duration
	if len(lat) > 0 {
		p90 = lat[(len(lat)*9+9)/10-1]
	}
	lim, _ = e.Stat("wasmcustom.sluice.rule.buy.limit")
	t.Logf("with logins: %.0f/s served (logins included), upstream queue p90 %d, learnt limit %d; %d logins, p90 %v, not served %v",
		x, q, lim, len(lat), p90, bad)
	if len(lat) < 50 || len(bad) > 0 {
		t.Errorf("%d logins, %d not served (%v): want every one served", len(lat), len(bad), bad)
	}
	if p90 > 100*time.Millisecond {
		t.Errorf("login p90 %v, want <= 100 ms", p90)
	}
	if buys := x - 10; buys < 0.55*160 {
		t.Errorf("buys %.0f/s, want >= 55%% of the upstream's 160/s", buys)
	}
}
