package limit

import (
	"container/heap"
	"math"
	"math/rand"
	"reflect"
	"sort"
	"testing"
	"time"
)

// upstreamSim is a deterministic discrete-event model of what the e2e tests
// run for real: an upstream with `slots` workers serving in FIFO order and
// queueing the rest inside itself, and in front of it one Envoy or more
// (fronts), each with its own closed-loop clients and its own Gauge (shared
// data is per Envoy), enforcing the learnt limit (the requests over it wait
// in Sluice's queue) and feeding the Gauge as the engine does (flush every
// flushEvery; samples of requests admitted before the Envoy saw the current
// round are dropped).
type upstreamSim struct {
	*simFront // the first Envoy
	fronts    []*simFront
	lim       Limit
	lastFlush int64

	now     int64
	slots   int
	service func() time.Duration
	busy    int
	queue   []simReq // waiting inside the upstream
	done    simHeap

	served   int
	arrivalQ []int // upstream queue length seen by each arrival

	// pauses are spans [from, to) in which the Envoys' workers do not run
	// (a busy machine does not schedule them): answers that come back
	// then are read at the pause's end, and nothing is admitted or added
	// to a Gauge. With dropLate, a worker that runs again drops the
	// windows of the requests that were out during the pause, as the
	// engine does when its tick is overdue (see Sampler.Late).
	pauses   [][2]int64
	dropLate bool
	// tickEvery: the worker sees a pause only if its tick was due in it
	// (the tick is overdue when it runs again), ticks every tickEvery
	// from 0 (0: every pause is seen).
	tickEvery int64
	reads     simHeap // answers waiting for a paused worker, by finish
}

// simFront is one Envoy of upstreamSim.
type simFront struct {
	st       State
	g        Gauge
	smp      Sampler
	inFlight int64 // admitted, not yet answered
	waiting  int   // clients waiting in Sluice's queue
	// cb: a rule with classes, a login class above the buys, reserving
	// reserve of the limit (nil: no classes); the clients are buys. The
	// front feeds Use and the class bases as the engine does.
	cb      *ClassBases
	reserve float64
	useSum  float64
	useN    int
}

type simReq struct {
	front            *simFront
	admitted, finish int64
	sat              bool
	ticket           uint32
}

type simHeap []simReq

func (h simHeap) Len() int           { return len(h) }
func (h simHeap) Less(i, j int) bool { return h[i].finish < h[j].finish }
func (h simHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *simHeap) Push(x any)        { *h = append(*h, x.(simReq)) }
func (h *simHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

const flushEvery = int64(10 * time.Millisecond)

func newSim(t *testing.T, minL, maxL int64, slots, clients int, service func() time.Duration) *upstreamSim {
	lim, err := NewAdaptive(minL, maxL)
	if err != nil {
		t.Fatal(err)
	}
	s := &upstreamSim{lim: lim, slots: slots, service: service, now: int64(time.Hour)}
	s.simFront = s.addFront(clients)
	return s
}

// addFront puts another Envoy, cold, with its clients, in front of s.
func (s *upstreamSim) addFront(clients int) *simFront {
	f := &simFront{g: s.lim.Gauge(State{}), waiting: clients}
	f.smp.Reset(f.g.Round, s.now)
	s.fronts = append(s.fronts, f)
	return f
}

// capacity returns how many requests f admits: the limit, or the buys'
// cap under the login class's reserve.
func (f *simFront) capacity() int64 {
	if f.reserve == 0 {
		return f.g.Current()
	}
	caps := []int64{0, 0}
	ClassCaps(f.g.Current(), []float64{f.reserve, 0}, caps)
	return caps[1]
}

// timing is the engine's learner.timing.
func (f *simFront) timing() (span, wait time.Duration) {
	if f.cb != nil {
		return f.cb.Timing()
	}
	return f.g.SamplerTiming()
}

func (s *upstreamSim) start(r simReq) {
	s.busy++
	r.finish = s.now + int64(s.service())
	heap.Push(&s.done, r)
}

// admit lets waiting clients in while the limits allow.
func (s *upstreamSim) admit() {
	for _, f := range s.fronts {
		for f.waiting > 0 && f.inFlight < f.capacity() {
			f.waiting--
			f.inFlight++
			span, _ := f.timing()
			if f.cb != nil {
				f.cb.Admitted(1)
			}
			if f.reserve > 0 {
				f.useSum += min(float64(f.inFlight)/float64(f.g.Current()), 1)
				f.useN++
			}
			r := simReq{front: f, admitted: s.now, sat: f.g.AtLimit(f.inFlight) || (f.reserve > 0 && f.inFlight >= f.capacity()), ticket: f.smp.Admit(s.now, span)}
			s.arrivalQ = append(s.arrivalQ, len(s.queue))
			if s.busy < s.slots {
				s.start(r)
			} else {
				s.queue = append(s.queue, r)
			}
		}
	}
}

func (s *upstreamSim) flush() {
	s.lastFlush = s.now
	for _, f := range s.fronts {
		span, wait := f.timing()
		f.smp.Close(s.now, span)
		f.smp.Expire(s.now, wait)
		if f.smp.Ready.N == 0 {
			continue
		}
		prev := f.g
		b := f.smp.Ready
		if f.useN > 0 {
			b.Use = f.useSum / float64(f.useN)
			f.useSum, f.useN = 0, 0
		}
		f.st, f.g = s.lim.Learn(f.st, s.now, b)
		if f.g.Round != prev.Round {
			f.smp.Reset(f.g.Round, s.now)
			if f.cb != nil {
				f.cb.RoundEnded(prev, f.g)
			}
		} else {
			f.smp.Ready = Samples{Round: f.g.Round}
		}
	}
}

// paused returns the end of the pause now falls in (0: none).
func (s *upstreamSim) paused(now int64) int64 {
	for _, p := range s.pauses {
		if now >= p[0] && now < p[1] {
			return p[1]
		}
	}
	return 0
}

// read gives r's answer to its Envoy at s.now.
func (s *upstreamSim) read(r simReq) {
	s.served++
	f := r.front
	if f == nil {
		return // a request of no Envoy's (see backlog)
	}
	f.inFlight--
	f.waiting++ // the client sends its next request at once
	lat := time.Duration(s.now - r.admitted)
	if f.cb != nil {
		b := f.cb.Base(1)
		if f.smp.Counts(r.ticket) {
			b = f.cb.Expect(1, lat)
		}
		f.smp.DoneBase(r.ticket, lat, b, true, r.sat)
	} else {
		f.smp.Done(r.ticket, lat, true, r.sat)
	}
	if f.g.Completes(f.smp.Ready) {
		s.flush()
	}
}

// resume is a paused worker running again at s.now, a pause of [from,
// s.now): with dropLate, it drops the windows of the requests out.
func (s *upstreamSim) resume(from int64) {
	if !s.dropLate || (s.tickEvery > 0 && (from+s.tickEvery-1)/s.tickEvery*s.tickEvery >= s.now) {
		return
	}
	for _, f := range s.fronts {
		f.smp.Late(from, s.now)
	}
}

// run advances the model by d.
func (s *upstreamSim) run(d time.Duration) {
	end := s.now + int64(d)
	s.admit()
	for s.now < end {
		next := s.lastFlush + flushEvery
		if to := s.paused(next); to > 0 {
			next = to // the worker's tick runs when it runs again
		}
		if len(s.done) > 0 && s.done[0].finish < next {
			next = s.done[0].finish
		}
		if len(s.reads) > 0 {
			next = min(next, s.reads[0].finish)
		}
		s.now = next
		if len(s.done) > 0 && s.done[0].finish == s.now {
			r := heap.Pop(&s.done).(simReq)
			s.busy--
			if len(s.queue) > 0 {
				q := s.queue[0]
				s.queue = s.queue[1:]
				s.start(q)
			}
			if to := s.paused(s.now); to > 0 {
				r.finish = to
				heap.Push(&s.reads, r)
			} else {
				s.read(r)
			}
		}
		if s.paused(s.now) > 0 {
			continue
		}
		if len(s.reads) > 0 && s.reads[0].finish == s.now {
			for _, p := range s.pauses {
				if p[1] == s.now {
					s.resume(p[0])
				}
			}
			for len(s.reads) > 0 && s.reads[0].finish == s.now {
				s.read(heap.Pop(&s.reads).(simReq))
			}
		}
		if s.now-s.lastFlush >= flushEvery {
			s.flush()
		}
		s.admit()
	}
}

// phase runs d and returns the throughput (per second) and the 90th
// percentile of the upstream queue seen at arrival.
func (s *upstreamSim) phase(d time.Duration) (float64, int) {
	s.served, s.arrivalQ = 0, s.arrivalQ[:0]
	s.run(d)
	q := append([]int(nil), s.arrivalQ...)
	sort.Ints(q)
	p90 := 0
	if len(q) > 0 {
		p90 = q[len(q)*9/10]
	}
	return float64(s.served) / d.Seconds(), p90
}

func fixed(d time.Duration) func() time.Duration { return func() time.Duration { return d } }

// buyService is the demo store's buy: 100-200 ms, uniformly.
func buyService(rng *rand.Rand) func() time.Duration {
	return func() time.Duration {
		return 100*time.Millisecond + time.Duration(rng.Int63n(int64(100*time.Millisecond)))
	}
}

// The e2e scenario: 8 slots of 50 ms (160/s), 64 clients; the service time
// doubles then is restored. After a few seconds in each phase the upstream
// runs at >= 70% of its capacity with a short queue (p90 <= 8; with no
// limit it would be 56).
func TestAdaptiveFindsAndFollowsCapacity(t *testing.T) {
	service := 50 * time.Millisecond
	s := newSim(t, 1, 1000, 8, 64, func() time.Duration { return service })
	s.phase(2 * time.Second) // from cold
	for _, ph := range []struct {
		service  time.Duration
		capacity float64
	}{{50 * time.Millisecond, 160}, {100 * time.Millisecond, 80}, {50 * time.Millisecond, 160}} {
		service = ph.service
		s.phase(3 * time.Second) // follow the change
		x, p90 := s.phase(5 * time.Second)
		t.Logf("service %v: %.0f/s of %.0f, p90 queue %d, limit %.1f, base %v", ph.service, x, ph.capacity, p90, s.g.Limit, s.g.Base)
		if x < 0.7*ph.capacity || p90 > 8 {
			t.Errorf("service %v: throughput %.0f/s (capacity %.0f), upstream queue p90 %d", ph.service, x, ph.capacity, p90)
		}
		if s.g.Base < ph.service*9/10 || s.g.Base > ph.service*3/2 {
			t.Errorf("service %v: base latency %v", ph.service, s.g.Base)
		}
	}
}

// From cold, the rule reaches the upstream's capacity within a second and
// a half for a 150 ms service time (ten round trips), through the noise of
// service times that vary by a factor of two (uniform 100-200 ms, as the
// demo store's buy): >= 85% of the capacity, a short queue (p90 of the
// waiters at arrival at most 8, the e2e test's bound, where no limit
// gives about 480: a limit held a little over the knee, when slow start's
// noisy rounds raised Base, queues a little until it next backs off).
func TestAdaptiveColdStartNoisy(t *testing.T) {
	for seed := int64(1); seed <= 50; seed++ {
		rng := rand.New(rand.NewSource(seed))
		s := newSim(t, 1, 1000, 20, 500, buyService(rng))
		s.phase(1500 * time.Millisecond)
		x, p90 := s.phase(10 * time.Second)
		capacity := 20 / 0.150
		if x < 0.85*capacity || p90 > 8 {
			t.Errorf("seed %d: %.0f/s of %.0f, upstream queue p90 %d, limit %.1f", seed, x, capacity, p90, s.g.Limit)
		}
	}
}

// Noisier service times (uniform ±50%: a round of 16 means varies by 7%,
// and one round in tens reads a rise of 20% from noise alone) on a wider
// upstream, 16 slots of 20 or 50 ms, 6 seeds each: after 15 s the
// upstream runs at >= 75% of its capacity with a short queue. A held
// limit backs off only when two rounds in a row rise clearly, and Base
// follows the rounds up as well as down, so noise neither ratchets the
// limit down nor drags Base under the mean (when a single clear round
// backed off and probing rounds moved Base only down, 3 of these 12 runs
// ended at 18-32%).
func TestAdaptiveNoisyServiceHolds(t *testing.T) {
	for _, svc := range []time.Duration{20 * time.Millisecond, 50 * time.Millisecond} {
		for seed := int64(1); seed <= 6; seed++ {
			rng := rand.New(rand.NewSource(seed))
			s := newSim(t, 1, 1000, 16, 128, func() time.Duration {
				return svc/2 + time.Duration(rng.Int63n(int64(svc)))
			})
			s.phase(15 * time.Second)
			x, p90 := s.phase(5 * time.Second)
			share := x / (16 / svc.Seconds())
			t.Logf("16 x %v, seed %d: %.0f%% of the capacity, upstream queue p90 %d, limit %.1f", svc, seed, 100*share, p90, s.g.Limit)
			if share < 0.75 || p90 > 8 {
				t.Errorf("16 x %v, seed %d: %.0f%% of the capacity, upstream queue p90 %d", svc, seed, 100*share, p90)
			}
		}
	}
}

// The e2e test's noisy upstream (16 slots, 25-75 ms, 128 clients, from
// cold, measured over 5 s after 7) over 300 seeds. When a round's mean was
// that of its first answers, a Base learnt in slow start's small rounds
// read the larger rounds after it as a queue and the limit ratcheted
// down: 14 of 300 seeds ran under 60% of the capacity, the worst at 22%.
// Counted by admission (Sampler), 7 did, the worst at 30%: a Base from a
// cold start's first 4 latencies, low by noise, still read the rounds
// after it as a queue, and the limit backed off twice from each, down to
// 1-2. Measured again as after a stall when it rests on fewer than
// MinRound samples (see endRound), at most 10 do, none under 40% (6, the
// worst at 50%).
func TestAdaptiveNoisyServiceRarelyRatchets(t *testing.T) {
	low, worst := 0, 1.0
	for seed := int64(1); seed <= 300; seed++ {
		rng := rand.New(rand.NewSource(seed))
		s := newSim(t, 1, 1000, 16, 128, func() time.Duration {
			return 25*time.Millisecond + time.Duration(rng.Int63n(int64(50*time.Millisecond)))
		})
		s.phase(7 * time.Second)
		x, _ := s.phase(5 * time.Second)
		share := x / 320
		worst = min(worst, share)
		if share < 0.6 {
			low++
		}
	}
	t.Logf("300 seeds: %d under 60%% of the capacity, the worst at %.0f%%", low, 100*worst)
	if low > 10 || worst < 0.4 {
		t.Errorf("300 seeds: %d under 60%% of the capacity, the worst at %.0f%%", low, 100*worst)
	}
}

// Upstreams of every size and speed: 1 to 128 slots, 2 ms to 1 s of
// service, 8 clients per slot (at least 64), from cold, measured over 5 s
// after 15 s or 20 round trips, whichever is longer (slow start from 4 to
// 128 takes 9 rounds, each a round trip and its slowest answer). With a
// steady service time each runs at >= 75% of its
// capacity with a short queue (p90 <= 8); with service times uniform
// within ±50%, all but at most 3 of the 35 run at >= 70%, none with a
// longer queue. With -v it also logs exponential service times, where the
// rule is not reliable (docs/adaptive-concurrency.md, "Latency that varies
// a lot").
func TestAdaptiveAnyUpstream(t *testing.T) {
	low := 0
	for _, slots := range []int{1, 2, 4, 16, 32, 64, 128} {
		for _, svc := range []time.Duration{2 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond, time.Second} {
			for _, dist := range []string{"steady", "uniform ±50%", "exponential"} {
				if dist == "exponential" && !testing.Verbose() {
					continue
				}
				rng := rand.New(rand.NewSource(int64(slots) + int64(svc)))
				service := map[string]func() time.Duration{
					"steady":       fixed(svc),
					"uniform ±50%": func() time.Duration { return svc/2 + time.Duration(rng.Int63n(int64(svc))) },
					"exponential":  func() time.Duration { return time.Duration(float64(svc) * min(rng.ExpFloat64(), 8)) },
				}[dist]
				s := newSim(t, 1, 1000, slots, max(64, 8*slots), service)
				s.phase(max(15*time.Second, 20*svc))
				x, p90 := s.phase(5 * time.Second)
				share := x / (float64(slots) / svc.Seconds())
				t.Logf("%3d slots x %v, %s: %.0f%% of the capacity, upstream queue p90 %d, limit %.1f", slots, svc, dist, 100*share, p90, s.g.Limit)
				switch {
				case dist == "steady" && (share < 0.75 || p90 > 8):
					t.Errorf("%d slots x %v: %.0f%% of the capacity, upstream queue p90 %d", slots, svc, 100*share, p90)
				case dist == "uniform ±50%" && p90 > 8:
					t.Errorf("%d slots x %v, %s: upstream queue p90 %d", slots, svc, dist, p90)
				case dist == "uniform ±50%" && share < 0.7:
					if low++; low > 3 {
						t.Errorf("%d slots x %v, %s: %.0f%% of the capacity, the %dth run under 70%%", slots, svc, dist, 100*share, low)
					}
				}
			}
		}
	}
}

func TestAdaptiveBoundsAndIdle(t *testing.T) {
	lim, _ := NewAdaptive(3, 10)
	g := lim.Gauge(State{})
	if g.Current() != 4 || !g.SlowStart {
		t.Fatalf("cold gauge %+v", g)
	}
	st := State{}
	now := int64(time.Hour)
	// Fast, saturated rounds grow the limit to max_limit and no further.
	for i := 0; i < 100; i++ {
		now += int64(10 * time.Millisecond)
		st, g = lim.Learn(st, now, Samples{Round: g.Round, N: 20, Sum: 20 * time.Millisecond, Saturated: true})
	}
	if g.Current() != 10 {
		t.Fatalf("limit %v, want max 10", g.Limit)
	}
	// Rounds that never used their limit do not grow it.
	lim2, _ := NewAdaptive(1, 1000)
	st, g = State{}, lim2.Gauge(State{})
	for i := 0; i < 100; i++ {
		now += int64(10 * time.Millisecond)
		st, g = lim2.Learn(st, now, Samples{Round: g.Round, N: 20, Sum: 20 * time.Millisecond})
	}
	if g.Current() != InitialLimit {
		t.Fatalf("idle rule grew to %v", g.Limit)
	}
	// Slow rounds shrink the limit to min_limit and no further.
	for i := 0; i < 100; i++ {
		now += int64(10 * time.Millisecond)
		st, g = lim.Learn(st, now, Samples{Round: g.Round, N: 20, Sum: 20 * time.Second, Saturated: true})
		st, g = lim.Learn(st, now, Samples{Round: g.Round, N: 20, Sum: 20 * time.Millisecond << uint(i%20), Saturated: true})
	}
	if g.Current() < 3 {
		t.Fatalf("limit %v under min 3", g.Limit)
	}
	// A batch of another round is dropped.
	before := st
	if st2, _ := lim.Learn(st, now, Samples{Round: g.Round + 1, N: 5, Sum: time.Second}); st2 != before {
		t.Fatal("a batch of another round changed the gauge")
	}
}

func TestGaugeEncoding(t *testing.T) {
	for _, g := range []Gauge{
		{Limit: 1},
		{Limit: 65535.9375, Base: MaxLatency, Mean: MaxLatency, N: 65535, Round: roundMask, Calm: 63, Use: 1, SlowStart: true, Measure: true, Saturated: true, Warned: true, Stalled: true, Grown: true, BaseN: 31, Fast: FastQueue}, // Stalled (Measure): not FastGrown
		{Limit: 12.5, Base: 50 * time.Millisecond, Mean: 73 * time.Millisecond, N: 7, Round: 123456, Calm: 17, Measure: true, Use: 48.0 / 63, Fast: FastCalm},
		{Limit: 30, SlowStart: true, Grown: true, FastGrown: true, Saturated: true}, // FastGrown shares Stalled's bit (never both)
		{Limit: 20, Measure: true, Stalled: true},
	} {
		if got := DecodeGauge(EncodeGauge(g)); !reflect.DeepEqual(got, g) { // Gauge is not comparable (no equality function in the module)
			t.Errorf("round trip %+v -> %+v", g, got)
		}
	}
	g := DecodeGauge(EncodeGauge(Gauge{Limit: 1e9, Base: time.Hour, Mean: -1, N: -5}))
	if g.Limit != 65535.9375 || g.Base != MaxLatency || g.Mean != 0 || g.N != 0 {
		t.Errorf("saturation: %+v", g)
	}
}

// roundOf feeds lim one round of n samples of latency lat, all saturated,
// and returns the state and Gauge after it.
func roundOf(lim Limit, st State, now *int64, n int64, lat time.Duration) (State, Gauge) {
	*now += int64(10 * time.Millisecond)
	g := lim.Gauge(st)
	return lim.Learn(st, *now, Samples{Round: g.Round, N: n, Sum: lat * time.Duration(n), Saturated: true})
}

// After a backoff decided on MinRound samples or more, the limit holds for
// ProbeAfter saturated round trips: no growth, mild rises do not back it
// off (Base follows them), a clear one does when the next round shows it
// too, a stall (2x Base) at once; then it probes. A measure round clearly
// over Base backs off once more; a backoff from fewer samples probes at
// once.
func TestAdaptiveHoldsAfterBackoff(t *testing.T) {
	lim, _ := NewAdaptive(1, 1000)
	now := int64(time.Hour)
	g := Gauge{Limit: 30, Base: 100 * time.Millisecond, Round: 7}
	st := EncodeGauge(g)
	// A queue (mean 1.5x Base over 30 samples, twice): back off to
	// Backoff·30/1.5 = 19, measure; the measure round is clean.
	st, g = roundOf(lim, st, &now, 30, 150*time.Millisecond)
	if g.Limit != 30 || !g.Warned || g.Measure {
		t.Fatalf("a round 1.5x Base while holding: %+v, want it checked in the next round", g)
	}
	st, g = roundOf(lim, st, &now, 30, 150*time.Millisecond)
	if want := 30 / 1.5 * Backoff; g.Limit != want || !g.Measure || g.Calm != 0 {
		t.Fatalf("after a queue: %+v, want limit %v, measuring", g, want)
	}
	held := g.Limit
	st, g = roundOf(lim, st, &now, 19, 100*time.Millisecond)
	for i := 0; i < ProbeAfter-1; i++ {
		lat := 100 * time.Millisecond
		if i%5 == 0 {
			lat = 115 * time.Millisecond // a mild rise, twice in a row below
		}
		if i%5 == 1 {
			lat = 114 * time.Millisecond
		}
		st, g = roundOf(lim, st, &now, 19, lat)
		if g.Limit != held || g.Measure {
			t.Fatalf("round %d of the hold: %+v, want limit %v held", i, g, held)
		}
	}
	// The hold ends after ProbeAfter rounds (a round trip each here, the
	// mild ones too): the limit probes up.
	for i := 0; g.Limit == held; i++ {
		if i > 1 {
			t.Fatalf("still held after %d more clean rounds: %+v", i, g)
		}
		st, g = roundOf(lim, st, &now, 19, 100*time.Millisecond)
	}
	// While holding, a clear rise (the upstream lost capacity) backs off
	// when the next round shows it too; noise does not repeat.
	g = Gauge{Limit: 19, Base: 100 * time.Millisecond, Round: 9, Calm: 3}
	st = EncodeGauge(g)
	if st, g = roundOf(lim, st, &now, 19, 140*time.Millisecond); g.Measure || !g.Warned || g.Limit != 19 {
		t.Fatalf("clear rise while holding: %+v, want it checked in the next round", g)
	}
	if _, g2 := roundOf(lim, st, &now, 19, 100*time.Millisecond); g2.Measure || g2.Warned || g2.Limit != 19 || g2.Base != 100*time.Millisecond {
		t.Fatalf("clear rise while holding, then none: %+v, want the hold to go on", g2)
	}
	if _, g = roundOf(lim, st, &now, 19, 140*time.Millisecond); !g.Measure || g.Limit >= 19 {
		t.Fatalf("clear rise while holding, twice: %+v, want a backoff", g)
	}
	// One round 1.6x Base is not enough: the limit did not grow, so the
	// rise is not a queue it built (a stall of the machine, most often);
	// twice Base is a stall, and halves it at once (see
	// TestAdaptiveStallHalvesAndRegrows).
	g = Gauge{Limit: 19, Base: 100 * time.Millisecond, Round: 9, Calm: 3}
	if _, g = roundOf(lim, EncodeGauge(g), &now, 19, 160*time.Millisecond); g.Measure || !g.Warned || g.Limit != 19 {
		t.Fatalf("1.6x Base while holding: %+v, want it checked in the next round", g)
	}
	g = Gauge{Limit: 19, Base: 100 * time.Millisecond, Round: 9, Calm: 3}
	if _, g = roundOf(lim, EncodeGauge(g), &now, 19, 200*time.Millisecond); !g.Measure || !g.Stalled || g.Limit != 9.5 {
		t.Fatalf("2x Base while holding: %+v, want it halved at once", g)
	}
	// A measure round clearly over Base: its estimate was high (a Base
	// that rests on MinRound samples or more; over one from fewer, see
	// TestAdaptiveRoughBaseSlowStartsAgain).
	g = Gauge{Limit: 25, Base: 100 * time.Millisecond, BaseN: MinRound, Round: 11, Measure: true}
	st, g = roundOf(lim, EncodeGauge(g), &now, 25, 125*time.Millisecond)
	if want := 25 / 1.25 * Backoff; g.Limit != want || !g.Measure {
		t.Fatalf("measure round over Base: %+v, want limit %v, measuring again", g, want)
	}
	// Once: the next measure round sets Base whatever it shows.
	if _, g = roundOf(lim, st, &now, 19, 125*time.Millisecond); g.Measure || g.Limit != 25/1.25*Backoff {
		t.Fatalf("second measure round: %+v", g)
	}
	// A backoff decided on MinRound samples holds; one decided on fewer
	// (a probing round cut short by a large rise) probes at once.
	g = Gauge{Limit: 12, Base: 100 * time.Millisecond, Round: 13, Calm: ProbeAfter}
	if _, g = roundOf(lim, EncodeGauge(g), &now, MinRound, 150*time.Millisecond); !g.Measure || g.Calm != 0 {
		t.Fatalf("backoff from %d samples: %+v, want a hold after measuring", MinRound, g)
	}
	g = Gauge{Limit: 12, Base: 100 * time.Millisecond, Round: 13, Calm: ProbeAfter}
	if _, g = roundOf(lim, EncodeGauge(g), &now, MinRound/2, 150*time.Millisecond); !g.Measure || g.Calm != ProbeAfter {
		t.Fatalf("backoff from %d samples: %+v, want a probe after measuring", MinRound/2, g)
	}
}

// One round's mean is one round's: a round 10x Base (a stall, or
// latencies with a long tail) backs off to half the limit, not to a tenth
// (the next rounds measure from there, and a real loss of capacity halves
// it again a round trip later), in slow start too from 2x Base. Under
// that, slow start's crossing of the knee backs off by the whole
// estimate: it grew by half in one round trip, and can be that far over.
func TestAdaptiveOneRoundMovesLittle(t *testing.T) {
	lim, _ := NewAdaptive(1, 1000)
	now := int64(time.Hour)
	g := Gauge{Limit: 40, Base: 100 * time.Millisecond, Round: 5, Calm: ProbeAfter}
	if _, g = roundOf(lim, EncodeGauge(g), &now, 40, time.Second); g.Limit != 20 || !g.Measure {
		t.Fatalf("a round 10x Base: %+v, want limit 20, measuring", g)
	}
	g = Gauge{Limit: 18, Base: 50 * time.Millisecond, Round: 5, SlowStart: true}
	want := 18 * 50 / 95.0 * Backoff
	if _, g = roundOf(lim, EncodeGauge(g), &now, 9, 95*time.Millisecond); math.Abs(g.Limit-want) > 0.07 || !g.Measure || g.Stalled {
		t.Fatalf("slow start at 18 on a knee of 9: %+v, want limit %.2f, measuring", g, want)
	}
	g = Gauge{Limit: 18, Base: 50 * time.Millisecond, Round: 5, SlowStart: true}
	if _, g = roundOf(lim, EncodeGauge(g), &now, 9, 112500*time.Microsecond); g.Limit != 9 || !g.Measure || !g.Stalled {
		t.Fatalf("slow start at 18, a round 2.25x Base: %+v, want limit 9 (half), measuring", g)
	}
}

// Several Envoys in front of one upstream, each learning its own limit
// (shared data is per Envoy) from the same latency: when the upstream
// queues, each sees it and backs off to its share of the knee (Limit ×
// Base / Mean scales with what it sent). With a steady service time they
// keep it at >= 80% of its capacity with almost no queue, whether they
// start together or one joins while the others already fill the
// upstream, and their Bases stay the upstream's own latency. With service
// times that vary by a factor of two and three Envoys, the queue stays
// short in most runs (median of 24 runs' p90 <= 12, where no limit
// queues about 580), but in some an Envoy's Base took in the others'
// queue (it measured while they queued) and they settle over the knee, up
// to 1.5x the latency, still within a tenth of no limit's queue
// (docs/adaptive-concurrency.md, "Several Envoys").
func TestAdaptiveSeveralEnvoys(t *testing.T) {
	run := func(envoys, slots, clients int, join time.Duration, service func() time.Duration) (*upstreamSim, float64, int) {
		s := newSim(t, 1, 1000, slots, clients, service)
		for range envoys - 2 {
			s.addFront(clients)
		}
		s.phase(join)
		s.addFront(clients)
		s.phase(4 * time.Second)
		x, p90 := s.phase(6 * time.Second)
		return s, x, p90
	}
	for _, join := range []time.Duration{0, 50 * time.Millisecond, 2 * time.Second} {
		s, x, p90 := run(2, 8, 32, join, fixed(50*time.Millisecond))
		t.Logf("2 Envoys, the second from %v: %.0f/s of 160, p90 queue %d, limits %.1f + %.1f, bases %v %v",
			join, x, p90, s.fronts[0].g.Limit, s.fronts[1].g.Limit, s.fronts[0].g.Base, s.fronts[1].g.Base)
		if x < 0.8*160 || p90 > 2 || max(s.fronts[0].g.Base, s.fronts[1].g.Base) > 60*time.Millisecond {
			t.Errorf("2 Envoys, the second from %v: %.0f/s, upstream queue p90 %d, bases %v %v", join, x, p90, s.fronts[0].g.Base, s.fronts[1].g.Base)
		}
	}
	var queues []int
	for seed := int64(1); seed <= 12; seed++ {
		for _, join := range []time.Duration{0, 3 * time.Second} {
			rng := rand.New(rand.NewSource(seed))
			_, x, p90 := run(3, 20, 200, join, buyService(rng))
			queues = append(queues, p90)
			if x < 0.8*20/0.150 || p90 > 60 {
				t.Errorf("3 Envoys, seed %d, the third from %v: %.0f/s, upstream queue p90 %d", seed, join, x, p90)
			}
		}
	}
	sort.Ints(queues)
	t.Logf("3 Envoys, 100-200 ms: upstream queue p90 of 24 runs: %v", queues)
	if queues[len(queues)/2] > 12 {
		t.Errorf("3 Envoys: median upstream queue p90 %d", queues[len(queues)/2])
	}
}

// What keeps a queue out of Base: a measure round 1.5x Base measures once
// more (others may be backing off a round later) before it is taken as
// the upstream's own slowdown; a small slow-start round over
// (1+3×Tolerance) leaves Base alone and, twice, backs off; and a probe
// under a small limit grows by at most a quarter at once.
func TestAdaptiveKeepsQueueOutOfBase(t *testing.T) {
	lim, _ := NewAdaptive(1, 1000)
	now := int64(time.Hour)
	base := 100 * time.Millisecond
	g := Gauge{Limit: 16, Base: base, Round: 3, Measure: true}
	st, g := roundOf(lim, EncodeGauge(g), &now, 16, 160*time.Millisecond)
	if g.Limit != 16 || !g.Measure || g.SlowStart || g.Base != base {
		t.Fatalf("measure round 1.6x Base: %+v, want limit 16, measuring again, Base %v", g, base)
	}
	// Twice: the upstream slowed down, or a queue of others stands at it;
	// a round at half the limit tells (see TestGaugeConfirmsSlowerAtHalf).
	if st, g = roundOf(lim, st, &now, 16, 160*time.Millisecond); !g.confirming() || g.Limit != 8 || g.Base != 160*time.Millisecond {
		t.Fatalf("second measure round 1.6x Base: %+v, want Base 160ms measured again at limit 8", g)
	}
	if _, g = roundOf(lim, st, &now, 8, 160*time.Millisecond); !g.SlowStart || g.Measure || g.Base != 160*time.Millisecond {
		t.Fatalf("the round at half the limit 1.6x Base too: %+v, want slow start from Base 160ms", g)
	}

	g = Gauge{Limit: 8, Base: base, Round: 5, SlowStart: true}
	st, g = roundOf(lim, EncodeGauge(g), &now, 4, 140*time.Millisecond)
	if g.Limit != 8 || g.Base != base || !g.Warned || !g.SlowStart {
		t.Fatalf("small slow-start round 1.4x Base: %+v, want limit 8 and Base %v kept, warned", g, base)
	}
	if _, g = roundOf(lim, st, &now, 4, 140*time.Millisecond); !g.Measure || g.Limit != 8/1.4*Backoff {
		t.Fatalf("second small slow-start round 1.4x Base: %+v, want a backoff to %v", g, 8/1.4*Backoff)
	}
	// A mild one (noise, or Base from few samples) is averaged in.
	g = Gauge{Limit: 8, Base: base, Round: 7, SlowStart: true}
	if _, g = roundOf(lim, EncodeGauge(g), &now, 4, 120*time.Millisecond); g.Base != 110*time.Millisecond || g.Limit != 8 {
		t.Fatalf("small slow-start round 1.2x Base: %+v, want Base 110ms", g)
	}

	g = Gauge{Limit: 4, Base: base, Round: 9, Calm: ProbeAfter}
	if _, g = roundOf(lim, EncodeGauge(g), &now, MinRound, base); g.Limit != 5 {
		t.Fatalf("probe from 4 over a round of %d samples: %+v, want limit 5", MinRound, g)
	}
}

// In slow start, a round of 8 samples or more over Base by more than half
// the tolerance (but not the whole) holds the limit instead of growing it
// by half, and a second one backs off: slow start's growth from a limit a
// little over the knee would queue half the limit at the upstream. A
// smaller round, or one closer to Base, grows as before.
func TestAdaptiveSlowStartHoldsOnASmallRise(t *testing.T) {
	lim, _ := NewAdaptive(1, 1000)
	now := int64(time.Hour)
	base := 100 * time.Millisecond
	g := Gauge{Limit: 27, Base: base, Round: 3, SlowStart: true}
	st, g := roundOf(lim, EncodeGauge(g), &now, 13, 107*time.Millisecond)
	if g.Limit != 27 || !g.SlowStart || !g.Warned || g.Base != base {
		t.Fatalf("slow-start round of 13 at 1.07x Base: %+v, want limit 27 held, Base kept, warned", g)
	}
	want := 27 / 1.07 * Backoff
	if _, g = roundOf(lim, st, &now, 13, 107*time.Millisecond); math.Abs(g.Limit-want) > 0.07 || !g.Measure || g.SlowStart {
		t.Fatalf("second such round: %+v, want a backoff to %.2f, measuring", g, want)
	}
	for _, c := range []struct {
		n    int64
		mean time.Duration
	}{{7, 107 * time.Millisecond}, {13, 104 * time.Millisecond}} {
		g = Gauge{Limit: 12, Base: base, Round: 3, SlowStart: true}
		if _, g = roundOf(lim, EncodeGauge(g), &now, c.n, c.mean); g.Limit != 18 {
			t.Errorf("slow-start round of %d at %v on a Base of %v: %+v, want growth to 18", c.n, c.mean, base, g)
		}
	}
}

// A stall (rounds at twice Base or more: the upstream, or the Envoy
// reading it, slowed down or paused) halves the limit, no more; if the round that
// measures after it finds the latency back at Base, slow start grows it
// again by half per round trip instead of probing back one request per
// round. A stall that is a loss (the measure round still clearly over
// Base) backs off again from there. Encoded and decoded, the Gauge keeps the mark.
func TestAdaptiveStallHalvesAndRegrows(t *testing.T) {
	lim, _ := NewAdaptive(1, 1000)
	now := int64(time.Hour)
	g := Gauge{Limit: 8, Base: 130 * time.Millisecond, Round: 5, SlowStart: true}
	st, _ := roundOf(lim, EncodeGauge(g), &now, 4, 190*time.Millisecond) // a small round 1.5x: warned
	st, g = roundOf(lim, st, &now, 4, 420*time.Millisecond)
	if g.Limit != 4 || !g.Measure || !g.Stalled || !DecodeGauge(st).Stalled {
		t.Fatalf("a round 3.2x Base in slow start: %+v, want limit 4 (half), measuring, stalled", g)
	}
	// At half a limit that ran without a queue before the stall, a round
	// 1.3x the old Base is the upstream's latency now, not a queue: slow
	// start again, from a Base between the two.
	if _, o := roundOf(lim, st, &now, 8, 170*time.Millisecond); !o.SlowStart || o.Limit != 4 || o.Base != 150*time.Millisecond {
		t.Errorf("the measure round 1.3x Base: %+v, want slow start from 4, Base 150ms", o)
	}
	if st2, o := roundOf(lim, st, &now, 8, 200*time.Millisecond); !o.confirming() || o.Limit != 2 || o.Base != 200*time.Millisecond {
		t.Errorf("the measure round 1.54x Base: %+v, want Base 200ms measured again at limit 2", o)
	} else if _, o = roundOf(lim, st2, &now, 8, 200*time.Millisecond); !o.SlowStart || o.Base != 200*time.Millisecond {
		t.Errorf("at half the limit 1.54x Base too: %+v, want slow start from Base 200ms (the upstream slowed down)", o)
	}
	st, g = roundOf(lim, st, &now, 8, 135*time.Millisecond)
	if !g.SlowStart || g.Stalled || g.Base != 130*time.Millisecond || g.Limit != 4 {
		t.Fatalf("the measure round back at Base: %+v, want slow start from 4, Base 130ms", g)
	}
	if _, g = roundOf(lim, st, &now, 4, 130*time.Millisecond); g.Limit != 6 || !g.SlowStart {
		t.Errorf("a calm round after the stall: %+v, want 6 (half again)", g)
	}
	// Probing, twice Base is a stall as well; 1.9x is not.
	g = Gauge{Limit: 20, Base: 100 * time.Millisecond, Round: 5, Calm: ProbeAfter}
	if _, g = roundOf(lim, EncodeGauge(g), &now, 20, 200*time.Millisecond); !g.Stalled || g.Limit != 10 {
		t.Errorf("probing, 2x Base: %+v, want stalled, limit 10", g)
	}
	g = Gauge{Limit: 20, Base: 100 * time.Millisecond, Round: 5, Calm: ProbeAfter, Warned: true}
	if _, g = roundOf(lim, EncodeGauge(g), &now, 20, 190*time.Millisecond); g.Stalled {
		t.Errorf("probing, 1.9x Base: %+v, want a backoff that is not a stall", g)
	}
}

// stalls returns pauses of the Envoys' workers over d from `from` on: one
// every 0.3-1.3 s, each 20-200 ms long (what a busy machine's scheduler
// does to a process among many: the e2e tests' timers were late by up to
// 170 ms on a 2-core machine with a load average of 12).
func stalls(rng *rand.Rand, from int64, d time.Duration) [][2]int64 {
	var out [][2]int64
	ms := int64(time.Millisecond)
	for at := from + (300+rng.Int63n(1000))*ms; at < from+int64(d); at += (300 + rng.Int63n(1000)) * ms {
		l := (20 + rng.Int63n(181)) * ms
		out = append(out, [2]int64{at, at + l})
		at += l
	}
	return out
}

// stalledRun runs the e2e scenarios with the Envoy's worker stalling
// (see stalls), from cold: 8 slots x 50 ms with 64 clients (noisy: 16
// slots x 25-75 ms with 128), 15 s, the worker seeing a pause when a
// tick (every tick, 0: always) was due in it, and returns the throughput of the
// last 8 s as a share of the capacity, the upstream's queue p90 then, and
// the Base learnt.
func stalledRun(t *testing.T, seed int64, noisy, dropLate bool, tick time.Duration) (float64, int, time.Duration) {
	rng := rand.New(rand.NewSource(seed))
	slots, clients, service, capacity := 8, 64, fixed(50*time.Millisecond), 160.0
	if noisy {
		slots, clients, capacity = 16, 128, 320
		service = func() time.Duration {
			return 25*time.Millisecond + time.Duration(rng.Int63n(int64(50*time.Millisecond)))
		}
	}
	s := newSim(t, 1, 1000, slots, clients, service)
	s.pauses, s.dropLate, s.tickEvery = stalls(rng, s.now, 15*time.Second), dropLate, int64(tick)
	s.run(7 * time.Second)
	x, q := s.phase(8 * time.Second)
	return x / capacity, q, s.g.Base
}

// TestAdaptiveWorkerStalls: an Envoy whose worker is not scheduled for
// 20-200 ms every second or so reads the answers late, and the wait is in
// every latency of the requests out. Taken for the upstream's latency, it
// reads as a queue, or as a stall of the upstream: the limit backs off
// from an upstream that has no queue, again and again. With the windows
// of the requests out during a stall dropped (what the engine does when
// its tick is overdue, see Sampler.Late: a pause is seen if a tick of
// the plugin's, every 100 ms, was due in it), over 20 seeds the rule keeps
// 8 slots x 50 ms at >= 70% of their capacity (each seed; the stalls
// themselves cost about a tenth: nothing is forwarded during one), the
// queue p90 <= 8 and Base within 10% of 50 ms; 16 slots of 25-75 ms at a
// median >= 70% (each >= 40%: noise alone, without stalls, leaves 6 of
// 300 seeds under 60%, see TestAdaptiveNoisyServiceRarelyRatchets). A
// stall the worker misses (one between two ticks) still counts: with
// every sample kept, the median stays >= 65% (34-89% for 8 x 50 ms),
// because a held limit backs off only from a rise that shows in two
// rounds in a row, or from a stall of twice Base (halved, and slow start
// finds the limit again); when one round 1.5x Base backed it off, the
// medians were 32% and 40-58%.
func TestAdaptiveWorkerStalls(t *testing.T) {
	for _, noisy := range []bool{false, true} {
		var dropped, kept []float64
		for seed := int64(1); seed <= 20; seed++ {
			x, q, base := stalledRun(t, seed, noisy, true, 100*time.Millisecond)
			x0, q0, base0 := stalledRun(t, seed, noisy, false, 0)
			t.Logf("noisy %t seed %d: late windows dropped %.0f%% q%d Base %v; kept %.0f%% q%d Base %v", noisy, seed, x*100, q, base, x0*100, q0, base0)
			dropped, kept = append(dropped, x), append(kept, x0)
			low := 0.7
			if noisy {
				low = 0.4
			}
			if x < low || q > 8 || (!noisy && (base < 45*time.Millisecond || base > 55*time.Millisecond)) {
				t.Errorf("noisy %t seed %d: %.0f%% of the capacity, queue p90 %d, Base %v", noisy, seed, x*100, q, base)
			}
		}
		sort.Float64s(dropped)
		sort.Float64s(kept)
		t.Logf("noisy %t: late windows dropped: %.0f%%-%.0f%%, median %.0f%%; kept: %.0f%%-%.0f%%, median %.0f%%",
			noisy, dropped[0]*100, dropped[19]*100, dropped[10]*100, kept[0]*100, kept[19]*100, kept[10]*100)
		if dropped[10] < 0.7 || kept[10] < 0.65 {
			t.Errorf("noisy %t: median %.0f%% with the late windows dropped, %.0f%% with them kept", noisy, dropped[10]*100, kept[10]*100)
		}
	}
}
