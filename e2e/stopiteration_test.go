package e2e_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// TestEnvoyAllowOnHeadersStopIteration: in an Envoy whose Wasm filter sets
// allow_on_headers_stop_iteration, a POST with a body that a max_delay
// rule holds reaches the upstream only after its delay (docs/design/
// envoy-setups.md, "Pausing on headers"): the module exports no request
// body callback, so a pause that stopped the headers alone would let the
// body carry the request through at once.
func TestEnvoyAllowOnHeadersStopIteration(t *testing.T) {
	aux := startAux(t)
	e := startSluice(t, 1, `{"rules": [{"name": "held", "limit": 1, "window": "1s", "max_delay": "5s"}]}`,
		func(o *envoytest.Options) {
			o.Wasm.AllowOnHeadersStopIteration = true
			o.Clusters = map[string]string{"aux": aux.ln.Addr().String()}
			o.Routes = []envoytest.Route{{Name: "held", Prefix: "/held", Cluster: "aux"}}
		})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	body := strings.Repeat("x", 64<<10)
	var first int64
	for i := 0; i < 2; i++ {
		start := time.Now()
		resp, got, err := e.Do(ctx, "POST", "/held", nil, []byte(body))
		if err != nil {
			t.Fatalf("POST %d: %v", i, err)
		}
		took := time.Since(start)
		if resp.StatusCode != 200 || got != strconv.Itoa(len(body)) {
			t.Fatalf("POST %d: %d %.40q after %v, want 200 and the upstream read %d bytes", i, resp.StatusCode, got, took, len(body))
		}
		if i == 0 {
			first = aux.heldRead.Load()
			continue
		}
		// Due 1 s after the first: the upstream must not see it before
		// most of that (generous bounds, no tight timing).
		gap := time.Duration(aux.heldRead.Load() - first)
		t.Logf("second POST: answered after %v, read by the upstream %v after the first", took, gap)
		if gap < 500*time.Millisecond || took < 500*time.Millisecond {
			t.Errorf("second POST reached the upstream %v after the first (answered after %v), want it held about 1 s", gap, took)
		}
	}
}
