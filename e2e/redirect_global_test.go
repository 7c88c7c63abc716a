package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// TestGlobalInternalRedirect: Envoy follows the upstream's 302 itself
// (internal_redirect_policy) and runs the filter chain again for the new
// request, /redir/done. A global rule of 3 per hour, kept by the real
// rate-limit service on Redis, counts the client's request once: 3 pass
// (each redirect followed), the 4th is refused. A client's request that
// claims to be a redirect (x-envoy-original-url, which Envoy strips) is
// charged.
func TestGlobalInternalRedirect(t *testing.T) {
	_, rls := envoytest.FleetT(t, map[string]string{"sluice.yaml": shippedRLSConfig(t)})
	aux := startAux(t)
	const cfg = `{"rules":[
		{"name":"gredir","scope":"global","match":{"path_prefix":"/redir"},"key":["header:x-api-key"],"limit":3,"window":"1h"},
		{"name":"gcost","scope":"global","match":{"path_prefix":"/credir"},"key":["header:x-api-key"],"limit":1000,"window":"1h",
		 "cost":{"response_header":"x-units","max":10}}],
		"global":{"cluster":"ratelimit","domain":"sluice","timeout":"1s"},"on_error":"deny"}`
	e := startSluice(t, 2, cfg, func(o *envoytest.Options) {
		o.ExtraClustersYAML = shippedCluster(t, rls.GRPCAddr)
		o.StartTimeout = 150 * time.Second
		o.Clusters = map[string]string{"aux": aux.ln.Addr().String()}
		o.Routes = []envoytest.Route{
			{Name: "redir", Prefix: "/redir", Cluster: "aux", InternalRedirect: true},
			{Name: "credir", Prefix: "/credir", Cluster: "aux", InternalRedirect: true},
			{Name: "default", Prefix: "/"},
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	clearOfWindowEdge(time.Hour, 10*time.Second) // the service's hour is aligned
	key := fmt.Sprint("redir-", time.Now().UnixNano())
	var got []int
	for i := 0; i < 4; i++ {
		h := http.Header{"X-Api-Key": {key}}
		if i == 3 {
			h.Set("X-Envoy-Original-Url", "http://127.0.0.1/redir")
		}
		resp, body, err := e.Get(ctx, "/redir", h)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, resp.StatusCode)
		if i < 3 && (resp.StatusCode != 200 || body != "ok\n") {
			t.Errorf("request %d: %d %q, want the redirect followed", i, resp.StatusCode, body)
		}
		if i < 3 && resp.StatusCode == 200 && resp.Header.Get("X-Ratelimit-Remaining") != fmt.Sprint(2-i) {
			t.Errorf("request %d: X-RateLimit-Remaining %q, want %d", i, resp.Header.Get("X-Ratelimit-Remaining"), 2-i)
		}
		if i == 3 && resp.StatusCode != 429 {
			t.Errorf("the 4th request to a global rule of 3: %d, want 429", resp.StatusCode)
		}
	}
	// The counters reach Envoy's stats from the workers' ticks.
	var allowed, rejected uint64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		st, _ := e.Stats(`sluice\.rule\.gredir`)
		allowed, rejected = st["wasmcustom.sluice.rule.gredir.allowed"], st["wasmcustom.sluice.rule.gredir.rejected"]
		if allowed+rejected >= 4 {
			break
		}
	}
	t.Logf("statuses %v; rule gredir allowed %d, rejected %d", got, allowed, rejected)
	if allowed != 3 || rejected != 1 {
		t.Errorf("rule gredir counted %d allowed and %d rejected, want 3 and 1 (a redirect is the request it follows)", allowed, rejected)
	}
	redirectSettles(ctx, t, e, key)
}

// redirectSettles: a global rule charged after the response (X-Units) is
// charged what the redirect's response says, once per client request: the
// deposit taken for the request Envoy redirected is settled on it.
func redirectSettles(ctx context.Context, t *testing.T, e *envoytest.Envoy, key string) {
	t.Helper()
	for i := 0; i < 3; i++ {
		resp, body, err := e.Get(ctx, "/credir", http.Header{"X-Api-Key": {key}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || body != "ok\n" {
			t.Errorf("/credir %d: %d %q, want the redirect followed", i, resp.StatusCode, body)
		}
	}
	var allowed, charged uint64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		st, _ := e.Stats(`sluice\.rule\.gcost`)
		allowed, charged = st["wasmcustom.sluice.rule.gcost.allowed"], st["wasmcustom.sluice.rule.gcost.charged"]
		if allowed >= 3 && charged >= 15 {
			break
		}
	}
	t.Logf("rule gcost: allowed %d, charged %d units", allowed, charged)
	if allowed != 3 || charged != 15 {
		t.Errorf("rule gcost counted %d allowed and %d units charged for 3 requests of 5 units, each redirected once: want 3 and 15", allowed, charged)
	}
}
