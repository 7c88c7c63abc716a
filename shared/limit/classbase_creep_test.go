package limit

import (
	"math/rand"
	"slices"
	"testing"
	"time"
)

// fastModel steps, a millisecond at a time, the store of the e2e test
// TestClassesFastLoginInEnvoy (measured, not in the suite: see
// docs/design/adaptive-estimator.md): 8 slots in FIFO order shared by buys of
// 150-250 ms and logins of 16-24 ms (a request that finds them busy
// waits inside the store), in front of an adaptive rule with a login
// class (reserve 0.25) above the buys. The buyers are closed-loop and
// wait in Sluice's queue; a login comes every 50 ms and waits ahead of
// them. One Sluice worker feeds the Gauge as the engine does: a Sampler,
// the class bases, a fast class's samples with their word
// (Sampler.DoneFast), a batch every 10 ms with Use and the round's
// saturation (a request left waiting marks it).
type fastModel struct {
	lim      Limit
	st       State
	g        Gauge
	smp      Sampler
	cb       ClassBases
	rng      *rand.Rand
	busy     int
	queue    []*fastJob // waiting inside the store
	serving  []*fastJob
	held     [2]int64 // in flight per class: login, buy
	waiting  [2]int   // in Sluice's queue per class
	caps     []int64
	batchSat bool
	useSum   float64
	useN     int
	// lag: Envoy's loop reads each answer between none and 2 x lag late,
	// and the engine takes lag out of the sample (its mean).
	lag int64
	// ext: closed-loop buyers that reach the store by another way (another
	// Envoy, a back office): the store's load the rule does not hold.
	ext int
	// slow: the store's service times, in tenths of the model's.
	slow int64
}

type fastJob struct {
	class            int // 0 login, 1 buy, 2 a buy of no rule's (see ext)
	admitted, finish int64
	ticket           uint32
	sat              bool
}

const fastSlots = 8

func newFastModel(seed int64) *fastModel {
	lim, _ := NewAdaptive(1, 1000)
	m := &fastModel{slow: 10, lim: lim, rng: rand.New(rand.NewSource(seed)), caps: make([]int64, 2)}
	m.g = lim.Gauge(State{})
	m.smp.Reset(m.g.Round, 0)
	return m
}

// service returns a request's service time at the store.
func (m *fastModel) service(class int) int64 {
	if class == 0 {
		return int64(16+m.rng.Intn(9)) * int64(time.Millisecond) * m.slow / 10
	}
	return int64(150+m.rng.Intn(101)) * int64(time.Millisecond) * m.slow / 10
}

// room returns how many more of class c the caps let in: logins (0)
// under the limit, buys (1) under their cap too, and behind any login
// waiting.
func (m *fastModel) room(c int) int64 {
	ClassCaps(m.g.Current(), []float64{0.25, 0}, m.caps)
	free := m.caps[0] - m.held[0] - m.held[1]
	if c == 1 {
		free = min(free, m.caps[1]-m.held[1]) - int64(m.waiting[0])
	}
	return free
}

func (m *fastModel) admit(now int64) {
	for c := range 2 {
		for m.waiting[c] > 0 && m.room(c) > 0 {
			free := m.room(c)
			m.waiting[c]--
			m.held[c]++
			in := m.held[0] + m.held[1]
			m.useSum += min(float64(in)/float64(m.g.Current()), 1)
			m.useN++
			m.cb.Admitted(c)
			span, _ := m.cb.Timing()
			j := &fastJob{class: c, admitted: now, sat: m.g.AtLimit(in) || free == 1, ticket: m.smp.Admit(now, span)}
			m.batchSat = m.batchSat || j.sat
			m.enter(j, now)
		}
		m.batchSat = m.batchSat || m.waiting[c] > 0
	}
}

// enter sends j to the store: a free slot, or its queue.
func (m *fastModel) enter(j *fastJob, now int64) {
	if m.busy < fastSlots {
		m.start(j, now)
	} else {
		m.queue = append(m.queue, j)
	}
}

func (m *fastModel) start(j *fastJob, now int64) {
	m.busy++
	j.finish = now + m.service(j.class)
	m.serving = append(m.serving, j)
}

// answer reads j's answer at now, as the engine's Sample does.
func (m *fastModel) answer(j *fastJob, now int64) {
	if j.class == 2 {
		m.enter(&fastJob{class: 2}, now)
		return
	}
	m.held[j.class]--
	lat := time.Duration(now - j.admitted)
	if m.lag > 0 {
		lat += time.Duration(m.rng.Int63n(2*m.lag+1) - m.lag)
	}
	if j.class == 1 {
		m.waiting[1]++ // the buyer presses again
	}
	b := m.cb.Base(j.class)
	if m.smp.Counts(j.ticket) {
		b = m.cb.Expect(j.class, lat)
	}
	if m.cb.Fast(j.class) {
		m.smp.DoneFast(j.ticket, lat, b, j.sat)
	} else {
		m.smp.DoneBase(j.ticket, lat, b, true, j.sat)
	}
	if m.g.Completes(m.smp.Ready) {
		m.learn(now)
	}
}

// learn adds the worker's batch to the Gauge, as the engine's sync.
func (m *fastModel) learn(now int64) {
	span, wait := m.cb.Timing()
	m.smp.Close(now, span)
	m.smp.Expire(now, wait)
	if !m.smp.Ready.Pending() {
		return
	}
	b := m.smp.Ready
	b.Saturated = b.Saturated || m.batchSat
	if m.useN > 0 && b.N > 0 {
		b.Use = m.useSum / float64(m.useN)
		m.useSum, m.useN = 0, 0
	}
	var g Gauge
	m.st, g = m.lim.Learn(m.st, now, b)
	if g.Round != m.g.Round {
		m.smp.ResetTo(g, now)
		m.cb.RoundEnded(m.g, g)
	} else {
		m.smp.Ready = Samples{Round: g.Round}
	}
	m.g, m.batchSat = g, false
}

// run steps the model from `from` for d, with buyers more closed-loop
// buyers from its start; each() is called every 250 ms.
func (m *fastModel) run(from int64, d time.Duration, buyers int, each func(now int64)) int64 {
	const ms = int64(time.Millisecond)
	m.waiting[1] += buyers
	end := from + int64(d)
	for now := from; now < end; now += ms {
		keep := m.serving[:0]
		var done []*fastJob
		for _, j := range m.serving {
			if j.finish > now {
				keep = append(keep, j)
				continue
			}
			done = append(done, j)
			m.busy--
		}
		m.serving = keep
		for m.busy < fastSlots && len(m.queue) > 0 {
			m.start(m.queue[0], now)
			m.queue = m.queue[1:]
		}
		for _, j := range done {
			m.answer(j, now)
		}
		if now%(50*ms) == 0 {
			m.waiting[0]++
		}
		m.admit(now)
		if now%(10*ms) == 0 {
			m.learn(now)
		}
		if each != nil && now%(250*ms) == 0 {
			each(now)
		}
	}
	return end
}

// fastRun is one run of fastModel with ext buyers of no rule's: 3 s of
// a quiet day (4 buyers and the logins), then 13 s of a launch (60
// buyers more). From slow start's end on (its crossing of the knee, to
// 20 and more, is what it is), it returns the login class's highest base
// and the limit's median (read every 250 ms).
func fastRun(seed int64, ext int) (base time.Duration, lim float64) {
	m := newFastModel(seed)
	m.lag = int64(4 * time.Millisecond)
	now := m.run(int64(time.Hour), 3*time.Second, 4, nil)
	for range ext {
		m.enter(&fastJob{class: 2}, now)
	}
	var lims []float64
	m.run(now, 13*time.Second, 60, func(int64) {
		if m.g.SlowStart && len(lims) == 0 {
			return
		}
		lims = append(lims, m.g.Limit)
		base = max(base, m.cb.Base(0))
	})
	slices.Sort(lims)
	return base, lims[len(lims)/2]
}

// TestClassBasesFastCreepModel: a fast class's base (logins of 16-24 ms on a
// store of 8 slots whose 150-250 ms buys fill it, Envoy's loop reading
// each answer up to 8 ms late) stays near its no-queue latency once slow
// start has crossed the knee: 20 seeds each of the store alone and with
// one buyer of no rule's (a standing load that keeps the slots full when
// the buys hold their cap), the logins' highest base at most 26 ms (1.3x)
// and the limit's median at most 11 (the buys' cap 8) in every seed. A
// login that finds the slots busy waits for one to free, 0-25 ms, under
// the fast classes' word's 2x: when the samples under 2x moved the base,
// the round measuring after slow start's crossing (its queue draining)
// took it to 27-40 ms in some seeds (30.7 and 31.6 ms at most in these),
// and the fast class then read calm on a queue of one or two. The limit
// held anyway in this model (a later backoff measured the base again),
// not in the e2e test's busy CI runs (12-15 on the 8 slots).
func TestClassBasesFastCreepModel(t *testing.T) {
	for ext := range 2 {
		var bases []time.Duration
		var lims []float64
		for seed := int64(1); seed <= 20; seed++ {
			b, l := fastRun(seed, ext)
			bases, lims = append(bases, b), append(lims, l)
		}
		slices.Sort(bases)
		slices.Sort(lims)
		t.Logf("%d buyers of no rule's: the logins' highest base: median %v (%v-%v); the limit's median %.1f (%.1f-%.1f)", ext,
			bases[10].Round(100*time.Microsecond), bases[0].Round(100*time.Microsecond), bases[19].Round(100*time.Microsecond),
			lims[10], lims[0], lims[19])
		if bases[19] > 26*time.Millisecond || lims[19] > 11 {
			t.Errorf("%d buyers of no rule's: the logins' base up to %v, the limit's median up to %.1f: want at most 26 ms (1.3x their 20) and 11",
				ext, bases[19].Round(100*time.Microsecond), lims[19])
		}
	}
}
