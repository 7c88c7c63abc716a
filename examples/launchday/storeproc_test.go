package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/examples/store"
)

// mainEnv makes the test binary run the demo's main (see TestMain): with
// -serve-store, the store's process as the demo starts it.
const mainEnv = "LAUNCHDAY_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestStoreProcess runs the store in a child process as the demo does (the
// program's main with -serve-store): it serves the shop, reports its
// counters, starts afresh on Reset and exits when told to stop.
func TestStoreProcess(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-"+serveStoreFlag)
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	p, err := startStoreCommand(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	ctx := context.Background()
	buy := func() {
		t.Helper()
		resp, err := http.Post("http://"+p.Addr()+"/buy", "application/json", strings.NewReader(`{"sku":"t"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST /buy: status %d", resp.StatusCode)
		}
	}
	orders := func() int64 {
		t.Helper()
		m, err := p.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return m.Orders
	}
	buy()
	buy()
	if got := orders(); got != 2 {
		t.Fatalf("orders after two buys = %d, want 2", got)
	}
	if err := p.Reset(); err != nil {
		t.Fatal(err)
	}
	if got := orders(); got != 0 {
		t.Fatalf("orders after Reset = %d, want 0", got)
	}
	buy()
	if got := orders(); got != 1 {
		t.Fatalf("orders after Reset and a buy = %d, want 1", got)
	}
	if g, err := p.Gauges(ctx); err != nil || g != (store.Gauges{Orders: 1, BuysPeak: 1}) {
		t.Fatalf("gauges = %+v, %v; want 1 order, nothing in service or queued, 1 buy at once since the reset", g, err)
	}
	if g, err := p.Gauges(ctx); err != nil || g != (store.Gauges{Orders: 1}) {
		t.Fatalf("gauges again = %+v, %v; want the buys' peak of the new period, 0", g, err)
	}
	p.Stop()
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("store process exit code %d, want 0", code)
	}
	if _, err := p.Metrics(ctx); err == nil {
		t.Fatal("the store still answers after Stop")
	}
}
