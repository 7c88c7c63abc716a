package main

import (
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/sluicehq/sluice/shared/limit"
)

// storeModel steps, a millisecond at a time, an upstream of 20 workers
// with one FIFO queue, serving an adaptive rule's requests (as many as the
// limit lets in, admitted at once: their demand never ends) and other
// traffic the rule never sees; Sluice's one worker feeds the Gauge every
// 10 ms with the samples of requests admitted in the current round.
type storeModel struct {
	rng   *rand.Rand
	lim   limit.Limit
	st    limit.State
	g     limit.Gauge
	smp   limit.Sampler
	fixed int64 // a fixed limit instead of the learnt one (0: learnt)
	// crossEnd: with fixed, 27 in flight from crossAt until then (a
	// crossing of the knee as long as a learner's, or shorter).
	crossEnd int64
	envoy    int64 // added to every latency sample
	// slowFrom-slowTo: the store works at a third of its speed (the jobs
	// it starts then take 3x as long): the buys read as slow as when the
	// demo's launch second swamps Envoy (see TestAdaptiveLaunchDayStall).
	slowFrom, slowTo int64
	from             int64 // served counts the rule's answers from then on
	// start is told when a job takes a worker (it sets the finish of the
	// rule's requests); others, when other traffic arrives (through add).
	start  func(j *storeJob, now int64)
	others func(now int64)
	trace  func(now int64) // before the Gauge learns (nil: none)

	serving, queue []*storeJob
	inFlight       int64
	served, maxQ   int
	// latencies sums the rule's latency samples, latencyN counts them.
	latencies time.Duration
	latencyN  int64
}

type storeJob struct {
	rule, login     bool
	arrived, finish int64
	sat             bool
	ticket          uint32
}

func newStoreModel(seed, fixed int64) *storeModel {
	lim, _ := limit.NewAdaptive(1, 1000)
	m := &storeModel{rng: rand.New(rand.NewSource(seed)), lim: lim, fixed: fixed}
	m.g = lim.Gauge(m.st)
	m.smp.Reset(m.g.Round, 0)
	return m
}

// add gives j a worker, or queues it.
func (m *storeModel) add(j *storeJob, now int64) {
	if len(m.serving) < 20 {
		m.start(j, now)
		m.serving = append(m.serving, j)
	} else {
		m.queue = append(m.queue, j)
	}
	m.maxQ = max(m.maxQ, len(m.queue))
}

// step advances the model to now.
func (m *storeModel) step(now int64) {
	const ms = int64(time.Millisecond)
	keep := m.serving[:0]
	for _, j := range m.serving {
		switch {
		case j.finish > now:
			keep = append(keep, j)
		case j.rule:
			m.inFlight--
			if now >= m.from {
				m.served++
			}
			m.smp.Done(j.ticket, time.Duration(now-j.arrived+m.envoy), true, j.sat)
			if m.g.Completes(m.smp.Ready) {
				m.learn(now, true)
			}
			m.latencies += time.Duration(now - j.arrived + m.envoy)
			m.latencyN++
		}
	}
	m.serving = keep
	for len(m.serving) < 20 && len(m.queue) > 0 {
		m.start(m.queue[0], now)
		m.serving = append(m.serving, m.queue[0])
		m.queue = m.queue[1:]
	}
	m.others(now)
	l := m.g.Current()
	if m.fixed > 0 {
		l = m.fixed
		if now >= crossAt && now < m.crossEnd {
			l = 27
		}
	}
	for m.inFlight < l {
		m.inFlight++
		span, _ := m.g.SamplerTiming()
		m.add(&storeJob{rule: true, arrived: now, sat: m.g.AtLimit(m.inFlight), ticket: m.smp.Admit(now, span)}, now)
	}
	if m.trace != nil {
		m.trace(now)
	}
	m.learn(now, false)
}

// speed returns how many times longer than usual a job the store starts
// at now takes (see slowFrom).
func (m *storeModel) speed(now int64) int64 {
	if now >= m.slowFrom && now < m.slowTo {
		return 3
	}
	return 1
}

// learn gives the Gauge the samples of complete windows every 10 ms, or
// at once (now) when they complete its round, as Sluice's worker does.
func (m *storeModel) learn(now int64, atOnce bool) {
	if now%int64(10*time.Millisecond) != 0 && !atOnce {
		return
	}
	span, wait := m.g.SamplerTiming()
	m.smp.Close(now, span)
	m.smp.Expire(now, wait)
	if m.smp.Ready.N > 0 {
		round := m.g.Round
		if m.st, m.g = m.lim.Learn(m.st, now, m.smp.Ready); m.g.Round != round {
			m.smp.Reset(m.g.Round, now)
		} else {
			m.smp.Ready = limit.Samples{Round: m.g.Round}
		}
	}
}

// traceLaunch, when set, is told the launch model's Gauge and store queue
// every 50 ms.
var traceLaunch func(now int64, g limit.Gauge, queue int)

// slowAt is where the store slows down in the launch model, when it does:
// slow start is at 8-12 then.
const slowAt = int64(300 * time.Millisecond)

// crossAt is where slow start crosses the knee in the model's launch (18
// to 27 in flight, about 0.7 s from cold).
const crossAt = int64(700 * time.Millisecond)

// launchModel is `make demo`'s launch in the model: from cold, the rule's
// buys (100-200 ms) saturate it for launchFor (open loop, refused at once
// over the limit), on a store of 20 workers that also serves the demo's
// background traffic (70 requests a second: 20 of 2-5 ms, 20 logins of 3-5
// ms, 20 of 15-25 ms, 10 of 5-10 ms) in one FIFO queue. A fixedLimit
// replaces the learnt one, and with it cross sets how long it goes to 27
// from crossAt; slow, how long the store works at a third of its speed
// from slowAt (0: never). It returns the orders during the launch as a fraction of
// what the 20 workers could serve, the logins' wait p99 over a 45 s run
// (the other 38 s quiet: no wait), and the store's longest queue.
func launchModel(seed int64, fixedLimit int64, cross, slow time.Duration) (float64, time.Duration, int) {
	r := runLaunch(seed, fixedLimit, cross, slow)
	return r.orders, r.loginP99, r.maxQueue
}

// launchRun is what one run of the launch model shows (see launchModel).
type launchRun struct {
	orders   float64
	loginP99 time.Duration
	maxQueue int
	buyMean  time.Duration // the mean latency of the rule's requests
}

// runLaunch runs the launch model (see launchModel).
func runLaunch(seed int64, fixedLimit int64, cross, slow time.Duration) launchRun {
	const launchFor = 7 * time.Second
	const ms = int64(time.Millisecond)
	m := newStoreModel(seed, fixedLimit)
	m.crossEnd = crossAt + int64(cross)
	m.slowFrom, m.slowTo = slowAt, slowAt+int64(slow)
	m.envoy = 2 * ms
	var waits []time.Duration
	kinds := []struct {
		perSec   float64
		min, max int64
		login    bool
	}{{20, 2, 5, false}, {20, 3, 5, true}, {20, 15, 25, false}, {10, 5, 10, false}}
	m.start = func(j *storeJob, now int64) {
		switch {
		case j.rule:
			j.finish = now + (100+m.rng.Int63n(101))*ms*m.speed(now)
		case j.login:
			waits = append(waits, time.Duration(now-j.arrived))
		}
	}
	m.others = func(now int64) {
		for _, k := range kinds {
			if m.rng.Float64() < k.perSec/1000 {
				j := &storeJob{arrived: now, login: k.login}
				m.add(j, now)
				j.finish = max(j.arrived+(k.min+m.rng.Int63n(k.max-k.min+1))*ms*m.speed(now), now)
			}
		}
	}
	if traceLaunch != nil {
		m.trace = func(now int64) {
			if now%(50*ms) == 0 {
				traceLaunch(now, m.g, len(m.queue))
			}
		}
	}
	for now := ms; now <= int64(launchFor); now += ms {
		m.step(now)
	}
	// 45 s of logins: the launch's, the rest without a wait.
	for len(waits) < 900 {
		waits = append(waits, 0)
	}
	sort.Slice(waits, func(i, j int) bool { return waits[i] < waits[j] })
	return launchRun{
		orders:   float64(m.served) / (20 / 0.150 * launchFor.Seconds()),
		loginP99: waits[len(waits)*99/100],
		maxQueue: m.maxQ,
		buyMean:  m.latencies / time.Duration(max(m.latencyN, 1)),
	}
}

// The launch of `make demo` in the model. A fixed limit of 18 of the 20
// workers (what someone who knew the store would set) gives the demo's
// targets: >= 85% of the orders the workers could serve, logins that
// hardly wait. The learnt limit gets the orders (median of 20 seeds >= 85%,
// none under 80%) and a store queue no longer than its 20 workers (slow
// start does not grow by half from a round a little over Base) but in one
// seed of 20 at most, and then under 40 (over seeds 1-100, 5 reach 21-39:
// slow start's crossing round ended on requests admitted before the queue
// its growth built reached them, and it grew by half again), but not the
// logins' wait: it finds the knee by crossing it once from cold (slow
// start's last growth, then holds under it), and every request over the
// knee delays a login by a buy's share of a worker
// (docs/adaptive-concurrency.md, "It finds the knee by crossing it"), and
// where it lands after the crossing is as noisy as the buys' latency,
// which cannot tell 18 from 20 (TestAdaptiveLaunchDayHeadroomIsInvisible). Run
// with -v for the figures and the limit / store queue of seed 1 every
// 50 ms.
func TestAdaptiveLaunchDayModel(t *testing.T) {
	x, p99, q := launchModel(1, 18, 0, 0)
	t.Logf("fixed 18: orders %.0f%%, login wait p99 %v, store queue max %d", x*100, p99, q)
	if x < 0.85 || p99 > 5*time.Millisecond {
		t.Errorf("fixed 18: orders %.0f%%, login wait p99 %v", x*100, p99)
	}
	if testing.Verbose() {
		line := ""
		traceLaunch = func(now int64, g limit.Gauge, q int) {
			line += fmt.Sprintf(" %.1f/%d", g.Limit, q)
			if now%int64(time.Second) == 0 {
				t.Logf("limit/queue %s", line)
				line = ""
			}
		}
		launchModel(1, 0, 0, 0)
		traceLaunch = nil
	}
	var orders []float64
	long := 0
	for seed := int64(1); seed <= 20; seed++ {
		x, p99, q := launchModel(seed, 0, 0, 0)
		t.Logf("seed %d: orders %.0f%%, login wait p99 %v, store queue max %d", seed, x*100, p99, q)
		orders = append(orders, x)
		if q > 20 {
			long++
		}
		if x < 0.80 || q > 40 || long > 1 {
			t.Errorf("seed %d: orders %.0f%%, store queue max %d (the %dth over 20)", seed, x*100, q, long)
		}
	}
	sort.Float64s(orders)
	if orders[10] < 0.85 {
		t.Errorf("median orders %.0f%%", orders[10]*100)
	}
}

// What crossing the knee costs the logins, whoever crosses it: a fixed 18
// that goes to 27 in flight for 150, 250 or 400 ms at the launch (a
// learner that knew where the knee is and crossed it as briefly as
// latency allows: a queue shows in the latency of requests admitted over
// the knee, 100-200 ms later), then back to 18 (the store drains its
// queue). Over 20 seeds the logins' wait p99 grows with the crossing, and
// none of them is the 0 ms of the fixed 18: every login that arrives
// while buys queue at the store waits behind them
// (docs/adaptive-concurrency.md, "It finds the knee by crossing it").
func TestAdaptiveLaunchDayCrossingCost(t *testing.T) {
	last := time.Duration(-1)
	for _, cross := range []time.Duration{150 * time.Millisecond, 250 * time.Millisecond, 400 * time.Millisecond} {
		var waits []time.Duration
		for seed := int64(1); seed <= 20; seed++ {
			_, p99, _ := launchModel(seed, 18, cross, 0)
			waits = append(waits, p99)
		}
		slices.Sort(waits)
		t.Logf("18, 27 for %v, 18: login wait p99 %v-%v, median %v", cross, waits[0], waits[19], waits[10])
		if waits[0] == 0 || waits[10] <= last {
			t.Errorf("crossing for %v: login wait p99 %v-%v, median %v (shorter crossing: median %v)", cross, waits[0], waits[19], waits[10], last)
		}
		last = waits[10]
	}
}

// The demo's launch second can swamp Envoy (5,000 new clients on 2
// workers that share the machine's 2 CPUs with the load generator and
// the store): responses wait to be read, and the buys read 2-4x Base for
// a second or so. In the model the store works at a third of its speed
// for 0.5 or 1 s from slowAt, in slow start, and the buys read twice Base
// or more. The rule takes that for a stall: it halves
// its limit, no more, and once latency is back at Base slow start finds
// the knee again. Over 40 seeds a slowdown of 1 s then costs a third of
// the orders at the median and three quarters at worst (median >= 60%,
// worst >= 20% of what the workers could serve in 7 s from cold);
// probing back from the limit the slow rounds estimated, a quarter per
// round at most, sold a median of 43%, 8% at worst.
func TestAdaptiveLaunchDayStall(t *testing.T) {
	for _, slow := range []time.Duration{500 * time.Millisecond, time.Second} {
		var orders []float64
		for seed := int64(1); seed <= 40; seed++ {
			x, _, _ := launchModel(seed, 0, 0, slow)
			orders = append(orders, x)
		}
		slices.Sort(orders)
		t.Logf("the store slow for %v: orders %.0f%%-%.0f%%, median %.0f%%", slow, orders[0]*100, orders[39]*100, orders[20]*100)
		if orders[20] < 0.60 || orders[0] < 0.20 {
			t.Errorf("the store slow for %v: orders %.0f%% at worst, median %.0f%%", slow, orders[0]*100, orders[20]*100)
		}
	}
}

// Why the demo's two targets meet only at one limit, and why a rule that
// learns from the latency of the requests it admits cannot find it. The
// store's 20 workers also serve the background traffic (about one worker's
// worth on average, bursts of two or three): with 18 buys in flight the
// logins hardly wait, with 20 they wait behind a buy most of the time the
// launch lasts. The buys themselves hardly notice: a login is a few
// milliseconds of a worker, and a buy that waits for one waits that long.
// Over 20 seeds, going from 18 to 20 buys in flight multiplies the logins'
// wait p99 (median over the seeds) by 5 or more, and moves the buys' mean
// latency by under 2%, under half the noise of a round's mean (about 5%:
// the mean of 16 uniform 100-200 ms latencies has a standard deviation of
// 29/4 ms). This test checks only that contrast; what it means for a
// learner, whose landing after a crossing of the knee is as noisy as a
// round's mean, is in docs/adaptive-concurrency.md ("What a latency
// learner cannot see").
func TestAdaptiveLaunchDayHeadroomIsInvisible(t *testing.T) {
	type row struct {
		buyMean time.Duration
		login   time.Duration // median over the seeds of the logins' wait p99
	}
	measure := func(limit int64) row {
		var sum time.Duration
		var waits []time.Duration
		for seed := int64(1); seed <= 20; seed++ {
			r := runLaunch(seed, limit, 0, 0)
			sum += r.buyMean
			waits = append(waits, r.loginP99)
		}
		slices.Sort(waits)
		return row{sum / 20, waits[10]}
	}
	at18, at20 := measure(18), measure(20)
	t.Logf("18 in flight: buys' mean latency %v, logins' wait p99 %v", at18.buyMean, at18.login)
	t.Logf("20 in flight: buys' mean latency %v, logins' wait p99 %v", at20.buyMean, at20.login)
	if rise := float64(at20.buyMean)/float64(at18.buyMean) - 1; rise >= 0.02 || rise < 0 {
		t.Errorf("buys' mean latency rose by %.1f%% from 18 to 20 in flight, want 0-2%%", rise*100)
	}
	if at20.login < 5*max(at18.login, time.Millisecond) {
		t.Errorf("logins' wait p99 %v at 18, %v at 20: want 5x or more", at18.login, at20.login)
	}
}

// sharedUpstream is the demo's situation in the model: one upstream of 20
// workers serves the rule's requests (500 closed-loop clients, 100-200 ms)
// and other traffic the rule never sees (70 requests a second of 2-5 ms,
// open loop). It returns the rule's throughput and the 99th percentile of
// the other traffic's wait for a worker, from `from` on.
func sharedUpstream(seed int64, fixed int64, from time.Duration) (float64, time.Duration) {
	const ms = int64(time.Millisecond)
	m := newStoreModel(seed, fixed)
	m.from = int64(from)
	var waits []time.Duration
	m.start = func(j *storeJob, now int64) {
		if j.rule {
			j.finish = now + (100+m.rng.Int63n(100))*ms
			return
		}
		j.finish = now + (2+m.rng.Int63n(4))*ms
		if now >= int64(from) {
			waits = append(waits, time.Duration(now-j.arrived))
		}
	}
	m.others = func(now int64) {
		if m.rng.Float64() < 0.07 {
			m.add(&storeJob{arrived: now}, now)
		}
	}
	for now := ms; now <= 11500*ms; now += ms {
		m.step(now)
	}
	sort.Slice(waits, func(i, j int) bool { return waits[i] < waits[j] })
	return float64(m.served) / (11.5 - from.Seconds()), waits[len(waits)*99/100]
}

// The rule finds the knee by crossing it, again and again (a delay-based
// controller sees nothing below it): the upstream's other traffic, which
// the rule cannot see, queues behind the rule's requests while it probes.
// The rule gets >= 85% of what the workers can serve it, and that queue
// stays bounded (p99 of the other traffic's wait under 200 ms, where
// without a limit it is the whole backlog), but it is not the 0-6 ms of a
// fixed limit of 19 of the 20 workers: docs/adaptive-concurrency.md.
func TestAdaptiveSharedUpstream(t *testing.T) {
	_, fixed19 := sharedUpstream(1, 19, 3*time.Second)
	for seed := int64(1); seed <= 20; seed++ {
		x, p99 := sharedUpstream(seed, 0, 3*time.Second)
		t.Logf("seed %d: %.0f/s, the other traffic's wait p99 %v (next to a fixed 19: %v)", seed, x, p99, fixed19)
		if x < 0.85*20/0.150 || p99 > 200*time.Millisecond {
			t.Errorf("seed %d: %.0f/s, the other traffic's wait p99 %v", seed, x, p99)
		}
	}
}
