package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sdk"
)

// TestSDKAgainstSluice: 20 goroutines complete 200 requests through the SDK
// against a Sluice limit of 10/s with burst 5, all succeed, close to the
// theoretical minimum time, with few 429s from Envoy.
func TestSDKAgainstSluice(t *testing.T) {
	const cfg = `{"rules":[{"name":"orders","limit":10,"window":"1s","burst":5}]}`
	e := startSluice(t, 2, cfg)
	var retries atomic.Int64
	client := sdk.NewClient(
		sdk.WithMaxAttempts(10),
		sdk.WithRetryHook(func(ev sdk.RetryEvent) {
			if ev.Reason == sdk.RateLimited {
				retries.Add(1)
			}
		}),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const goroutines, total = 20, 200
	var next, ok atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	start := time.Now()
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= total {
				body := fmt.Sprintf(`{"order":%d}`, next.Load())
				req, _ := http.NewRequestWithContext(ctx, "POST", e.URL()+"/orders", strings.NewReader(body))
				resp, err := client.Do(req)
				if err != nil {
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					ok.Add(1)
				} else {
					mu.Lock()
					failures = append(failures, resp.Status)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	// burst 5 at once, then one every 100ms: the 200th is admitted at 19.5s.
	minimum := time.Duration(total-5) * 100 * time.Millisecond
	time.Sleep(1200 * time.Millisecond)
	rejected, _ := e.Stat("wasmcustom.sluice.rule.orders.rejected")
	t.Logf("SDK e2e: %d/%d succeeded in %v (theoretical minimum %v, %.2fx); Envoy sent %d 429s (%d retries)",
		ok.Load(), total, elapsed.Round(time.Millisecond), minimum, elapsed.Seconds()/minimum.Seconds(), rejected, retries.Load())
	if ok.Load() != total || len(failures) > 0 {
		t.Fatalf("%d of %d succeeded; failures: %v", ok.Load(), total, failures)
	}
	if e.Upstream.Count("/orders") != total {
		t.Errorf("upstream saw %d requests, want %d (no duplicates, none lost)", e.Upstream.Count("/orders"), total)
	}
	if elapsed > minimum*13/10 {
		t.Errorf("took %v, more than 1.3x the theoretical minimum %v", elapsed, minimum)
	}
	if rejected > 60 {
		t.Errorf("Envoy sent %d 429s: the client kept sending requests it knew would be rejected", rejected)
	}
}
