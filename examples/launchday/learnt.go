package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// The shipped store-wide rule is adaptive_concurrency with priority classes
// (the login and the home page above everything else, the buys included):
// nobody told Sluice that the store has 20 slots or how long a buy takes.
// The demo reads what the rule learnt, and each class's requests in
// flight, from Envoy's stats while the load runs, and shows them next to
// the store's own slots.

// SlotRule is the rule whose slots the demo follows: the configuration's
// first concurrency or adaptive_concurrency rule.
type SlotRule struct {
	Name     string
	Adaptive bool
	// Limit is a concurrency rule's limit (an adaptive rule's is learnt).
	Limit int64
	// Classes are its priority classes, highest first, then "default";
	// none without classes.
	Classes []string
}

// followedRule finds the SlotRule of a plugin configuration (false: none).
func followedRule(config string) (SlotRule, bool) {
	var c struct {
		Rules []struct {
			Name      string `json:"name"`
			Algorithm string `json:"algorithm"`
			Limit     int64  `json:"limit"`
			Classes   []struct {
				Name string `json:"name"`
			} `json:"classes"`
		} `json:"rules"`
	}
	if json.Unmarshal([]byte(config), &c) != nil {
		return SlotRule{}, false
	}
	for _, r := range c.Rules {
		if r.Algorithm != "concurrency" && r.Algorithm != "adaptive_concurrency" {
			continue
		}
		sr := SlotRule{Name: r.Name, Adaptive: r.Algorithm == "adaptive_concurrency", Limit: r.Limit}
		for _, k := range r.Classes {
			sr.Classes = append(sr.Classes, k.Name)
		}
		if len(sr.Classes) > 0 {
			sr.Classes = append(sr.Classes, "default")
		}
		return sr, true
	}
	return SlotRule{}, false
}

// LimitSample is what the followed rule had at one moment of a run.
type LimitSample struct {
	At       time.Duration // since the start of the run
	Limit    int64         // requests in flight it allows (learnt, or set)
	InFlight int64         // requests in flight as its last decision saw them
	Latency  time.Duration // the no-queue latency it learnt (adaptive only)
	// Classes are the requests in flight of each class (SlotRule.Classes).
	Classes []int64
}

// sampleLearnt polls Envoy's stats every 250 ms until ctx ends (the plugin
// publishes its gauges about once a second per worker).
func sampleLearnt(ctx context.Context, e *envoytest.Envoy, start time.Time, rule SlotRule) []LimitSample {
	var out []LimitSample
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	prefix := "wasmcustom.sluice.rule." + rule.Name + "."
	classPrefix := "wasmcustom.sluice.class." + rule.Name + "."
	filter := `^wasmcustom\.sluice\.(rule|class)\.` + regexp.QuoteMeta(rule.Name) + `\.`
	for {
		select {
		case <-ctx.Done():
			return out
		case <-t.C:
		}
		st, err := e.Stats(filter)
		if err != nil {
			continue
		}
		s := LimitSample{At: time.Since(start), Limit: rule.Limit, InFlight: int64(st[prefix+"in_flight"])}
		if rule.Adaptive {
			if st[prefix+"limit"] == 0 {
				continue // nothing learnt yet
			}
			s.Limit, s.Latency = int64(st[prefix+"limit"]), time.Duration(st[prefix+"latency_us"])*time.Microsecond
		}
		for _, c := range rule.Classes {
			s.Classes = append(s.Classes, int64(st[classPrefix+c+".in_flight"]))
		}
		out = append(out, s)
	}
}

// WriteLearnt prints, per second of r, the followed rule's limit and
// requests in flight (per class) next to the store's slots in use, its
// queue and the most buys at the store at once.
func WriteLearnt(w io.Writer, r *RunResult) {
	if len(r.Learnt) == 0 {
		return
	}
	inFlight := "in flight"
	if len(r.Rule.Classes) > 0 {
		inFlight = "in flight " + strings.Join(r.Rule.Classes, "/")
	}
	what := "learnt"
	if !r.Rule.Adaptive {
		what = "set"
	}
	fmt.Fprintf(w, "  %s: rule %s, second by second (limit %s | %s | no-queue latency | store slots busy/%d, queued, most buys at the store):\n    ",
		r.Name, r.Rule.Name, what, inFlight, r.Store.Workers)
	var parts []string
	next := time.Duration(0)
	for i, s := range r.Learnt {
		if s.At < next && i != len(r.Learnt)-1 {
			continue
		}
		next = s.At.Truncate(time.Second) + time.Second
		busy, queued, buys := storeAt(r.Timeline, s.At.Truncate(time.Second), next)
		flight := fmt.Sprint(s.InFlight)
		if len(s.Classes) > 0 {
			flight = joinInts(s.Classes, "/")
		}
		parts = append(parts, fmt.Sprintf("%s %d|%s|%s|%d,%d,%d", fmtSeconds(s.At.Truncate(time.Second)), s.Limit, flight, fmtLatency(s.Latency), busy, queued, buys))
	}
	for i := 0; i < len(parts); i += 5 {
		fmt.Fprintf(w, "%s\n    ", strings.Join(parts[i:min(i+5, len(parts))], "   "))
	}
	fmt.Fprintln(w)
}

// joinInts formats ns joined by sep.
func joinInts(ns []int64, sep string) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, sep)
}

// storeAt returns the most slots in service, the longest queue and the
// most buys at the store at once sampled in [from, to).
func storeAt(tl []StoreSample, from, to time.Duration) (busy, queued, buys int64) {
	for _, s := range tl {
		if s.At >= from && s.At < to {
			busy, queued, buys = max(busy, s.InService), max(queued, s.Queued), max(buys, s.BuysPeak)
		}
	}
	return busy, queued, buys
}
