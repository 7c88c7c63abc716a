package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// comparison is what -compare runs: the shipped configuration and the hand
// one, on the same launch, with the same no-launch run as the reference.
type comparison struct {
	envoyBin, wasm string
	shipped, hand  string // plugin configurations
	launch, quiet  Scenario
}

// pairRun is one launch run of a comparison, with the no-launch run before
// it.
type pairRun struct {
	pair   int
	config string // "shipped" or "by hand"
	result *RunResult
	goals  Goals
	load   float64 // the load average when the run began
}

// compareRuns runs f.compare pairs: a no-launch run (the shipped
// configuration), then the launch under each configuration, the shipped
// one first in odd pairs and second in even ones, so that neither always
// runs on a machine the other just warmed. It prints each run against the
// demo's targets and, at the end, a table and the medians.
func compareRuns(ctx context.Context, f demoFlags, c comparison) error {
	started := time.Now()
	var runs []pairRun
	for pair := 1; pair <= f.compare; pair++ {
		order := []string{"shipped", "by hand"}
		if pair%2 == 0 {
			order = []string{"by hand", "shipped"}
		}
		quiet, err := runPhase(ctx, phase{name: "no launch", title: fmt.Sprintf("pair %d: no launch (shipped)", pair), scenario: c.quiet, config: c.shipped},
			phaseOptions(c.envoyBin, c.wasm, f.concurrency, phase{config: c.shipped}))
		if err != nil {
			return err
		}
		for _, which := range order {
			config := c.shipped
			if which == "by hand" {
				config = c.hand
			}
			la, _ := loadAverage()
			ph := phase{name: which, title: fmt.Sprintf("pair %d: launch, %s", pair, which), scenario: c.launch, config: config}
			r, err := runPhase(ctx, ph, phaseOptions(c.envoyBin, c.wasm, f.concurrency, ph))
			if err != nil {
				return fmt.Errorf("%s: %w", ph.title, err)
			}
			g, _ := MeasureGoals(r, quiet)
			runs = append(runs, pairRun{pair: pair, config: which, result: r, goals: g, load: la})
			fmt.Printf("%s (load average %.1f at its start): %s\n", ph.title, la, g)
			WriteLearnt(os.Stdout, r)
			fmt.Println()
		}
		if ctx.Err() != nil {
			return errors.New("interrupted")
		}
	}
	fmt.Printf("\nComparison (%s in all, %d CPUs; backlog: the most requests unanswered at once in the launch's first 2 s, hundreds when Envoy fell behind):\n\n",
		time.Since(started).Round(time.Second), runtime.NumCPU())
	WriteComparison(os.Stdout, runs)
	return nil
}

// WriteComparison prints one line per run and, per configuration, the
// medians and the runs that met every target.
func WriteComparison(w io.Writer, runs []pairRun) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "pair\tconfiguration\tload avg\tbacklog\torders (of slots' capacity)\tlogin p99 launch / no launch\ts buys > slots\ttimeouts\tlimit s6-s11\ttargets\t\n")
	for _, r := range runs {
		g := r.goals
		verdict := "met"
		if m := g.Misses(); len(m) > 0 {
			verdict = strings.Join(m, "; ")
		}
		fmt.Fprintf(tw, "%d\t%s\t%.1f\t%s\t%s of %s (%.0f%%)\t%s / %s (%.1fx)\t%d of %d\t%d\t%s\t%s\t\n",
			r.pair, r.config, r.load, fmtCount(int64(g.Backlog)), fmtCount(g.Orders), fmtCount(int64(g.Capacity)), 100*g.OrderShare(),
			fmtLatency(g.LoginP99), fmtLatency(g.QuietLoginP99), g.LoginX(), g.SecondsOver, g.Seconds, g.Timeouts,
			limitsAt(r.result, 6, 11), verdict)
	}
	tw.Flush()
	for _, config := range []string{"shipped", "by hand"} {
		var orders, logins []float64
		met, n := 0, 0
		for _, r := range runs {
			if r.config != config {
				continue
			}
			n++
			orders = append(orders, r.goals.OrderShare())
			logins = append(logins, r.goals.LoginX())
			if len(r.goals.Misses()) == 0 {
				met++
			}
		}
		if n == 0 {
			continue
		}
		fmt.Fprintf(w, "%s: median orders %.0f%% (target %.0f%%), median login p99 %.1fx (target %.0fx); %d of %d runs met every target\n",
			config, 100*median(orders), 100*goalOrders, median(logins), goalLoginX, met, n)
	}
	fmt.Fprintln(w, "\nREADME rows (pair | configuration | load average | backlog | orders | login p99 | s over the slots | timeouts | targets | limit s6-s11):")
	for _, r := range runs {
		fmt.Fprintf(w, "| %d | %s | %.1f | %s %s |\n", r.pair, r.config, r.load, r.goals.Row(), limitsAt(r.result, 6, 11))
	}
}

// limitsAt lists the rule's limit as sampled at the start of seconds
// from..to of run r ("-" for a second without a sample).
func limitsAt(r *RunResult, from, to int) string {
	var parts []string
	for s := from; s <= to; s++ {
		v := "-"
		for _, l := range r.Learnt {
			if l.At >= time.Duration(s)*time.Second && l.At < time.Duration(s+1)*time.Second {
				v = fmt.Sprint(l.Limit)
				break
			}
		}
		parts = append(parts, v)
	}
	return strings.Join(parts, ",")
}

// median returns the median of xs (the mean of the middle two for an even
// count; 0 for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
