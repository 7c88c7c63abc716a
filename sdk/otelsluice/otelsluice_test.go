package otelsluice_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/sdk"
	"github.com/sluicehq/sluice/sdk/otelsluice"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestMetrics drives a Transport against a real server through its three
// kinds of events, and reads the metrics back from the OpenTelemetry SDK's
// in-memory ManualReader:
//   - /limited answers 429 with Retry-After: 1 once: one resend (count 1,
//     status 429) after a wait of 1 s or a little more;
//   - while that cool-down lasts, a request to /other is held: a cooldown
//     and a host_limit wait;
//   - /down answers 503 without a hint and the retry budget is one retry:
//     one resend, then a budget refusal and a give-up.
func TestMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	m, err := otelsluice.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	limited := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.URL.Path {
		case "/limited":
			if limited++; limited == 1 {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(429)
				return
			}
		case "/down":
			w.WriteHeader(503)
			return
		}
		fmt.Fprintln(w, "ok")
	}))
	defer srv.Close()
	refused := make(chan struct{})
	var once sync.Once
	hook := func(ev sdk.RetryEvent) { // m.Hook, and a signal when the 429 is in
		m.Hook(ev)
		if ev.Reason == sdk.RateLimited {
			once.Do(func() { close(refused) })
		}
	}
	c := &http.Client{Transport: sdk.NewTransport(srv.Client().Transport, sdk.WithRetryHook(hook),
		sdk.WithRetryBudget(&sdk.RetryBudget{Burst: 1}))}
	get := func(path string, want int) {
		resp, err := c.Get(srv.URL + path)
		if err != nil || resp.StatusCode != want {
			t.Errorf("GET %s: %v, %v; want %d", path, resp, err, want)
			return
		}
		resp.Body.Close()
	}
	var wg sync.WaitGroup
	wg.Go(func() { get("/limited", 200) })
	<-refused // the 429 is in: /other meets its cool-down
	get("/other", 200)
	wg.Wait()
	get("/down", 503)

	got := collect(t, reader)
	sum := func(name string, match ...attribute.KeyValue) int64 { return sumOf(t, got, name, match...) }
	if n := sum("sluice.client.resends", otelsluice.ResendCountKey.Int(1), otelsluice.StatusCodeKey.Int(429),
		otelsluice.ReasonKey.String("rate_limited")); n != 1 {
		t.Errorf("resends after the 429: %d, want 1", n)
	}
	if n := sum("sluice.client.resends", otelsluice.ResendCountKey.Int(1), otelsluice.StatusCodeKey.Int(503)); n != 1 {
		t.Errorf("resends after the 503: %d, want 1", n)
	}
	if n := sum("sluice.client.resends"); n != 2 {
		t.Errorf("resends in all: %d, want 2", n)
	}
	if n := sum("sluice.client.cooldowns", otelsluice.ServerKey.String("127.0.0.1")); n < 1 {
		t.Errorf("cooldowns: %d, want the hold of /other", n)
	}
	if n := sum("sluice.client.retry_budget.refusals"); n != 1 {
		t.Errorf("budget refusals: %d, want 1", n)
	}
	if n := sum("sluice.client.give_ups", otelsluice.GiveUpKey.String(sdk.GiveUpBudget)); n != 1 {
		t.Errorf("budget give-ups: %d, want 1", n)
	}
	h, ok := got["sluice.client.wait.duration"].Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("wait.duration: %T", got["sluice.client.wait.duration"].Data)
	}
	var retryWait, holdWait float64
	var retries, holds uint64
	for _, p := range h.DataPoints {
		switch r, _ := p.Attributes.Value(otelsluice.ReasonKey); r.AsString() {
		case "rate_limited":
			retries += p.Count
			retryWait += p.Sum
		case "host_limit":
			holds += p.Count
			holdWait += p.Sum
		}
	}
	if retries != 1 || retryWait < 1 || retryWait > 1.2 {
		t.Errorf("retry waits: %d summing %.3fs, want one of 1-1.1s (Retry-After 1 plus jitter)", retries, retryWait)
	}
	if holds < 1 || holdWait <= 0 || holdWait > 1.2 {
		t.Errorf("holds: %d summing %.3fs, want the rest of the cool-down", holds, holdWait)
	}
}

// collect reads every metric of the adapter's scope from reader, by name.
func collect(t *testing.T, reader *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	if len(rm.ScopeMetrics) != 1 || rm.ScopeMetrics[0].Scope.Name != otelsluice.ScopeName {
		t.Fatalf("scopes: %+v", rm.ScopeMetrics)
	}
	got := map[string]metricdata.Metrics{}
	for _, x := range rm.ScopeMetrics[0].Metrics {
		got[x.Name] = x
	}
	return got
}

// sumOf adds up the points of counter name whose attributes include match.
func sumOf(t *testing.T, got map[string]metricdata.Metrics, name string, match ...attribute.KeyValue) int64 {
	t.Helper()
	d, ok := got[name].Data.(metricdata.Sum[int64])
	if !ok {
		t.Errorf("%s: no int64 sum (%T)", name, got[name].Data)
		return 0
	}
	var n int64
next:
	for _, p := range d.DataPoints {
		for _, kv := range match {
			if v, ok := p.Attributes.Value(kv.Key); !ok || v != kv.Value {
				continue next
			}
		}
		n += p.Value
	}
	return n
}

// TestSDKImportsNoOpenTelemetry: a partner who does not use this package
// does not link OpenTelemetry.
func TestSDKImportsNoOpenTelemetry(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/sluicehq/sluice/sdk").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "go.opentelemetry.io/") {
			t.Errorf("package sdk depends on %s", p)
		}
	}
}
