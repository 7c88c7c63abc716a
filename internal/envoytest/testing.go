package envoytest

import (
	"context"
	"os"
	"testing"
	"time"
)

// RequireEnvoy returns the Envoy the tests run (Target): the binary
// (FindEnvoy) in process mode, "docker:<image>" in docker mode
// (SLUICE_ENVOY=docker), both usable as Options.Bin and by Validate and
// EnvoyVersion. When it is missing (no Envoy; no Docker or no image) it fails
// the test if the environment variable CI is set (`make test` installs
// Envoy, Docker and the image, so in CI that is a broken setup) and skips it
// otherwise.
func RequireEnvoy(t testing.TB) string {
	t.Helper()
	bin, err := Target()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set and Envoy (%s mode) is missing: %v", Mode(), err)
		}
		t.Skipf("skipping: Envoy (%s mode) is not installed (run `make test`, which installs it, or set ENVOY_BIN; for docker mode `make image`): %v", Mode(), err)
	}
	return bin
}

// RequireDocker lets the test go on when the Docker daemon answers and image
// exists, whatever the mode; otherwise it fails the test when CI is set and
// skips it otherwise (for tests that always need Docker, such as
// docker-compose).
func RequireDocker(t testing.TB, image string) {
	t.Helper()
	if err := CheckImage(context.Background(), image); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set and Docker is missing: %v", err)
		}
		t.Skipf("skipping: %v", err)
	}
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
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
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
