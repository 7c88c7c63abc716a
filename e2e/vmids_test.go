package e2e_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// TestTwoVMIDsGauges: two Sluice filters with their own vm_id (two
// listeners, "a budget of its own" in configuration.md) in one Envoy. Envoy
// names a Wasm metric by what the module defines, without the vm_id
// (Context::defineMetric: the "wasmcustom" namespace in the VM's stats
// scope), so both filters write the same gauges. While one holds two
// requests and the other one, sluice.held_requests must say 3 all along:
// neither filter's workers may set it to their own sum.
func TestTwoVMIDsGauges(t *testing.T) {
	port2, err := envoytest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cfg := `{"rules": [{"name": "t", "key": [], "limit": 1, "window": "10s", "max_delay": "30s"}]}`
	e := startSluice(t, 1, cfg, func(o *envoytest.Options) {
		o.SecondListenerPort = port2
		o.SecondListenerVMID = "other"
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url2 := "http://127.0.0.1:" + strconv.Itoa(port2) + "/"
	get2 := func() (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, "GET", url2, nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}
	// Each filter admits its first request (budgets of their own) and
	// holds the next ones: 2 on the first listener, 1 on the second.
	if resp, _, err := e.Do(ctx, "GET", "/", nil, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("first listener: %v %v", resp, err)
	}
	if resp, err := get2(); err != nil || resp.StatusCode != 200 {
		t.Fatalf("second listener: %v %v", resp, err)
	}
	for i := 0; i < 2; i++ {
		go func() { _, _, _ = e.Do(ctx, "GET", "/", nil, nil) }()
	}
	go func() { _, _ = get2() }()
	time.Sleep(1500 * time.Millisecond) // every worker has published since
	var seen []uint64
	bad := 0
	for i := 0; i < 30; i++ {
		v, err := e.Stat("wasmcustom.sluice.held_requests")
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, v)
		if v != 3 {
			bad++
		}
		time.Sleep(100 * time.Millisecond)
	}
	if bad > 0 {
		t.Errorf("sluice.held_requests over 3 s with 2 requests held by one filter and 1 by the other: %v; want 3 throughout", seen)
	}
}
