package main

import (
	"net/http"
	"slices"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

func TestBuyerPresses(t *testing.T) {
	sc := LaunchScenario()
	presses := buyerPresses(sc)
	if want := sc.Buyers * sc.PressesPerBuyer; len(presses) != want {
		t.Fatalf("%d presses, want %d", len(presses), want)
	}
	if !slices.IsSortedFunc(presses, func(a, b press) int { return int(a.at - b.at) }) {
		t.Error("presses are not sorted by time")
	}
	perBuyer := make([][]time.Duration, sc.Buyers)
	for _, p := range presses {
		perBuyer[p.buyer] = append(perBuyer[p.buyer], p.at)
	}
	for b, times := range perBuyer {
		if len(times) != sc.PressesPerBuyer {
			t.Fatalf("buyer %d pressed %d times, want %d", b, len(times), sc.PressesPerBuyer)
		}
		if times[0] < 0 || times[0] >= sc.FirstPressWithin {
			t.Fatalf("buyer %d first pressed at %v, outside the first %v", b, times[0], sc.FirstPressWithin)
		}
		for i := 1; i < len(times); i++ {
			if gap := times[i] - times[i-1]; gap < sc.RepressMin || gap > sc.RepressMax {
				t.Fatalf("buyer %d waited %v between presses, outside %v-%v", b, gap, sc.RepressMin, sc.RepressMax)
			}
		}
	}
	if again := buyerPresses(sc); !slices.Equal(again, presses) {
		t.Error("the same seed gave different presses")
	}
	sc.Buyers = 0
	if n := len(buyerPresses(sc)); n != 0 {
		t.Errorf("no buyers: %d presses", n)
	}
}

func TestClientAddressesAreDistinct(t *testing.T) {
	seen := map[string]bool{}
	for i := range 70000 {
		a := buyerAddr(i)
		if seen[a] {
			t.Fatalf("buyerAddr(%d) = %s repeats", i, a)
		}
		seen[a] = true
	}
	for i := range 1000 {
		if a := backgroundAddr(i); seen[a] {
			t.Fatalf("backgroundAddr(%d) = %s is also a buyer", i, a)
		}
	}
	if got := buyerAddr(0x10203); got != "10.2.2.3" {
		t.Errorf("buyerAddr(0x10203) = %s", got)
	}
}

func TestSchedulePacer(t *testing.T) {
	p := schedulePacer{0, ms(10), ms(10), ms(500)}
	cases := []struct {
		elapsed time.Duration
		hits    uint64
		wait    time.Duration
		stop    bool
	}{
		{0, 0, 0, false},
		{ms(2), 1, ms(8), false},
		{ms(12), 2, 0, false}, // late: send at once
		{ms(100), 3, ms(400), false},
		{ms(600), 4, 0, true},
	}
	for _, c := range cases {
		wait, stop := p.Pace(c.elapsed, c.hits)
		if wait != c.wait || stop != c.stop {
			t.Errorf("Pace(%v, %d) = %v, %v; want %v, %v", c.elapsed, c.hits, wait, stop, c.wait, c.stop)
		}
	}
	if r := p.Rate(ms(10)); r != 4 {
		t.Errorf("Rate(10ms) = %v, want 4 hits within half a second of it", r)
	}
	if r := p.Rate(ms(700)); r != 1 {
		t.Errorf("Rate(700ms) = %v, want 1 hit within half a second of it", r)
	}
}

func TestClassify(t *testing.T) {
	start := time.Now()
	timeout := 10 * time.Second
	cases := []struct {
		name string
		res  vegeta.Result
		want Outcome
		ra   bool
	}{
		{"201", vegeta.Result{Code: 201}, Succeeded, false},
		{"429", vegeta.Result{Code: 429, Error: "429 Too Many Requests", Headers: http.Header{"Retry-After": {"3"}}}, Limited, true},
		{"503", vegeta.Result{Code: 503, Error: "503 Service Unavailable"}, Failed, false},
		{"timeout", vegeta.Result{Error: `Post "http://x/buy": context deadline exceeded (Client.Timeout exceeded while awaiting headers)`, Latency: timeout}, TimedOut, false},
		{"reset", vegeta.Result{Error: `Get "http://x/": read: connection reset by peer`, Latency: ms(3)}, Failed, false},
	}
	for _, c := range cases {
		c.res.Timestamp = start.Add(time.Second)
		r := classify(Buy, &c.res, start, timeout)
		if r.Outcome != c.want || r.RetryAfter != c.ra || r.Sent != time.Second {
			t.Errorf("%s: %+v, want outcome %v retry-after %v sent 1s", c.name, r, c.want, c.ra)
		}
	}
	if got := errorMessage(`Get "http://127.0.0.1:4242/": read: connection reset by peer`); got != "read: connection reset by peer" {
		t.Errorf("errorMessage = %q", got)
	}
}
