package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// The store-wide rule is adaptive_concurrency with priority classes (the
// login and the home page above everything else, the buys included):
// nobody told Sluice that the store has 20 slots or how long a buy takes. The demo reads what the
// rule learnt from Envoy's stats while the load runs and shows it next to
// the store's own slots.

// learntRule is the adaptive rule whose limit the demo follows.
const learntRule = "store"

// LimitSample is what the adaptive rule had learnt at one moment of a run.
type LimitSample struct {
	At       time.Duration // since the start of the run
	Limit    int64         // requests in flight it allows
	InFlight int64         // requests in flight as its last decision saw them
	Latency  time.Duration // the no-queue latency it learnt
}

// sampleLearnt polls Envoy's stats every 250 ms until ctx ends (the plugin
// publishes its gauges about once a second per worker).
func sampleLearnt(ctx context.Context, e *envoytest.Envoy, start time.Time) []LimitSample {
	var out []LimitSample
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	prefix := "wasmcustom.sluice.rule." + learntRule + "."
	for {
		select {
		case <-ctx.Done():
			return out
		case <-t.C:
		}
		st, err := e.Stats(`^wasmcustom\.sluice\.rule\.` + learntRule + `\.`)
		if err != nil || st[prefix+"limit"] == 0 {
			continue
		}
		out = append(out, LimitSample{At: time.Since(start), Limit: int64(st[prefix+"limit"]),
			InFlight: int64(st[prefix+"in_flight"]), Latency: time.Duration(st[prefix+"latency_us"]) * time.Microsecond})
	}
}

// WriteLearnt prints, per second of r, the limit the adaptive rule had
// learnt next to the store's slots in use and queue (the largest sampled
// in that second).
func WriteLearnt(w io.Writer, r *RunResult) {
	if len(r.Learnt) == 0 {
		return
	}
	fmt.Fprintf(w, "  %s: rule %s learnt, second by second (limit | buys in flight | no-queue latency | store slots busy/%d, queued):\n    ",
		r.Name, learntRule, r.Store.Workers)
	var parts []string
	next := time.Duration(0)
	for i, s := range r.Learnt {
		if s.At < next && i != len(r.Learnt)-1 {
			continue
		}
		next = s.At.Truncate(time.Second) + time.Second
		busy, queued := storeAt(r.Timeline, s.At.Truncate(time.Second), next)
		parts = append(parts, fmt.Sprintf("%s %d|%d|%s|%d,%d", fmtSeconds(s.At.Truncate(time.Second)), s.Limit, s.InFlight, fmtLatency(s.Latency), busy, queued))
	}
	for i := 0; i < len(parts); i += 6 {
		fmt.Fprintf(w, "%s\n    ", strings.Join(parts[i:min(i+6, len(parts))], "   "))
	}
	fmt.Fprintln(w)
}

// storeAt returns the most slots in service and the longest queue sampled
// in [from, to).
func storeAt(tl []StoreSample, from, to time.Duration) (busy, queued int64) {
	for _, s := range tl {
		if s.At >= from && s.At < to {
			busy, queued = max(busy, s.InService), max(queued, s.Queued)
		}
	}
	return busy, queued
}
