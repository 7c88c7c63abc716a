package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/examples/store"
)

// RunResult is one finished run: what the clients saw and what the store
// counted.
type RunResult struct {
	// Name is the run's short name in the table ("no limits", "Sluice").
	Name string
	// Title says what the run is, for the chart ("(a) Envoy, no limits");
	// empty means Name.
	Title string
	// Scenario is the load that was sent.
	Scenario Scenario
	// Records holds one entry per request sent.
	Records []Record
	// Store is the store's metrics at the end of the run.
	Store store.Metrics
	// Timeline samples the store every 10 ms (may be empty).
	Timeline []StoreSample
	// Learnt samples the limit and the requests in flight of Rule, the
	// configuration's store-wide rule (empty without Sluice).
	Learnt []LimitSample
	Rule   SlotRule
	// Notes are extra facts about the run printed under the table, such as
	// Envoy's own counters.
	Notes []string
}

// StoreSample is the store's state at one moment of a run.
type StoreSample struct {
	At                        time.Duration // since the start of the run
	InService, Queued, Orders int64
	// BuysPeak is the most buys at the store at once (queued or in
	// service) since the previous sample.
	BuysPeak int64
}

// LaunchStats is what the store did during the launch seconds: from the
// launch to the last press of Buy.
type LaunchStats struct {
	From, To time.Duration
	// Utilization is the mean share of the store's slots in use.
	Utilization float64
	// Orders is the orders placed in the window; Capacity what the store's
	// slots could place in it if they did nothing but buys (slots × window /
	// mean buy service time).
	Orders   int64
	Capacity float64
	// QueueMax is the longest store queue seen in the window (sampled).
	QueueMax int64
}

// Launch computes the launch-window statistics of r (false: no launch or
// no samples).
func (r *RunResult) Launch() (LaunchStats, bool) {
	presses := buyerPresses(r.Scenario)
	if len(presses) == 0 || len(r.Timeline) < 2 {
		return LaunchStats{}, false
	}
	ls := LaunchStats{From: r.Scenario.LaunchAt, To: r.Scenario.LaunchAt + presses[len(presses)-1].at}
	var busy float64
	var span time.Duration
	var first, last *StoreSample
	for i := 1; i < len(r.Timeline); i++ {
		s := &r.Timeline[i]
		if s.At < ls.From || s.At > ls.To {
			continue
		}
		if first == nil {
			first = &r.Timeline[i-1]
		}
		last = s
		dt := s.At - r.Timeline[i-1].At
		busy += float64(r.Timeline[i-1].InService) * dt.Seconds()
		span += dt
		ls.QueueMax = max(ls.QueueMax, s.Queued)
	}
	if first == nil || span <= 0 {
		return LaunchStats{}, false
	}
	workers := r.Store.Workers
	if workers <= 0 {
		workers = store.DefaultWorkers
	}
	bt := store.DefaultServiceTimes().Buy
	ls.Utilization = busy / (float64(workers) * span.Seconds())
	ls.Orders = last.Orders - first.Orders
	ls.Capacity = float64(workers) * (ls.To - ls.From).Seconds() / ((bt.Min + bt.Max) / 2).Seconds()
	return ls, true
}

// EndpointStats summarizes the requests of one endpoint in one run.
type EndpointStats struct {
	// Sent is the number of requests sent.
	Sent int
	// Outcomes counts the requests by outcome.
	Outcomes [numOutcomes]int
	// LimitedWithRetryAfter is the number of 429 answers that carried a
	// Retry-After header.
	LimitedWithRetryAfter int
	// FailedCodes counts the failed requests by status (0: no answer).
	FailedCodes map[uint16]int
	// P50, P99 and Max are latencies over every request, whatever its
	// outcome: a timed-out request counts with the time it was given up at.
	P50, P99, Max time.Duration
	// LimitedP50 and LimitedP99 are the latencies of the 429 answers.
	LimitedP50, LimitedP99 time.Duration
}

// SuccessRate returns the fraction of requests that got a 2xx answer, or
// NaN when none were sent.
func (s EndpointStats) SuccessRate() float64 {
	if s.Sent == 0 {
		return math.NaN()
	}
	return float64(s.Outcomes[Succeeded]) / float64(s.Sent)
}

// Summarize computes the per-endpoint statistics of a run's records.
func Summarize(records []Record) [numEndpoints]EndpointStats {
	var stats [numEndpoints]EndpointStats
	var all, limited [numEndpoints][]time.Duration
	for _, r := range records {
		s := &stats[r.Endpoint]
		s.Sent++
		s.Outcomes[r.Outcome]++
		all[r.Endpoint] = append(all[r.Endpoint], r.Latency)
		switch r.Outcome {
		case Limited:
			limited[r.Endpoint] = append(limited[r.Endpoint], r.Latency)
			if r.RetryAfter {
				s.LimitedWithRetryAfter++
			}
		case Failed:
			if s.FailedCodes == nil {
				s.FailedCodes = make(map[uint16]int)
			}
			s.FailedCodes[r.Code]++
		}
	}
	for ep := range stats {
		s := &stats[ep]
		slices.Sort(all[ep])
		slices.Sort(limited[ep])
		s.P50 = percentile(all[ep], 0.50)
		s.P99 = percentile(all[ep], 0.99)
		if n := len(all[ep]); n > 0 {
			s.Max = all[ep][n-1]
		}
		s.LimitedP50 = percentile(limited[ep], 0.50)
		s.LimitedP99 = percentile(limited[ep], 0.99)
	}
	return stats
}

// percentile returns the q-quantile (0 < q <= 1) of sorted by the
// nearest-rank method: the smallest value such that at least q of the values
// are less than or equal to it. It returns 0 for an empty slice.
func percentile(sorted []time.Duration, q float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(q * float64(n)))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// SecondStats summarizes the requests of one endpoint sent during one second
// of a run.
type SecondStats struct {
	// Outcomes counts the requests sent in that second by outcome.
	Outcomes [numOutcomes]int
	// P99 is their p99 latency (0 when none were sent).
	P99 time.Duration
}

// PerSecond buckets the records of endpoint ep by the second in which they
// were sent, covering [0, span).
func PerSecond(records []Record, ep Endpoint, span time.Duration) []SecondStats {
	n := int((span + time.Second - 1) / time.Second)
	buckets := make([]SecondStats, n)
	lat := make([][]time.Duration, n)
	for _, r := range records {
		if r.Endpoint != ep || r.Sent < 0 {
			continue
		}
		i := int(r.Sent / time.Second)
		if i >= n {
			continue
		}
		buckets[i].Outcomes[r.Outcome]++
		lat[i] = append(lat[i], r.Latency)
	}
	for i := range buckets {
		slices.Sort(lat[i])
		buckets[i].P99 = percentile(lat[i], 0.99)
	}
	return buckets
}

// fmtLatency formats a latency with about three significant digits.
func fmtLatency(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < 10*time.Millisecond:
		return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) + "ms"
	case d < 100*time.Millisecond:
		return strconv.FormatFloat(float64(d)/1e6, 'f', 1, 64) + "ms"
	case d < time.Second:
		return strconv.FormatFloat(float64(d)/1e6, 'f', 0, 64) + "ms"
	default:
		return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + "s"
	}
}

// fmtCount formats n with thousands separators.
func fmtCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// fmtPercent formats a fraction as a percentage, "-" for NaN.
func fmtPercent(f float64) string {
	if math.IsNaN(f) {
		return "-"
	}
	return strconv.FormatFloat(100*f, 'f', 1, 64) + "%"
}

// fmtFailures lists failed requests by status, e.g. "503x1,024 conn-errx3".
func fmtFailures(codes map[uint16]int) string {
	if len(codes) == 0 {
		return "0"
	}
	keys := make([]int, 0, len(codes))
	for c := range codes {
		keys = append(keys, int(c))
	}
	sort.Ints(keys)
	parts := make([]string, len(keys))
	for i, c := range keys {
		name := strconv.Itoa(c)
		if c == 0 {
			name = "conn-err"
		}
		parts[i] = name + "x" + fmtCount(int64(codes[uint16(c)]))
	}
	return strings.Join(parts, " ")
}

// WriteTable prints the side-by-side table: for each endpoint, one line per
// run.
func WriteTable(w io.Writer, runs []*RunResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	stats := make([][numEndpoints]EndpointStats, len(runs))
	for i, r := range runs {
		stats[i] = Summarize(r.Records)
	}
	// tabwriter right-aligns every column; pad the two name columns so that
	// they read left-aligned.
	epWidth, runWidth := len("endpoint"), len("run")
	for ep := range numEndpoints {
		epWidth = max(epWidth, len(ep.String()))
	}
	for _, r := range runs {
		runWidth = max(runWidth, len(r.Name))
	}
	fmt.Fprintf(tw, "%-*s\t%-*s\tsent\tsuccess\tp50\tp99\tmax\ttimeouts\t429s\t429 p50\t429 p99\tother failures\treached store\tserved by store\t\n",
		epWidth, "endpoint", runWidth, "run")
	for ep := range numEndpoints {
		first := true
		for i, r := range runs {
			s := stats[i][ep]
			em := r.Store.Endpoints[ep.String()]
			if s.Sent == 0 && em.Received == 0 {
				continue // this run sent no such request (the no-launch run's buys)
			}
			name := ""
			if first {
				name = ep.String()
				first = false
			}
			fmt.Fprintf(tw, "%-*s\t%-*s"+strings.Repeat("\t%s", 12)+"\t\n",
				epWidth, name, runWidth, r.Name, fmtCount(int64(s.Sent)), fmtPercent(s.SuccessRate()),
				fmtLatency(s.P50), fmtLatency(s.P99), fmtLatency(s.Max),
				fmtCount(int64(s.Outcomes[TimedOut])), fmtCount(int64(s.Outcomes[Limited])),
				fmtLatency(s.LimitedP50), fmtLatency(s.LimitedP99), fmtFailures(s.FailedCodes),
				fmtCount(em.Received), fmtCount(em.Served))
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "  Latencies cover every request sent, failed or not; a timed-out request counts with the time it was given up at.")
	fmt.Fprintln(w, "  \"reached store\" and \"served by store\" come from the store's own /metrics (served = a worker slot handled it).")
	for _, r := range runs {
		m := r.Store
		fmt.Fprintf(w, "  store during %s: %d worker slots, utilization %.0f%%, most requests queued at once %s, orders placed %s\n",
			r.Name, m.Workers, 100*m.Utilization, fmtCount(m.QueueDepthMax), fmtCount(m.Orders))
		if ls, ok := r.Launch(); ok {
			fmt.Fprintf(w, "  store during %s, launch seconds %s-%s: utilization %.0f%%, orders placed %s of the %s its slots could serve (%.0f%%), store queue at most %s\n",
				r.Name, fmtSeconds(ls.From), fmtSeconds(ls.To), 100*ls.Utilization, fmtCount(ls.Orders), fmtCount(int64(ls.Capacity)),
				100*float64(ls.Orders)/ls.Capacity, fmtCount(ls.QueueMax))
		}
		for _, n := range r.Notes {
			fmt.Fprintf(w, "  %s: %s\n", r.Name, n)
		}
		WriteLearnt(w, r)
	}
}

// Headlines returns the lines to quote: login p99 and success in both runs,
// what happened to the buy presses, and login p99 without a launch.
// baseline may be nil.
func Headlines(noLimits, sluice, baseline *RunResult) []string {
	a, b := Summarize(noLimits.Records), Summarize(sluice.Records)
	la, lb := a[Login], b[Login]
	ba, bb := a[Buy], b[Buy]
	lines := []string{
		fmt.Sprintf("login during the launch: p99 %s, success %s without limits -> p99 %s, success %s with Sluice",
			fmtLatency(la.P99), fmtPercent(la.SuccessRate()), fmtLatency(lb.P99), fmtPercent(lb.SuccessRate())),
		fmt.Sprintf("home page during the launch: p99 %s, success %s without limits -> p99 %s, success %s with Sluice",
			fmtLatency(a[Home].P99), fmtPercent(a[Home].SuccessRate()), fmtLatency(b[Home].P99), fmtPercent(b[Home].SuccessRate())),
		fmt.Sprintf("buy presses: %s sent; without limits %s ok, %s timed out, %s failed otherwise; with Sluice %s ok, %s answered 429 (p50 %s, p99 %s, %s with Retry-After), %s timed out",
			fmtCount(int64(bb.Sent)), fmtCount(int64(ba.Outcomes[Succeeded])), fmtCount(int64(ba.Outcomes[TimedOut])), fmtCount(int64(ba.Outcomes[Failed])),
			fmtCount(int64(bb.Outcomes[Succeeded])), fmtCount(int64(bb.Outcomes[Limited])), fmtLatency(bb.LimitedP50), fmtLatency(bb.LimitedP99),
			fmtPercent(ratio(bb.LimitedWithRetryAfter, bb.Outcomes[Limited])), fmtCount(int64(bb.Outcomes[TimedOut]))),
	}
	if la, ok := noLimits.Launch(); ok {
		if lb, ok := sluice.Launch(); ok {
			lines = append(lines, fmt.Sprintf("launch seconds %s-%s: orders placed %s without limits -> %s with Sluice, of the %s the store's slots could serve (%.0f%% -> %.0f%%); store utilization %.0f%% -> %.0f%%; store queue at most %s -> %s (%d slots)",
				fmtSeconds(lb.From), fmtSeconds(lb.To), fmtCount(la.Orders), fmtCount(lb.Orders), fmtCount(int64(lb.Capacity)),
				100*float64(la.Orders)/la.Capacity, 100*float64(lb.Orders)/lb.Capacity, 100*la.Utilization, 100*lb.Utilization,
				fmtCount(la.QueueMax), fmtCount(lb.QueueMax), sluice.Store.Workers))
		}
	}
	lines = append(lines, fmt.Sprintf("orders placed over the whole run: %s without limits, %s with Sluice", fmtCount(noLimits.Store.Orders), fmtCount(sluice.Store.Orders)))
	if baseline != nil {
		l0 := Summarize(baseline.Records)[Login]
		verdict := "within"
		x := float64(lb.P99) / float64(l0.P99)
		if l0.P99 == 0 || x > goalLoginX {
			verdict = "NOT within"
		}
		if g, ok := MeasureGoals(sluice, baseline); ok {
			lines = append(lines, "targets with Sluice: "+g.String())
		}
		lines = append(lines, fmt.Sprintf("login p99 with no launch: %s; with Sluice under the launch: %s = %.1fx (%s the %.0fx target)",
			fmtLatency(l0.P99), fmtLatency(lb.P99), x, verdict, goalLoginX))
	}
	return lines
}

// title returns r.Title, or r.Name when it has none.
func (r *RunResult) title() string {
	if r.Title != "" {
		return r.Title
	}
	return r.Name
}

// ratio returns n/d, NaN when d is 0.
func ratio(n, d int) float64 {
	if d == 0 {
		return math.NaN()
	}
	return float64(n) / float64(d)
}
