package e2e_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// timingLogFormat is an access log of Envoy's own timing of each request:
// path, status, %START_TIME% (when Envoy read the request's first byte),
// %DURATION% (ms from then to the last byte it sent) and Sluice's decision. Envoy's clock, not the load generator's:
// a client that is slow to dial, send or read does not count, so a bound
// on it holds on a busy machine where one on the client's latency does not.
const timingLogFormat = "timing %REQ(:PATH)% %RESPONSE_CODE% %START_TIME(%s.%6f)% %DURATION% %FILTER_STATE(wasm.sluice_decision:PLAIN)%\n"

// envoyTiming is one line of timingLogFormat.
type envoyTiming struct {
	status   int
	start    time.Time
	duration time.Duration
	decision string
}

// end is when Envoy sent the last byte of the response.
func (l envoyTiming) end() time.Time { return l.start.Add(l.duration) }

// arrivalSpread is how long Envoy took to receive a burst: from the first
// request's first byte to the last's. It measures the load generator and
// the machine, never the rule.
func arrivalSpread(ls []envoyTiming) time.Duration {
	if len(ls) == 0 {
		return 0
	}
	first, last := ls[0].start, ls[0].start
	for _, l := range ls {
		if l.start.Before(first) {
			first = l.start
		}
		if l.start.After(last) {
			last = l.start
		}
	}
	return last.Sub(first)
}

// clearOfWindowEdge returns at once if the next boundary of an aligned
// window (every multiple of window since the epoch, as Sluice's fixed
// windows are) is more than margin away, or sleeps until margin after it:
// a check that runs within margin then never straddles two windows.
func clearOfWindowEdge(window, margin time.Duration) {
	now := time.Now()
	next := now.Truncate(window).Add(window)
	if next.Sub(now) <= margin {
		time.Sleep(time.Until(next.Add(margin)))
	}
}

// withTimingLog adds timingLogFormat's access log to an Envoy, flushed
// every 100 ms (Envoy's default is 10 s).
func withTimingLog(o *envoytest.Options) {
	o.AccessLogFormat = timingLogFormat
	o.ExtraArgs = append(o.ExtraArgs, "--file-flush-interval-msec", "100")
}

// envoyTimings waits until the access log holds n lines for path and
// returns them.
func envoyTimings(t *testing.T, e *envoytest.Envoy, path string, n int) []envoyTiming {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(e.AccessLogPath())
		var got []envoyTiming
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) != 6 || f[0] != "timing" || f[1] != path {
				continue
			}
			st, _ := strconv.Atoi(f[2])
			sec, _ := strconv.ParseFloat(f[3], 64)
			ms, _ := strconv.Atoi(f[4])
			start := time.Unix(0, int64(sec*1e6)*1e3)
			got = append(got, envoyTiming{st, start, time.Duration(ms) * time.Millisecond, f[5]})
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

// latenessProbe measures how late this process's timers fire: a goroutine
// sleeps period again and again and adds up how much longer each sleep
// took. A client paced by timers in this process (the SDK) is late by as
// much on each of its waits: its lateness, not the rule's.
type latenessProbe struct {
	stop        chan struct{}
	done        chan struct{}
	n           int
	total, most time.Duration
}

func startLatenessProbe(period time.Duration) *latenessProbe {
	p := &latenessProbe{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			start := time.Now()
			select {
			case <-p.stop:
				return
			case <-time.After(period):
			}
			late := time.Since(start) - period
			p.n++
			p.total += late
			p.most = max(p.most, late)
		}
	}()
	return p
}

// Stop ends the probe and returns the mean and the largest lateness.
func (p *latenessProbe) Stop() (mean, most time.Duration) {
	close(p.stop)
	<-p.done
	if p.n == 0 {
		return 0, 0
	}
	return p.total / time.Duration(p.n), p.most
}
