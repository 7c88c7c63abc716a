package envoytest

import (
	"context"
	"os"
	"testing"
	"time"
)

// RequireEnvoy returns the Envoy binary (FindEnvoy). When there is none it
// fails the test if the environment variable CI is set (`make test` installs
// Envoy, so in CI a missing Envoy is a broken setup) and skips it otherwise.
func RequireEnvoy(t testing.TB) string {
	t.Helper()
	bin, err := FindEnvoy()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set and Envoy is missing: %v", err)
		}
		t.Skipf("skipping: Envoy is not installed (run `make test`, which installs it, or set ENVOY_BIN): %v", err)
	}
	return bin
}

// StartT starts Envoy for a test: it calls RequireEnvoy, uses t.TempDir() as
// Options.Dir unless set, fails the test if Envoy does not start, stops
// Envoy in t.Cleanup, and logs Envoy's errors and log tail if the test failed.
func StartT(t testing.TB, o Options) *Envoy {
	t.Helper()
	if o.Bin == "" {
		o.Bin = RequireEnvoy(t)
	}
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, err := Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("envoy exited with an error before Stop: %v", err)
		}
		if t.Failed() {
			t.Logf("envoy (%s):\n%s", e.Dir(), logDigest(e.Logs(), 60))
		}
	})
	return e
}
