package limit

import (
	"math/rand"
	"testing"
	"time"
)

// lightModel steps, a millisecond at a time, a store with little demand
// behind an adaptive rule with the demo's classes (login reserve 0.1, home
// 0.05, the rest): 70 requests/s arriving at random, a fifth logins of
// 5-10 ms, three tenths home pages of 3-5 ms, the rest half 2-5 ms and
// half 15-25 ms; the upstream has room for all of them (about one in
// flight), so no latency is a queue. A request with no room under its
// class's cap is refused. The Gauge is fed every 10 ms as the engine does;
// the share of the limit in flight at admissions (Use) goes with every
// batch, as an engine that measures it at every admission would send it:
// the Gauge itself must not take little demand for the reserves' doing.
type lightModel struct {
	lim      Limit
	st       State
	g        Gauge
	caps     []int64
	held     [3]int64
	jobs     []lightJob
	batch    Samples
	useSum   float64
	useN     int
	rng      *rand.Rand
	refused  [3]int
	admitted [3]int
}

type lightJob struct {
	class          int
	admitted, done int64
	round          uint32
}

var lightReserves = []float64{0.1, 0.05, 0}

func (m *lightModel) latency(class int) int64 {
	ms := int64(time.Millisecond)
	switch {
	case class == 0:
		return (5 + m.rng.Int63n(6)) * ms
	case class == 1:
		return (3 + m.rng.Int63n(3)) * ms
	case m.rng.Intn(2) == 0:
		return (2 + m.rng.Int63n(4)) * ms
	}
	return (15 + m.rng.Int63n(11)) * ms
}

// arrive decides a request of class c at now.
func (m *lightModel) arrive(c int, now int64) {
	ClassCaps(m.g.Current(), lightReserves, m.caps)
	free := int64(1 << 30)
	below := int64(0)
	for k := len(m.held) - 1; k >= 0; k-- {
		below += m.held[k]
		if k <= c {
			free = min(free, m.caps[k]-below)
		}
	}
	in := m.held[0] + m.held[1] + m.held[2]
	if free <= 0 {
		m.refused[c]++
		m.batch.Saturated = true
		return
	}
	m.admitted[c]++
	m.held[c]++
	in++
	m.batch.Saturated = m.batch.Saturated || m.g.AtLimit(in) || free == 1
	m.useSum += min(float64(in)/float64(m.g.Current()), 1)
	m.useN++
	m.jobs = append(m.jobs, lightJob{class: c, admitted: now, done: now + m.latency(c), round: m.g.Round})
}

func (m *lightModel) step(now int64) {
	keep := m.jobs[:0]
	for _, j := range m.jobs {
		if j.done > now {
			keep = append(keep, j)
			continue
		}
		m.held[j.class]--
		if j.round == m.g.Round {
			m.batch.Add(time.Duration(now-j.admitted), false)
		}
	}
	m.jobs = keep
	if m.rng.Intn(1000) < 70 {
		c := 2
		switch r := m.rng.Intn(10); {
		case r < 2:
			c = 0
		case r < 5:
			c = 1
		}
		m.arrive(c, now)
	}
	if now%int64(10*time.Millisecond) == 0 && m.batch.N > 0 {
		m.batch.Round = m.g.Round
		if m.useN > 0 {
			m.batch.Use = m.useSum / float64(m.useN)
		}
		m.st, m.g = m.lim.Learn(m.st, now, m.batch)
		m.batch, m.useSum, m.useN = Samples{}, 0, 0
	}
}

// TestGaugeLightDemandWithClasses: with about one request in flight whose
// latency varies 2-25 ms by endpoint, the learnt limit stays near where it
// was (6, learnt before the demand fell), not at 1: a round that used
// neither the limit nor a class's cap does not back off (the share of the
// limit in flight is the demand, not the reserves' doing, and the rise the
// endpoints' mix), and a backoff with a share cuts at most by half.
// At 1, every class's cap is 1 and the reserves protect nothing (the
// logins are refused behind one home page). Without that, the same runs
// fall to 1 within seconds and refuse a third of the logins.
func TestGaugeLightDemandWithClasses(t *testing.T) {
	for seed := int64(1); seed <= 5; seed++ {
		lim, _ := NewAdaptive(1, 1000)
		m := &lightModel{lim: lim, caps: make([]int64, 3), rng: rand.New(rand.NewSource(seed))}
		m.g = Gauge{Limit: 6, Base: 10 * time.Millisecond, BaseN: 32, SlowStart: true, Round: 1}
		m.st = EncodeGauge(m.g)
		start := int64(time.Hour)
		low := m.g.Limit
		var sum float64
		var n int
		for now := start; now < start+int64(30*time.Second); now += int64(time.Millisecond) {
			m.step(now)
			low = min(low, m.g.Limit)
			if now%int64(100*time.Millisecond) == 0 {
				sum += m.g.Limit
				n++
			}
		}
		mean := sum / float64(n)
		t.Logf("seed %d: limit %.1f at the end, mean %.1f, lowest %.1f; logins admitted %d refused %d, home %d/%d, rest %d/%d",
			seed, m.g.Limit, mean, low, m.admitted[0], m.refused[0], m.admitted[1], m.refused[1], m.admitted[2], m.refused[2])
		// A burst now and then fills a class's cap (a saturated round)
		// and one noisy round then halves the limit: a dip to 2-3, not 1.
		if low < 2 || mean < 4.5 {
			t.Errorf("seed %d: with about 1 in flight the limit fell from 6 to %.1f (mean %.1f over 30 s), want 2 or more (mean 4.5 or more)", seed, low, mean)
		}
		if m.refused[0]*100 > m.admitted[0] {
			t.Errorf("seed %d: %d logins refused of %d with no launch", seed, m.refused[0], m.admitted[0]+m.refused[0])
		}
	}
}

// The defect's arithmetic: a slow-start backoff from a round 10% over Base
// with a sixth of the limit in flight set the limit to 1. Unsaturated (the
// round used neither the limit nor a class's cap) it does not move the
// limit and measures Base again; saturated, it halves it at most.
func TestGaugeBackoffUse(t *testing.T) {
	clamp := func(x float64) float64 { return min(max(x, 1), 1000) }
	g := Gauge{Limit: 6, Base: 10 * time.Millisecond, N: 4, SlowStart: true, Use: 1.0 / 6}
	if b := g.backoff(11*time.Millisecond, clamp); b.Limit != 6 || !b.Measure {
		t.Errorf("unsaturated round with Use 1/6: limit %.2f (measure %v), want 6 and a new Base", b.Limit, b.Measure)
	}
	g.Saturated = true
	if b := g.backoff(11*time.Millisecond, clamp); b.Limit != 3 {
		t.Errorf("saturated round with Use 1/6: limit %.2f, want 3 (halved at most)", b.Limit)
	}
	g.Use = 0.75
	want := 6 * 0.75 * 10 / 11.0 // a quarter kept free: no Backoff margin on top (see classesCut)
	if b := g.backoff(11*time.Millisecond, clamp); b.Limit < want-0.07 || b.Limit > want+0.07 {
		t.Errorf("saturated round with Use 0.75: limit %.2f, want %.2f (the capacity from what was in flight)", b.Limit, want)
	}
	g.Use = 0.9
	want = 6 * 0.9 * 10 / 11 * Backoff // a tenth kept free: the margin stays
	if b := g.backoff(11*time.Millisecond, clamp); b.Limit < want-0.07 || b.Limit > want+0.07 {
		t.Errorf("saturated round with Use 0.9: limit %.2f, want %.2f (with the Backoff margin)", b.Limit, want)
	}
	g.Use, g.Saturated = 0, false
	if b := g.backoff(11*time.Millisecond, clamp); b.Limit < 5.1 || b.Limit > 5.3 {
		t.Errorf("a rule without classes: limit %.2f, want 5.2 as before", b.Limit)
	}
}
