package e2e_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// TestTwoFiltersInOneChain: two Sluice filters (own vm_ids) in one filter
// chain both decide a request, and the access log's fields say what the
// later one decided (operations.md): Envoy's setProperty sets the value of
// the stream's one filter-state entry per name. The first filter delays
// /b; the second admits it at once.
func TestTwoFiltersInOneChain(t *testing.T) {
	first := `{"rules": [{"name": "d", "key": [], "limit": 1, "window": "1s", "max_delay": "3s"}]}`
	e := startSluice(t, 1, first, func(o *envoytest.Options) {
		o.AccessLogFormat = shippedLogFormat(t)
		o.Wasm2 = &envoytest.Wasm{File: o.Wasm.File, VMID: "second", Name: "second",
			Config: `{"rules": [{"name": "x", "limit": 100, "window": "1h"}]}`}
	})
	var took time.Duration
	for _, p := range []string{"/a", "/b"} {
		start := time.Now()
		if resp, _ := get(t, e, p); resp.StatusCode != 200 {
			t.Fatalf("%s: %d, want 200", p, resp.StatusCode)
		}
		took = time.Since(start)
	}
	if took < 500*time.Millisecond {
		t.Fatalf("/b answered after %v: the first filter did not delay it", took)
	}
	got := accessLog(t, e, "/a", "/b")
	if l := got["/b"]; l.decision != "allowed" || l.rule != "" {
		t.Errorf("/b, delayed by the first filter and admitted by the second: logged %q rule %q, want the second's (allowed, no rule)", l.decision, l.rule)
	}
}
