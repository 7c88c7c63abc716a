package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

func ms(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

func TestPercentileNearestRank(t *testing.T) {
	var hundred []time.Duration
	for i := 1; i <= 100; i++ {
		hundred = append(hundred, ms(float64(i)))
	}
	cases := []struct {
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		{nil, 0.99, 0},
		{[]time.Duration{ms(7)}, 0.5, ms(7)},
		{[]time.Duration{ms(7)}, 0.99, ms(7)},
		{[]time.Duration{ms(1), ms(2)}, 0.5, ms(1)},
		{[]time.Duration{ms(1), ms(2)}, 0.51, ms(2)},
		{hundred, 0.50, ms(50)},
		{hundred, 0.99, ms(99)},
		{hundred, 1, ms(100)},
		{hundred[:99], 0.99, ms(99)}, // ceil(0.99*99) = 99
		{hundred[:10], 0.99, ms(10)}, // few samples: p99 is the max
	}
	for _, c := range cases {
		if got := percentile(c.sorted, c.q); got != c.want {
			t.Errorf("percentile(%d values, %v) = %v, want %v", len(c.sorted), c.q, got, c.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	records := []Record{
		{Endpoint: Login, Latency: ms(5), Code: 200, Outcome: Succeeded},
		{Endpoint: Login, Latency: ms(6), Code: 200, Outcome: Succeeded},
		{Endpoint: Login, Latency: 10 * time.Second, Outcome: TimedOut},
		{Endpoint: Login, Latency: ms(1), Code: 503, Outcome: Failed},
		{Endpoint: Buy, Latency: ms(150), Code: 201, Outcome: Succeeded},
		{Endpoint: Buy, Latency: ms(1), Code: 429, Outcome: Limited, RetryAfter: true},
		{Endpoint: Buy, Latency: ms(2), Code: 429, Outcome: Limited, RetryAfter: true},
		{Endpoint: Buy, Latency: ms(3), Code: 429, Outcome: Limited},
		{Endpoint: Buy, Latency: ms(4), Outcome: Failed},
	}
	s := Summarize(records)

	l := s[Login]
	if l.Sent != 4 || l.Outcomes[Succeeded] != 2 || l.Outcomes[TimedOut] != 1 || l.Outcomes[Failed] != 1 {
		t.Errorf("login counts = %+v", l)
	}
	if got := l.SuccessRate(); got != 0.5 {
		t.Errorf("login success = %v, want 0.5", got)
	}
	// Latencies 1, 5, 6, 10000 ms: the timeout counts, at its 10 s.
	if l.P50 != ms(5) || l.P99 != 10*time.Second || l.Max != 10*time.Second {
		t.Errorf("login p50/p99/max = %v/%v/%v, want 5ms/10s/10s", l.P50, l.P99, l.Max)
	}
	if l.FailedCodes[503] != 1 {
		t.Errorf("login failed codes = %v", l.FailedCodes)
	}

	b := s[Buy]
	if b.Outcomes[Limited] != 3 || b.LimitedWithRetryAfter != 2 {
		t.Errorf("buy 429s = %d (with Retry-After %d), want 3 (2)", b.Outcomes[Limited], b.LimitedWithRetryAfter)
	}
	if b.LimitedP50 != ms(2) || b.LimitedP99 != ms(3) {
		t.Errorf("buy 429 p50/p99 = %v/%v, want 2ms/3ms", b.LimitedP50, b.LimitedP99)
	}
	if b.FailedCodes[0] != 1 {
		t.Errorf("buy failed codes = %v, want one without an answer", b.FailedCodes)
	}

	if h := s[Home]; h.Sent != 0 || !math.IsNaN(h.SuccessRate()) || h.P99 != 0 {
		t.Errorf("home with no requests = %+v", h)
	}
}

func TestPerSecond(t *testing.T) {
	records := []Record{
		{Endpoint: Buy, Sent: ms(100), Latency: ms(1), Outcome: Limited},
		{Endpoint: Buy, Sent: ms(999), Latency: ms(3), Outcome: Limited},
		{Endpoint: Buy, Sent: ms(1000), Latency: ms(150), Outcome: Succeeded},
		{Endpoint: Buy, Sent: ms(2500), Latency: 10 * time.Second, Outcome: TimedOut},
		{Endpoint: Buy, Sent: ms(9000), Latency: ms(1), Outcome: Limited}, // past the span
		{Endpoint: Login, Sent: ms(100), Latency: ms(5), Outcome: Succeeded},
	}
	got := PerSecond(records, Buy, 3*time.Second)
	if len(got) != 3 {
		t.Fatalf("%d buckets, want 3", len(got))
	}
	if got[0].Outcomes[Limited] != 2 || got[0].P99 != ms(3) {
		t.Errorf("second 0 = %+v", got[0])
	}
	if got[1].Outcomes[Succeeded] != 1 || got[1].P99 != ms(150) {
		t.Errorf("second 1 = %+v", got[1])
	}
	if got[2].Outcomes[TimedOut] != 1 || got[2].P99 != 10*time.Second {
		t.Errorf("second 2 = %+v", got[2])
	}
}

func TestFormatting(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                      "-",
		ms(0.42):               "0.42ms",
		ms(7.256):              "7.26ms",
		ms(12.34):              "12.3ms",
		ms(152):                "152ms",
		10*time.Second + ms(7): "10.01s",
	} {
		if got := fmtLatency(d); got != want {
			t.Errorf("fmtLatency(%v) = %q, want %q", d, got, want)
		}
	}
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 15000: "15,000", 1234567: "1,234,567", -1500: "-1,500"} {
		if got := fmtCount(n); got != want {
			t.Errorf("fmtCount(%d) = %q, want %q", n, got, want)
		}
	}
	if got := fmtFailures(map[uint16]int{503: 1024, 0: 3}); got != "conn-errx3 503x1,024" {
		t.Errorf("fmtFailures = %q", got)
	}
}

func TestHeadlinesJudgeTheTarget(t *testing.T) {
	run := func(loginP99 time.Duration) *RunResult {
		return &RunResult{Records: []Record{{Endpoint: Login, Latency: loginP99, Outcome: Succeeded}}}
	}
	baseline := run(ms(10))
	lines := Headlines(run(10*time.Second), run(ms(15)), baseline)
	if last := lines[len(lines)-1]; !strings.Contains(last, "1.5x (within the 3x target)") {
		t.Errorf("15ms vs 10ms: %q", last)
	}
	lines = Headlines(run(10*time.Second), run(ms(35)), baseline)
	if last := lines[len(lines)-1]; !strings.Contains(last, "3.5x (NOT within the 3x target)") {
		t.Errorf("35ms vs 10ms: %q", last)
	}
}

// goalsRun is a launch of 2 s (presses at 0.5 and 2 s after t=5 s) on a
// store of 20 slots whose timeline has buysAt[i] buys at the store in
// second i, and 10 orders per sampled second.
func goalsRun(loginP99 time.Duration, timeouts int, buysAt map[int]int64) *RunResult {
	sc := Scenario{Duration: 15 * time.Second, LaunchAt: 5 * time.Second, Buyers: 1, PressesPerBuyer: 2,
		FirstPressWithin: time.Second, RepressMin: 1500 * time.Millisecond, RepressMax: 1500 * time.Millisecond, Seed: 1}
	r := &RunResult{Scenario: sc, Records: []Record{{Endpoint: Login, Latency: loginP99, Outcome: Succeeded}}}
	r.Store.Workers = 20
	for range timeouts {
		r.Records = append(r.Records, Record{Endpoint: Buy, Latency: 10 * time.Second, Outcome: TimedOut})
	}
	for i := range 150 { // every 100 ms
		at := time.Duration(i) * 100 * time.Millisecond
		r.Timeline = append(r.Timeline, StoreSample{At: at, InService: 20, Orders: int64(i), BuysPeak: buysAt[int(at/time.Second)]})
	}
	return r
}

func TestGoals(t *testing.T) {
	quiet := &RunResult{Records: []Record{{Endpoint: Login, Latency: ms(10), Outcome: Succeeded}}}
	r := goalsRun(ms(25), 0, map[int]int64{4: 300, 5: 21, 6: 20, 7: 18, 9: 500})
	g, ok := MeasureGoals(r, quiet)
	if !ok {
		t.Fatal("no launch measured")
	}
	last := buyerPresses(r.Scenario)[1].at
	if g.Seconds != int((5*time.Second+last-1)/time.Second)-4 || g.SecondsOver != 1 {
		t.Errorf("seconds %d, over %d; want the launch's (from 5 s), over in the 6th only (the 4th and 9th are outside)", g.Seconds, g.SecondsOver)
	}
	if g.Backlog != 0 {
		t.Errorf("backlog %d with every request answered at once", g.Backlog)
	}
	r.Records = append(r.Records, Record{Endpoint: Buy, Sent: 5500 * time.Millisecond, Latency: time.Second},
		Record{Endpoint: Buy, Sent: 5600 * time.Millisecond, Latency: time.Second}, Record{Endpoint: Buy, Sent: 7500 * time.Millisecond, Latency: time.Second})
	if g, _ := MeasureGoals(r, quiet); g.Backlog != 2 {
		t.Errorf("backlog %d, want 2 (the third is sent after the first 2 s)", g.Backlog)
	}
	if m := g.Misses(); g.LoginX() != 2.5 || g.Timeouts != 0 || (len(m) == 1) != (g.OrderShare() < goalOrders) {
		t.Errorf("login %.2fx, timeouts %d, misses %v (orders %.2f)", g.LoginX(), g.Timeouts, m, g.OrderShare())
	}
	g.Orders = int64(g.Capacity) // every slot's order
	if m := g.Misses(); len(m) != 0 {
		t.Errorf("misses %v, want none: %s", m, g)
	}
	bad, _ := MeasureGoals(goalsRun(ms(35), 2, map[int]int64{5: 21, 6: 30}), quiet)
	bad.Orders = int64(bad.Capacity)
	if m := bad.Misses(); len(m) != 3 || !strings.Contains(bad.String(), "missed: login p99 3.5x > 3x, 2 s with buys above the slots > 1, 2 timeouts") {
		t.Errorf("misses %v: %s", m, bad)
	}
}
