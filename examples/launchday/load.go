package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// Endpoint is one route of the demo store as the load generator sees it.
type Endpoint int

// The store routes the scenario exercises, in the order they are reported.
const (
	Home Endpoint = iota
	Login
	Products
	Cart
	Buy
	numEndpoints
)

var endpointRoutes = [numEndpoints]struct{ method, path string }{
	Home:     {http.MethodGet, "/"},
	Login:    {http.MethodPost, "/login"},
	Products: {http.MethodGet, "/products"},
	Cart:     {http.MethodGet, "/cart"},
	Buy:      {http.MethodPost, "/buy"},
}

// String returns "METHOD /path", the name the store's metrics use.
func (e Endpoint) String() string {
	r := endpointRoutes[e]
	return r.method + " " + r.path
}

// Outcome classifies what a client got back for one request.
type Outcome uint8

// The outcomes of a request.
const (
	// Succeeded: a 2xx answer.
	Succeeded Outcome = iota
	// Limited: a 429 answer (the request was refused by the rate limiter).
	Limited
	// TimedOut: no complete answer within the client's timeout.
	TimedOut
	// Failed: any other status (503 from Envoy's circuit breaker, 5xx, ...)
	// or a connection error.
	Failed
	numOutcomes
)

// String returns the outcome's name as the report prints it.
func (o Outcome) String() string {
	return [numOutcomes]string{"ok", "429", "timeout", "failed"}[o]
}

// Record is what the load generator keeps of one request.
type Record struct {
	Endpoint Endpoint
	// Sent is when the request was sent, measured from the start of the run.
	Sent time.Duration
	// Latency is the time from sending to the complete answer (or to the
	// error, for example the timeout).
	Latency time.Duration
	// Code is the HTTP status, 0 when there was no answer.
	Code    uint16
	Outcome Outcome
	// RetryAfter tells whether the answer carried a Retry-After header.
	RetryAfter bool
}

// Scenario describes one run of the launch: steady background users for the
// whole run and, at LaunchAt, Buyers distinct clients pressing Buy.
//
// Load is open-model: every request is sent at its scheduled time whatever
// happened to the earlier ones, so a slow server cannot slow the load down and
// hide its own latency (coordinated omission).
type Scenario struct {
	// Duration is the length of the run. Background load is sent during the
	// whole of it; the run then waits for the answers still outstanding, at
	// most Timeout.
	Duration time.Duration
	// LaunchAt is when, after the start of the run, the launch begins.
	LaunchAt time.Duration
	// Buyers is the number of distinct clients (distinct X-Forwarded-For
	// addresses) that press Buy. Zero means no launch.
	Buyers int
	// PressesPerBuyer is how many times each buyer presses Buy.
	PressesPerBuyer int
	// FirstPressWithin is the window after LaunchAt in which every buyer
	// presses for the first time.
	FirstPressWithin time.Duration
	// RepressMin and RepressMax bound the time an impatient buyer waits
	// before pressing again; each gap is drawn uniformly from them.
	RepressMin, RepressMax time.Duration
	// BackgroundRate is the constant rate, in requests per second, of each
	// background endpoint (Buy's entry is ignored).
	BackgroundRate [numEndpoints]int
	// BackgroundUsers is the number of distinct background clients the
	// background requests rotate through.
	BackgroundUsers int
	// Timeout is the client's per-request timeout.
	Timeout time.Duration
	// MaxBuyerConnections caps the connections the buyers open at once
	// (0 = no cap). A request that waits for a connection counts that wait
	// in its latency.
	MaxBuyerConnections int
	// Seed makes the buyers' press times reproducible.
	Seed uint64
}

// LaunchScenario returns the launch-day scenario: a 45 s run in which 5,000
// buyers press Buy three times each from second 5 on (first press within one
// second, then again after 1-3 s, twice), while 70 background requests a
// second browse, log in and look at carts. Like real buyers, each press that
// finds no idle connection opens one (MaxBuyerConnections 0: no cap).
func LaunchScenario() Scenario {
	return Scenario{
		Duration:         45 * time.Second,
		LaunchAt:         5 * time.Second,
		Buyers:           5000,
		PressesPerBuyer:  3,
		FirstPressWithin: time.Second,
		RepressMin:       time.Second,
		RepressMax:       3 * time.Second,
		BackgroundRate:   [numEndpoints]int{Home: 20, Login: 20, Products: 20, Cart: 10},
		BackgroundUsers:  200,
		Timeout:          10 * time.Second,
		Seed:             20260101,
	}
}

// press is one scheduled press of the Buy button.
type press struct {
	at    time.Duration // since the start of the launch
	buyer int
}

// buyerPresses returns every press of the launch, sorted by time.
func buyerPresses(sc Scenario) []press {
	if sc.Buyers <= 0 || sc.PressesPerBuyer <= 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(sc.Seed, sc.Seed^0x9e3779b97f4a7c15))
	uniform := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	presses := make([]press, 0, sc.Buyers*sc.PressesPerBuyer)
	for b := range sc.Buyers {
		at := uniform(0, sc.FirstPressWithin)
		for p := range sc.PressesPerBuyer {
			if p > 0 {
				at += uniform(sc.RepressMin, sc.RepressMax)
			}
			presses = append(presses, press{at: at, buyer: b})
		}
	}
	slices.SortFunc(presses, func(a, b press) int { return int(a.at - b.at) })
	return presses
}

// buyerAddr returns the X-Forwarded-For address of buyer i: 10.1.0.0 and up.
func buyerAddr(i int) string {
	return fmt.Sprintf("10.%d.%d.%d", 1+i>>16, (i>>8)&0xff, i&0xff)
}

// backgroundAddr returns the X-Forwarded-For address of background user i:
// 10.200.0.0 and up.
func backgroundAddr(i int) string {
	return fmt.Sprintf("10.%d.%d.%d", 200+i>>16, (i>>8)&0xff, i&0xff)
}

// schedulePacer is a vegeta.Pacer that sends hit n at offsets[n] after the
// start of the attack and stops after the last one.
type schedulePacer []time.Duration

// Pace implements vegeta.Pacer.
func (p schedulePacer) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if hits >= uint64(len(p)) {
		return 0, true
	}
	return max(0, p[hits]-elapsed), false
}

// Rate implements vegeta.Pacer: the number of scheduled hits in the second
// around elapsed.
func (p schedulePacer) Rate(elapsed time.Duration) float64 {
	lo, _ := slices.BinarySearch(p, elapsed-500*time.Millisecond)
	hi, _ := slices.BinarySearch(p, elapsed+500*time.Millisecond)
	return float64(hi - lo)
}

// Progress is a snapshot of a run in flight.
type Progress struct {
	Elapsed time.Duration
	// Sent is the number of requests sent so far; Answered of them have an
	// outcome, counted by kind in Outcomes.
	Sent, Answered int64
	Outcomes       [numOutcomes]int64
	// RecentLoginP99 is the p99 latency of the logins answered since the
	// previous snapshot (0 when none were).
	RecentLoginP99 time.Duration
}

// collector gathers the records of a run from several attacks.
type collector struct {
	start    time.Time
	sent     atomic.Int64
	answered atomic.Int64
	outcomes [numOutcomes]atomic.Int64

	mu           sync.Mutex
	records      []Record
	recentLogins []time.Duration
	connErrors   map[string]int  // errors of requests that got no answer, by message
	sendLags     []time.Duration // how late each request left, see Load.SendLagP99
}

// add keeps r; lag is how late the request left; errText is the error of a
// request that got no HTTP answer and did not time out ("" otherwise).
func (c *collector) add(r Record, lag time.Duration, errText string) {
	c.answered.Add(1)
	c.outcomes[r.Outcome].Add(1)
	c.mu.Lock()
	c.records = append(c.records, r)
	c.sendLags = append(c.sendLags, lag)
	if r.Endpoint == Login {
		c.recentLogins = append(c.recentLogins, r.Latency)
	}
	if errText != "" {
		if c.connErrors == nil {
			c.connErrors = make(map[string]int)
		}
		c.connErrors[errText]++
	}
	c.mu.Unlock()
}

// errorMessage returns the part of a vegeta error worth counting: without
// the method and URL, which differ from request to request only in the port.
func errorMessage(err string) string {
	if i := strings.LastIndex(err, "\": "); i >= 0 {
		err = err[i+3:]
	}
	if len(err) > 120 {
		err = err[:120]
	}
	return err
}

func (c *collector) progress() Progress {
	p := Progress{Elapsed: time.Since(c.start), Sent: c.sent.Load(), Answered: c.answered.Load()}
	for i := range p.Outcomes {
		p.Outcomes[i] = c.outcomes[i].Load()
	}
	c.mu.Lock()
	recent := c.recentLogins
	c.recentLogins = nil
	c.mu.Unlock()
	slices.Sort(recent)
	p.RecentLoginP99 = percentile(recent, 0.99)
	return p
}

// classify turns a vegeta result into a Record.
func classify(ep Endpoint, res *vegeta.Result, start time.Time, timeout time.Duration) Record {
	r := Record{
		Endpoint:   ep,
		Sent:       res.Timestamp.Sub(start),
		Latency:    res.Latency,
		Code:       res.Code,
		RetryAfter: res.Headers.Get("Retry-After") != "",
	}
	switch {
	case res.Code >= 200 && res.Code < 300 && res.Error == "":
		r.Outcome = Succeeded
	case res.Code == http.StatusTooManyRequests:
		r.Outcome = Limited
	case res.Code == 0 && (strings.Contains(res.Error, "Client.Timeout") ||
		strings.Contains(res.Error, "deadline exceeded") || res.Latency >= timeout):
		r.Outcome = TimedOut
	default:
		r.Outcome = Failed
	}
	return r
}

// newClient returns the HTTP client of one attack: keep-alive, no proxy from
// the environment (the demo is loopback only), per-request timeout.
func newClient(timeout time.Duration, maxConns int) (*http.Client, *http.Transport) {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 10000,
		MaxConnsPerHost:     maxConns,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return &http.Client{Timeout: timeout, Transport: tr}, tr
}

// attack runs one vegeta attack and feeds its results to c. scheduled(n)
// is when the pacer means hit n to leave, from the start of the attack. It
// returns when every answer is in.
func attack(ctx context.Context, c *collector, ep Endpoint, targeter vegeta.Targeter,
	pacer vegeta.Pacer, scheduled func(n uint64) time.Duration, duration, timeout time.Duration, maxConns int) {
	client, tr := newClient(timeout, maxConns)
	defer tr.CloseIdleConnections()
	atk := vegeta.NewAttacker(vegeta.Client(client), vegeta.MaxBody(0), vegeta.Workers(4))
	stop := context.AfterFunc(ctx, func() { atk.Stop() })
	defer stop()
	counted := func(t *vegeta.Target) error {
		if err := targeter(t); err != nil {
			return err
		}
		c.sent.Add(1)
		return nil
	}
	began := time.Now()
	for res := range atk.Attack(counted, pacer, duration, ep.String()) {
		if res.Error == vegeta.ErrNoTargets.Error() {
			continue // the targeter ran dry: nothing was sent
		}
		r := classify(ep, res, c.start, timeout)
		errText := ""
		if r.Outcome == Failed && r.Code == 0 {
			errText = errorMessage(res.Error)
		}
		c.add(r, max(0, res.Timestamp.Sub(began.Add(scheduled(res.Seq)))), errText)
	}
}

// Load is what Run observed.
type Load struct {
	// Records holds one entry per request sent.
	Records []Record
	// ConnErrors counts, by message, the errors of requests that got no
	// HTTP answer for another reason than the timeout.
	ConnErrors map[string]int
	// SendLagP99 and SendLagMax tell how late requests left compared with
	// their schedule. An open-model generator sends on time on an idle
	// machine; large lags mean the machine was too busy (often with other
	// processes) and the load was not what the scenario says.
	SendLagP99, SendLagMax time.Duration
}

// Run sends the scenario's load to the store behind baseURL (for example
// "http://127.0.0.1:10000") and returns every request's record. progress, if
// not nil, is called every progressEvery while the run goes on. Run returns
// when the scenario's duration is over and every request has its answer or
// its timeout; cancelling ctx stops sending at once.
func Run(ctx context.Context, baseURL string, sc Scenario, progressEvery time.Duration, progress func(Progress)) Load {
	baseURL = strings.TrimSuffix(baseURL, "/")
	c := &collector{start: time.Now()}
	var wg sync.WaitGroup

	for ep := range numEndpoints {
		rate := sc.BackgroundRate[ep]
		if ep == Buy || rate <= 0 {
			continue
		}
		users := max(1, sc.BackgroundUsers)
		targets := make([]vegeta.Target, users)
		for u := range targets {
			targets[u] = target(baseURL, ep, backgroundAddr(u))
		}
		pacer := vegeta.ConstantPacer{Freq: rate, Per: time.Second}
		interval := time.Second / time.Duration(rate)
		// vegeta's ConstantPacer sends hit n at (n+1) intervals.
		scheduled := func(n uint64) time.Duration { return time.Duration(n+1) * interval }
		wg.Go(func() {
			attack(ctx, c, ep, vegeta.NewStaticTargeter(targets...), pacer, scheduled, sc.Duration, sc.Timeout, 0)
		})
	}

	if presses := buyerPresses(sc); len(presses) > 0 {
		offsets := make(schedulePacer, len(presses))
		targets := make([]vegeta.Target, len(presses))
		for i, p := range presses {
			offsets[i] = p.at
			targets[i] = target(baseURL, Buy, buyerAddr(p.buyer))
		}
		var next atomic.Int64
		targeter := func(t *vegeta.Target) error {
			i := next.Add(1) - 1
			if i >= int64(len(targets)) {
				return vegeta.ErrNoTargets
			}
			*t = targets[i]
			return nil
		}
		wg.Go(func() {
			select {
			case <-time.After(sc.LaunchAt - time.Since(c.start)):
			case <-ctx.Done():
				return
			}
			scheduled := func(n uint64) time.Duration { return offsets[min(n, uint64(len(offsets)-1))] }
			attack(ctx, c, Buy, targeter, offsets, scheduled, 0, sc.Timeout, sc.MaxBuyerConnections)
		})
	}

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var tick <-chan time.Time
	if progress != nil && progressEvery > 0 {
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-done:
			slices.Sort(c.sendLags)
			l := Load{Records: c.records, ConnErrors: c.connErrors, SendLagP99: percentile(c.sendLags, 0.99)}
			if n := len(c.sendLags); n > 0 {
				l.SendLagMax = c.sendLags[n-1]
			}
			return l
		case <-tick:
			progress(c.progress())
		}
	}
}

// target returns the request for endpoint ep from the client at addr.
func target(baseURL string, ep Endpoint, addr string) vegeta.Target {
	route := endpointRoutes[ep]
	h := http.Header{"X-Forwarded-For": {addr}}
	t := vegeta.Target{Method: route.method, URL: baseURL + route.path, Header: h}
	switch ep {
	case Login:
		h.Set("Content-Type", "application/json")
		t.Body = []byte(`{"user":"` + addr + `","password":"hunter2"}`)
	case Buy:
		h.Set("Content-Type", "application/json")
		t.Body = []byte(`{"sku":"launch-sneaker","qty":1}`)
	}
	return t
}
