package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// The bound of a global rule charged after the response, in units: requests
// sent one after another over any number of Envoys are charged at most
// limit + max - 1 in a window, and requests sent at once at most the limit
// plus (max - 1) for each request in flight when the budget ran out.

// costFleet is a fleet of Envoys of several workers each (the workers of an
// Envoy share its shared data) in front of one service whose answers take
// 0..maxMS, with the decisions made after calls collected per worker.
type costFleet struct {
	t       *testing.T
	now     int64
	svc     *delayedService
	workers []*costWorker
}

type costWorker struct {
	e       *Engine
	decided map[*Pending]Verdict
	tick    int64 // the worker's next tick
}

func newCostFleet(t *testing.T, doc string, envoys, perEnvoy int, limit uint32, w time.Duration, seed uint64) *costFleet {
	f := &costFleet{t: t, now: t0 + int64(100*time.Millisecond)}
	rng := rand.New(rand.NewPCG(seed, 42))
	f.svc = &delayedService{windowService: newWindowService(&f.now, w, limit), rng: rng, maxMS: 1}
	cfg := mustConfig(t, doc)
	for env := 0; env < envoys; env++ {
		store := newMemStore()
		for i := 0; i < perEnvoy; i++ {
			wk := &costWorker{decided: map[*Pending]Verdict{}, tick: f.now + int64(rng.IntN(20))*int64(time.Millisecond)}
			wk.e = New(cfg, store, uint64(env+1), wallClock)
			wk.e.SetGlobal(f.svc, func(p *Pending, v *Verdict) { wk.decided[p] = *v })
			wk.e.Now = func() int64 { return f.now }
			f.workers = append(f.workers, wk)
		}
	}
	return f
}

// advance moves the clock by d a millisecond at a time: answers due are
// delivered, workers tick every 20 ms.
func (f *costFleet) advance(d time.Duration) {
	for end := f.now + int64(d); f.now < end; {
		f.now = min(f.now+int64(time.Millisecond), end)
		f.svc.due()
		for _, wk := range f.workers {
			if f.now >= wk.tick {
				wk.e.Sweep(f.now)
				wk.tick += int64(prefetchTick)
			}
		}
		f.svc.due()
	}
}

// decide decides a request of client c on worker wk, waiting for the
// service if it must.
func (f *costFleet) decide(wk *costWorker, c string) Verdict {
	v := wk.e.Decide(req("/", "GET", "10.0.0.1:1", "x-client", c), f.now)
	if v.Outcome != Call {
		return v
	}
	p := v.Pending
	for i := 0; i < 1000; i++ {
		if d, ok := wk.decided[p]; ok {
			delete(wk.decided, p)
			return d
		}
		f.advance(time.Millisecond)
	}
	f.t.Fatalf("request never decided")
	return v
}

// slowDebts makes the service count a debt's call d after it was sent,
// later than the lease calls sent meanwhile (slowDebtService).
func (f *costFleet) slowDebts(d time.Duration) {
	svc := &slowDebtService{delayedService: f.svc, debtDelay: d}
	for _, wk := range f.workers {
		wk.e.SetGlobal(svc, func(p *Pending, v *Verdict) { wk.decided[p] = *v })
	}
}

// settleHeld settles v's response on wk as the plugin does: a response
// held for its debt reaches the client (the test goes on) only once the
// service has answered the debt's call.
func (f *costFleet) settleHeld(wk *costWorker, v *Verdict, r Request) {
	resumed := false
	if !wk.e.SettleHeld(v, r, f.now, func() { resumed = true }) {
		return
	}
	for ms := 0; !resumed; ms++ {
		if ms > 1000 {
			f.t.Fatal("a held response was never let go")
		}
		f.advance(time.Millisecond)
	}
}

func (f *costFleet) counted() uint32 {
	var n uint32
	for _, c := range f.svc.counts {
		n += c
	}
	return n
}

const costFleetDoc = `{"rules":[{"name":"g","scope":"global","limit":%d,"window":"%s","key":["header:x-client"],
	"cost":{"response_header":"x-used","max":%d}}],"global":{"cluster":"ratelimit","timeout":"50ms"}}`

// Requests one after another (each sent once the previous response has
// arrived, held until the service counted its debt as the plugin does;
// the service counts debts 3 ms after lease calls sent meanwhile), on
// workers of 3 and of 50 Envoys picked at random, each costing
// the same: in every window the requests admitted are charged at most
// limit + max - 1, and (3 Envoys) at least the limit less two requests'
// cost (8 of 10 admitted), or (50 Envoys) 90% of it. The first window
// starts with workers that have never seen a response.
func TestCostGlobalSequentialWithinBound(t *testing.T) {
	for _, c := range []struct {
		envoys, perEnvoy int
		limit, cost, max int64
	}{
		{3, 2, 100, 10, 10}, {3, 2, 100, 10, 100}, {3, 2, 100, 7, 50},
		{50, 8, 20000, 500, 100000}, {50, 8, 1000, 10, 100},
	} {
		name := fmt.Sprintf("%dx%d limit %d cost %d max %d", c.envoys, c.perEnvoy, c.limit, c.cost, c.max)
		t.Run(name, func(t *testing.T) {
			f := newCostFleet(t, fmt.Sprintf(costFleetDoc, c.limit, "1s", c.max), c.envoys, c.perEnvoy, uint32(c.limit), time.Second, uint64(c.limit+c.cost))
			f.slowDebts(3 * time.Millisecond)
			rng := rand.New(rand.NewPCG(uint64(c.envoys), uint64(c.cost)))
			charged := map[int64]int64{} // per window: what its admitted requests cost
			admitted := map[int64]int{}
			for end := f.now + int64(3500*time.Millisecond); f.now < end; {
				f.advance(time.Duration(1+rng.IntN(3)) * time.Millisecond) // the client's turn
				wk := f.workers[rng.IntN(len(f.workers))]
				v := f.decide(wk, "c")
				if v.Outcome != Allow {
					continue
				}
				win := f.now / int64(time.Second)
				f.advance(time.Duration(rng.IntN(3)) * time.Millisecond) // the upstream
				f.settleHeld(wk, &v, resp("200", "x-used", itoa(int(c.cost))))
				charged[win] += c.cost
				admitted[win]++
			}
			f.advance(100 * time.Millisecond)
			if len(charged) < 2 {
				t.Fatalf("the run saw %d windows, want several", len(charged))
			}
			for win, n := range charged {
				w := win - t0/int64(time.Second)
				t.Logf("window %d: admitted %d, charged %d", w, admitted[win], n)
				if n > c.limit+c.max-1 {
					t.Errorf("window %d: charged %d, over the bound %d", w, n, c.limit+c.max-1)
				}
				// Under-admission: leases of fewer hits than a deposit when
				// the window ends, and hits of calls the service refused
				// (counted nonetheless); many Envoys hold more of them. The
				// last window of the run may be cut short.
				low := c.limit - 2*c.cost
				if c.envoys > 3 {
					low = c.limit * 9 / 10
				}
				if n < low && win != f.now/int64(time.Second) {
					t.Errorf("window %d: charged only %d of %d", w, n, c.limit)
				}
			}
		})
	}
}

// Requests at once: n requests decided before any response arrives, then
// all settled, on workers that have learnt what requests cost and on
// workers that have not. Charged at most limit + n x (max - 1); once the
// workers know the cost, at most limit + max - 1.
func TestCostGlobalAtOnceWithinBound(t *testing.T) {
	const limit, cost, maxCost, n = 100, 10, 100, 50
	for _, learnt := range []bool{false, true} {
		t.Run(fmt.Sprintf("learnt=%v", learnt), func(t *testing.T) {
			f := newCostFleet(t, fmt.Sprintf(costFleetDoc, limit, "1m", maxCost), 3, 2, limit, time.Minute, 7)
			if learnt {
				// One request per worker, for another client.
				for _, wk := range f.workers {
					v := f.decide(wk, "warm")
					wk.e.Settle(&v, resp("200", "x-used", itoa(cost)), f.now)
					f.advance(time.Millisecond)
				}
			}
			type flight struct {
				wk *costWorker
				v  Verdict
			}
			var inflight []flight
			var waiting []flight
			for i := 0; i < n; i++ {
				wk := f.workers[i%len(f.workers)]
				v := wk.e.Decide(req("/", "GET", "10.0.0.1:1", "x-client", "c"), f.now)
				switch v.Outcome {
				case Allow:
					inflight = append(inflight, flight{wk, v})
				case Call:
					waiting = append(waiting, flight{wk, v})
				}
			}
			for i := 0; i < 200 && len(waiting) > 0; i++ {
				f.advance(time.Millisecond)
				rest := waiting[:0]
				for _, w := range waiting {
					if d, ok := w.wk.decided[w.v.Pending]; ok {
						if d.Outcome == Allow {
							inflight = append(inflight, flight{w.wk, d})
						}
						continue
					}
					rest = append(rest, w)
				}
				waiting = rest
			}
			if len(waiting) > 0 {
				t.Fatalf("%d requests never decided", len(waiting))
			}
			for i := range inflight {
				inflight[i].wk.e.Settle(&inflight[i].v, resp("200", "x-used", itoa(cost)), f.now)
			}
			f.advance(100 * time.Millisecond)
			charged := int64(len(inflight)) * cost
			bound := int64(limit + n*(maxCost-1))
			if learnt {
				bound = limit + maxCost - 1
			}
			t.Logf("%d at once: admitted %d, charged %d (bound %d); the service counted %d", n, len(inflight), charged, bound, f.counted())
			if charged > bound {
				t.Errorf("charged %d, over the bound %d", charged, bound)
			}
			if charged < limit-cost {
				t.Errorf("charged only %d of %d", charged, limit)
			}
		})
	}
}
