package main

import (
	"fmt"
	"strings"
	"time"
)

// The demo's targets for a launch run with Sluice (the median of three
// runs for the orders; each run for the rest).
const (
	// goalOrders: the orders placed in the launch seconds, as a share of
	// what the store's slots could serve in them.
	goalOrders = 0.85
	// goalLoginX: login p99 during the launch over login p99 with no launch.
	goalLoginX = 3.0
	// goalSecondsOver: launch seconds in which more buys were at the store
	// at once (queued or served) than it has slots.
	goalSecondsOver = 1
)

// Goals is what one launch run measured against the targets.
type Goals struct {
	Orders   int64   // placed in the launch seconds
	Capacity float64 // what the store's slots could serve in them
	// LoginP99 is over the run's logins; QuietLoginP99 over the no-launch
	// run's.
	LoginP99, QuietLoginP99 time.Duration
	// SecondsOver counts the launch seconds with more buys at the store
	// than its slots; Seconds is the launch seconds in all.
	SecondsOver, Seconds int
	// Timeouts counts the requests of every endpoint that got no answer
	// within the client's timeout.
	Timeouts int
	// Backlog is the most requests sent and not yet answered at once in
	// the launch's first two seconds (sampled every 100 ms): hundreds mean
	// Envoy fell behind, and then every figure of the run is Envoy's, not
	// the rule's. Not a target.
	Backlog int
}

// MeasureGoals measures launch run r against the no-launch run quiet
// (false: r has no launch or no store samples).
func MeasureGoals(r, quiet *RunResult) (Goals, bool) {
	ls, ok := r.Launch()
	if !ok {
		return Goals{}, false
	}
	g := Goals{Orders: ls.Orders, Capacity: ls.Capacity, LoginP99: Summarize(r.Records)[Login].P99}
	if quiet != nil {
		g.QuietLoginP99 = Summarize(quiet.Records)[Login].P99
	}
	for _, rec := range r.Records {
		if rec.Outcome == TimedOut {
			g.Timeouts++
		}
	}
	g.Backlog = backlog(r.Records, ls.From, ls.From+2*time.Second)
	workers := int64(r.Store.Workers)
	first, last := int(ls.From/time.Second), int((ls.To-1)/time.Second)
	for s := first; s <= last; s++ {
		g.Seconds++
		if _, _, buys := storeAt(r.Timeline, time.Duration(s)*time.Second, time.Duration(s+1)*time.Second); buys > workers {
			g.SecondsOver++
		}
	}
	return g, true
}

// backlog returns the most records outstanding (sent, not yet answered) at
// once in [from, to], sampled every 100 ms.
func backlog(records []Record, from, to time.Duration) int {
	most := 0
	for t := from; t <= to; t += 100 * time.Millisecond {
		n := 0
		for _, r := range records {
			if r.Sent <= t && r.Sent+r.Latency > t {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

// OrderShare is Orders / Capacity.
func (g Goals) OrderShare() float64 { return float64(g.Orders) / max(g.Capacity, 1) }

// LoginX is LoginP99 / QuietLoginP99 (0 without a no-launch run).
func (g Goals) LoginX() float64 {
	if g.QuietLoginP99 <= 0 {
		return 0
	}
	return float64(g.LoginP99) / float64(g.QuietLoginP99)
}

// Misses lists the targets the run missed (none: it met them all).
func (g Goals) Misses() []string {
	var m []string
	if g.OrderShare() < goalOrders {
		m = append(m, fmt.Sprintf("orders %.0f%% < %.0f%%", 100*g.OrderShare(), 100*goalOrders))
	}
	if x := g.LoginX(); x == 0 || x > goalLoginX {
		m = append(m, fmt.Sprintf("login p99 %.1fx > %.0fx", x, goalLoginX))
	}
	if g.SecondsOver > goalSecondsOver {
		m = append(m, fmt.Sprintf("%d s with buys above the slots > %d", g.SecondsOver, goalSecondsOver))
	}
	if g.Timeouts > 0 {
		m = append(m, fmt.Sprintf("%d timeouts", g.Timeouts))
	}
	return m
}

// String is the goals in one line, with the verdict.
func (g Goals) String() string {
	verdict := "all targets met"
	if m := g.Misses(); len(m) > 0 {
		verdict = "missed: " + strings.Join(m, ", ")
	}
	return fmt.Sprintf("orders %s of %s (%.0f%%, target %.0f%%); login p99 %s vs %s with no launch (%.1fx, target %.0fx); buys at the store above its slots in %d of %d launch seconds (target <= %d); timeouts %d (target 0): %s (at most %s requests unanswered at once in the launch's first 2 s)",
		fmtCount(g.Orders), fmtCount(int64(g.Capacity)), 100*g.OrderShare(), 100*goalOrders,
		fmtLatency(g.LoginP99), fmtLatency(g.QuietLoginP99), g.LoginX(), goalLoginX,
		g.SecondsOver, g.Seconds, goalSecondsOver, g.Timeouts, verdict, fmtCount(int64(g.Backlog)))
}

// Row is the run's cells of examples/launchday/README.md's tables:
// backlog, orders, login p99 launch / no launch, seconds over the slots,
// timeouts, targets.
func (g Goals) Row() string {
	verdict := "met"
	if m := g.Misses(); len(m) > 0 {
		verdict = "missed: " + strings.Join(m, ", ")
	}
	return fmt.Sprintf("%s | %s (%.0f%%) | %s / %s (%.1fx) | %d | %d | %s |",
		fmtCount(int64(g.Backlog)), fmtCount(g.Orders), 100*g.OrderShare(), fmtLatency(g.LoginP99), fmtLatency(g.QuietLoginP99),
		g.LoginX(), g.SecondsOver, g.Timeouts, verdict)
}
