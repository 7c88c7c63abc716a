package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
	"github.com/sluicehq/sluice/internal/wasmexports"
)

// TestStreamEndInEnvoy checks in Envoy 1.40 the facts `make build` relies on
// when it trims build/sluice.wasm's exports (internal/wasmexports,
// plugin/streamend_wasip1.go): at a stream's end Envoy calls proxy_on_log,
// then proxy_on_done, then proxy_on_delete, one call each; and it skips a
// callback the module does not export, and the stream still ends with
// proxy_on_delete.
func TestStreamEndInEnvoy(t *testing.T) {
	envoytest.RequireEnvoy(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	built := filepath.Join(dir, "streamorder.wasm")
	if err := envoytest.BuildWasm(ctx, "./e2e/testdata/streamorder", built); err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(built)
	if err != nil {
		t.Fatal(err)
	}
	variant := func(name string, drop []string, rename map[string]string) string {
		m, err := wasmexports.Edit(mod, drop, rename)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, name+".wasm")
		if err := os.WriteFile(f, m, 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	logging := map[string]string{"order_on_done": "proxy_on_done", "order_on_delete": "proxy_on_delete"}
	full := variant("full", []string{"proxy_on_done", "proxy_on_delete"}, logging)
	// As build/sluice.wasm: no proxy_on_log, proxy_on_done, body callback.
	trimmed := variant("trimmed", []string{"proxy_on_done", "proxy_on_delete", "proxy_on_log", "proxy_on_request_body"},
		map[string]string{"order_on_delete": "proxy_on_delete"})

	line := regexp.MustCompile(`streamorder: (\d+) (\w+)`)
	// run sends a POST with a body and returns, per stream id, the callbacks
	// logged for it in order.
	run := func(t *testing.T, file string) map[string][]string {
		e := envoytest.StartT(t, envoytest.Options{Concurrency: 1, LogLevel: "warn",
			Wasm: &envoytest.Wasm{File: file, Name: "streamorder", VMID: "streamorder"}})
		for i := range 2 {
			resp, _, err := e.Do(t.Context(), "POST", fmt.Sprintf("/post/%d", i), http.Header{"content-type": {"text/plain"}}, []byte("a body"))
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
		}
		var got map[string][]string
		deadline := time.Now().Add(10 * time.Second)
		for {
			got = map[string][]string{}
			for _, m := range line.FindAllStringSubmatch(e.Logs(), -1) {
				got[m[1]] = append(got[m[1]], m[2])
			}
			ended := 0
			for _, cbs := range got {
				if len(cbs) > 0 && cbs[len(cbs)-1] == "on_delete" {
					ended++
				}
			}
			if ended >= 2 || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		return got
	}
	// check: every stream ended with exactly want (body callbacks aside:
	// Envoy calls on_request_body once per data frame, here twice), and
	// had body callbacks if and only if bodies is set.
	check := func(t *testing.T, got map[string][]string, want string, bodies bool) {
		t.Helper()
		streams := 0
		for id, cbs := range got {
			var end []string
			nbody := 0
			for _, cb := range cbs {
				if cb == "on_request_body" {
					nbody++
				} else {
					end = append(end, cb)
				}
			}
			if len(end) == 0 || end[len(end)-1] != "on_delete" {
				continue // the root context, at Envoy's exit
			}
			streams++
			if s := strings.Join(end, " "); s != want {
				t.Errorf("stream %s: end callbacks %q, want %q", id, s, want)
			}
			if (nbody > 0) != bodies {
				t.Errorf("stream %s: %d on_request_body calls", id, nbody)
			}
		}
		if streams != 2 {
			t.Errorf("saw %d streams end, want 2: %v", streams, got)
		}
	}
	t.Run("all exported", func(t *testing.T) {
		t.Parallel()
		check(t, run(t, full), "on_log on_done on_delete", true)
	})
	t.Run("trimmed", func(t *testing.T) {
		t.Parallel()
		check(t, run(t, trimmed), "on_delete", false)
	})
}
