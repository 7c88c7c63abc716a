package main

import (
	"bytes"
	"context"
	"image/png"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/examples/store"
)

// TestSmokeAgainstStore runs a small launch straight against the store (no
// Envoy) and checks that every piece of the demo works end to end: load,
// store metrics, table, headlines and chart.
func TestSmokeAgainstStore(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds of load")
	}
	sc := Scenario{
		Duration:         3 * time.Second,
		LaunchAt:         time.Second,
		Buyers:           100,
		PressesPerBuyer:  3,
		FirstPressWithin: 200 * time.Millisecond,
		RepressMin:       100 * time.Millisecond,
		RepressMax:       300 * time.Millisecond,
		BackgroundRate:   [numEndpoints]int{Home: 20, Login: 20, Products: 10, Cart: 10},
		BackgroundUsers:  10,
		Timeout:          time.Second,
		Seed:             1,
	}
	run := func(name string, sc Scenario) *RunResult {
		shop := store.New(store.Options{})
		srv := httptest.NewServer(shop)
		defer srv.Close()
		var progressCalls int
		load := Run(context.Background(), srv.URL, sc, 500*time.Millisecond, func(Progress) { progressCalls++ })
		if progressCalls == 0 {
			t.Errorf("%s: progress never called", name)
		}
		if len(load.ConnErrors) > 0 {
			t.Errorf("%s: connection errors %v", name, load.ConnErrors)
		}
		return &RunResult{Name: name, Scenario: sc, Records: load.Records, Store: shop.Metrics()}
	}
	launch := run("launch", sc)
	quiet := sc
	quiet.Buyers = 0
	baseline := run("no launch", quiet)

	stats := Summarize(launch.Records)
	if got, want := stats[Buy].Sent, 300; got != want {
		t.Errorf("buy presses sent = %d, want %d", got, want)
	}
	// 60 background requests a second for 3 s, give or take the edges.
	if n := stats[Home].Sent + stats[Login].Sent + stats[Products].Sent + stats[Cart].Sent; n < 150 || n > 200 {
		t.Errorf("background requests sent = %d, want about 180", n)
	}
	// 300 buys of 100-200 ms on 20 slots need over 2 s: with a 1 s timeout
	// many time out, and the store must have saturated.
	if stats[Buy].Outcomes[TimedOut] == 0 {
		t.Errorf("no buy timed out: %+v", stats[Buy])
	}
	if launch.Store.InServiceMax != 20 {
		t.Errorf("store InServiceMax = %d, want 20 (saturated)", launch.Store.InServiceMax)
	}
	if got := launch.Store.Endpoints["POST /buy"].Received; got == 0 || got > 300 {
		t.Errorf("store received %d buys, want 1..300", got)
	}
	if s := Summarize(baseline.Records)[Login]; s.SuccessRate() != 1 || s.P99 > 200*time.Millisecond {
		t.Errorf("login without launch: success %.3f p99 %v, want 100%% and fast", s.SuccessRate(), s.P99)
	}

	var out bytes.Buffer
	WriteTable(&out, []*RunResult{launch, baseline})
	for _, l := range Headlines(launch, launch, baseline) {
		out.WriteString(l + "\n")
	}
	text := out.String()
	for _, want := range []string{"POST /buy", "GET /products", "reached store", "login p99 with no launch"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	t.Log("\n" + text)

	chart := filepath.Join(t.TempDir(), "launchday.png")
	if err := WriteChart(chart, []*RunResult{launch, baseline}, baseline); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(chart)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("chart is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 800 || b.Dy() < 600 {
		t.Errorf("chart is %dx%d, want a readable size", b.Dx(), b.Dy())
	}
}
