package e2e_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/e2e/envoytest"
)

// timingLogFormat is an access log of Envoy's own timing of each request:
// path, status, %DURATION% (ms from the first byte Envoy read to the last
// it sent) and Sluice's decision. Envoy's clock, not the load generator's:
// a client that is slow to dial, send or read does not count, so a bound
// on it holds on a busy machine where one on the client's latency does not.
const timingLogFormat = "timing %REQ(:PATH)% %RESPONSE_CODE% %DURATION% %FILTER_STATE(wasm.sluice_decision:PLAIN)%\n"

// envoyTiming is one line of timingLogFormat.
type envoyTiming struct {
	status   int
	duration time.Duration
	decision string
}

// withTimingLog adds timingLogFormat's access log to an Envoy.
func withTimingLog(o *envoytest.Options) { o.AccessLogFormat = timingLogFormat }

// envoyTimings waits until the access log holds n lines for path (Envoy
// flushes it about once a second) and returns them.
func envoyTimings(t *testing.T, e *envoytest.Envoy, path string, n int) []envoyTiming {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(e.AccessLogPath())
		var got []envoyTiming
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) != 5 || f[0] != "timing" || f[1] != path {
				continue
			}
			st, _ := strconv.Atoi(f[2])
			ms, _ := strconv.Atoi(f[3])
			got = append(got, envoyTiming{st, time.Duration(ms) * time.Millisecond, f[4]})
		}
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d access-log lines for %s after 30s, want %d", len(got), path, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
