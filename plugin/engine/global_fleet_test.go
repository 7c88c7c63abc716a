package engine

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/plugin/internal/rls"
)

// windowService is a rate-limit service with fixed windows aligned on its
// own clock (*now), one counter per rule, descriptor key and window, like
// envoyproxy/ratelimit on Redis. It counts a call when it is delivered
// (deliver), and adds hits_addend even when it answers OVER_LIMIT.
type windowService struct {
	now     *int64
	window  time.Duration
	limit   uint32
	counts  map[string]uint32
	pending []func()
	calls   int
	refuse  bool // Call returns an error: the call is not sent
	down    bool // answers fail
}

func newWindowService(now *int64, w time.Duration, limit uint32) *windowService {
	return &windowService{now: now, window: w, limit: limit, counts: map[string]uint32{}}
}

// entryValue reads the value of descriptor entry key from a framed request.
func entryValue(b []byte, key string) string {
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return ""
	}
	i += len(key)
	if i+2 > len(b) || b[i] != 0x12 {
		return ""
	}
	n := int(b[i+1])
	return string(b[i+2 : i+2+n])
}

func (s *windowService) counterKey(body []byte, at int64) string {
	ws := at - at%int64(s.window)
	return fmt.Sprintf("%s|%s|%s|%d", entryValue(body, "sluice_rule"), entryValue(body, "sluice_key"), entryValue(body, "sluice_probe"), ws)
}

func (s *windowService) Call(cluster string, body []byte, timeout time.Duration, done func(rls.Response, error)) error {
	if s.refuse {
		return errors.New("no healthy upstream")
	}
	s.calls++
	body = append([]byte(nil), body...)
	k := hitsOf(body)
	probe := entryValue(body, "sluice_probe") != ""
	s.pending = append(s.pending, func() {
		if s.down {
			done(rls.Response{}, &rls.CallError{HTTPStatus: "200", GRPCStatus: 14})
			return
		}
		if probe {
			done(rls.Response{Code: rls.CodeOK, Remaining: 1 << 30}, nil)
			return
		}
		key := s.counterKey(body, *s.now)
		s.counts[key] += k
		if c := s.counts[key]; c > s.limit {
			done(rls.Response{Code: rls.CodeOverLimit}, nil)
			return
		}
		done(rls.Response{Code: rls.CodeOK, Remaining: s.limit - s.counts[key]}, nil)
	})
	return nil
}

func (s *windowService) deliver() {
	for len(s.pending) > 0 {
		p := s.pending
		s.pending = nil
		for _, f := range p {
			f()
		}
	}
}

// deliverOne delivers the oldest pending answer only.
func (s *windowService) deliverOne() {
	if len(s.pending) == 0 {
		return
	}
	f := s.pending[0]
	s.pending = s.pending[1:]
	f()
}

// envoy is one worker of one Envoy: its engine and the decisions made
// after calls, by request.
type envoy struct {
	t    *testing.T
	e    *Engine
	svc  interface{ deliver() }
	now  *int64
	got  map[*Pending]Verdict
	errs int
}

func newEnvoy(t *testing.T, doc string, svc interface {
	Caller
	deliver()
}, now *int64) *envoy {
	n := &envoy{t: t, svc: svc, now: now, got: map[*Pending]Verdict{}}
	n.e = New(mustConfig(t, doc), newMemStore(), 7, wallClock)
	n.e.SetGlobal(svc, func(p *Pending, v *Verdict) {
		if _, dup := n.got[p]; dup {
			t.Errorf("request decided twice")
		}
		n.got[p] = *v
	})
	n.e.Now = func() int64 { return *now }
	return n
}

// run decides r, delivering answers and ticking until it is decided.
func (n *envoy) run(r Request) Verdict {
	n.t.Helper()
	v := n.e.Decide(r, *n.now)
	if v.Outcome != Call {
		return v
	}
	p := v.Pending
	for i := 0; i < 10; i++ {
		if d, ok := n.got[p]; ok {
			return d
		}
		n.svc.deliver()
		n.e.Sweep(*n.now)
	}
	n.t.Fatalf("request never decided: %+v, %d in flight, circuit open %v", n.e.Stats.Global, n.e.CallsInFlight(), n.e.CircuitOpen())
	return v
}

// A deposit comes back only to the lease of the window it was taken from:
// a request admitted near a window's end whose response (cost 0: status not
// in on_status) arrives in the next window leaves the next window's lease
// alone, since the service counted its hit in the earlier window; the
// client gets at most limit admissions in the later window.
func TestGlobalZeroCostDepositStaysInItsWindow(t *testing.T) {
	const doc = `{"rules":[{"name":"g","scope":"global","limit":10,"window":"1m","key":["header:x-client"],
		"cost":{"on_status":[500]}}],"global":{"cluster":"ratelimit","timeout":"50ms"}}`
	now := t0 + int64(59900*time.Millisecond) // 100 ms before the window ends
	svc := newWindowService(&now, time.Minute, 10)
	n := newEnvoy(t, doc, svc, &now)
	r := req("/", "GET", "10.0.0.1:1", "x-client", "c")
	old := n.run(r) // admitted in the first window, response still pending
	if old.Outcome != Allow {
		t.Fatalf("first request: %v", old.Outcome)
	}
	// Next window: the client spends the budget; the slow response of the
	// old request (200: cost 0) arrives meanwhile.
	now = t0 + int64(61*time.Second)
	admitted := 0
	for i := 0; i < 30; i++ {
		now += int64(10 * time.Millisecond)
		if i == 3 {
			n.e.Settle(&old, resp("200"), now)
		}
		v := n.run(r)
		if v.Outcome == Allow {
			admitted++
			n.e.Settle(&v, resp("500"), now) // cost 1: keeps its deposit
		}
	}
	if admitted > 10 {
		t.Fatalf("admitted %d in one window with limit 10 (the service counted %v)", admitted, svc.counts)
	}
}

// A refund gives a global rule's hit back only in the window it was taken
// in: a request admitted by g1 near a window's end and refused by g2 in the
// next window leaves g1's lease of the next window alone (the service
// counted g1's hit in the earlier window), so g1 admits the client at most
// limit times in the later window.
func TestGlobalRefundStaysInItsWindow(t *testing.T) {
	const doc = `{"rules":[
		{"name":"g1","scope":"global","limit":10,"window":"1m","key":["header:x-client"]},
		{"name":"g2","scope":"global","limit":1,"window":"1m","key":["header:x-user"]}],
		"global":{"cluster":"ratelimit","timeout":"50ms"}}`
	now := t0 + int64(59980*time.Millisecond)
	svc := newWindowService(&now, time.Minute, 1<<30)
	ls := &limitedService{windowService: svc, limits: map[string]uint32{"g1": 10, "g2": 1}}
	n := newEnvoy(t, doc, ls, &now)
	va := n.e.Decide(req("/", "GET", "10.0.0.1:1", "x-client", "c", "x-user", "u1"), now)
	if va.Outcome != Call {
		t.Fatalf("A: %v", va.Outcome)
	}
	now += int64(5 * time.Millisecond)
	svc.deliverOne() // g1 admits A; A now waits for g2's call
	n.e.Sweep(now)   // which the tick sends
	if len(svc.pending) != 1 || len(n.got) != 0 {
		t.Fatalf("pending %d, decided %d", len(svc.pending), len(n.got))
	}
	g2call := svc.pending[0]
	svc.pending = nil
	// Next window: another Envoy spends u1's g2 budget; client c gets a g1
	// lease of this window with another user.
	now = t0 + int64(60010*time.Millisecond)
	n2 := newEnvoy(t, doc, ls, &now)
	if v := n2.run(req("/", "GET", "10.0.0.1:1", "x-client", "d", "x-user", "u1")); v.Outcome != Allow {
		t.Fatalf("u1 on the other Envoy: %v", v.Outcome)
	}
	admittedG1 := 0
	if v := n.run(req("/", "GET", "10.0.0.1:1", "x-client", "c", "x-user", "u2")); v.Outcome == Allow {
		admittedG1++
	}
	// A's g2 answer arrives now (it crossed the boundary: asked again, and
	// refused).
	g2call()
	for i := 0; i < 5 && len(n.got) < 2; i++ {
		svc.deliver()
		n.e.Sweep(now)
	}
	if d, ok := n.got[va.Pending]; !ok || d.Outcome != Reject {
		t.Fatalf("A: %+v (decided %v)", d, ok)
	}
	for i := 0; i < 30; i++ {
		now += int64(10 * time.Millisecond)
		if v := n.run(req("/", "GET", "10.0.0.1:1", "x-client", "c", "x-user", fmt.Sprintf("v%d", i))); v.Outcome == Allow {
			admittedG1++
		}
	}
	if admittedG1 > 10 {
		t.Fatalf("g1 admitted client c %d times in one window, limit 10 (service: %v)", admittedG1, svc.counts)
	}
}

// limitedService answers each rule with its own limit.
type limitedService struct {
	*windowService
	limits map[string]uint32
}

func (s *limitedService) Call(cluster string, body []byte, timeout time.Duration, done func(rls.Response, error)) error {
	rule := entryValue(body, "sluice_rule")
	body = append([]byte(nil), body...)
	return s.windowService.Call(cluster, body, timeout, func(r rls.Response, err error) {
		if err == nil && rule != "" {
			c := s.counts[s.counterKey(body, *s.now)]
			if c > s.limits[rule] {
				r = rls.Response{Code: rls.CodeOverLimit}
			} else {
				r = rls.Response{Code: rls.CodeOK, Remaining: s.limits[rule] - c}
			}
		}
		done(r, err)
	})
}

// A prefetch waits for the worker's tick to be sent, and a busy worker's
// tick can come later than global.timeout: the prefetch is then sent with a
// timeout of its own (nobody waits for it), no failure is counted and the
// circuit stays closed, so a healthy service keeps admitting new clients
// (on_error deny would refuse them all while the circuit is open).
func TestGlobalLateTickSendsPrefetch(t *testing.T) {
	const doc = `{"rules":[{"name":"g","scope":"global","limit":100000,"window":"1m","key":["header:x-client"]}],
		"global":{"cluster":"ratelimit","timeout":"50ms"},"on_error":"deny"}`
	now := t0 + int64(time.Second)
	svc := newWindowService(&now, time.Minute, 100000)
	n := newEnvoy(t, doc, svc, &now)
	r := req("/", "GET", "10.0.0.1:1", "x-client", "a")
	for i := 0; n.e.Stats.Global.Prefetches == 0; i++ {
		if i > 20000 {
			t.Fatal("no prefetch")
		}
		now += int64(2 * time.Millisecond)
		if v := n.run(r); v.Outcome != Allow {
			t.Fatalf("request %d: %v", i, v.Outcome)
		}
		if i%10 == 0 {
			n.e.Sweep(now)
			svc.deliver()
		}
	}
	if n.e.CallsInFlight() != 1 || len(svc.pending) != 0 {
		t.Fatalf("want the prefetch prepared, not sent: %d in flight, %d sent", n.e.CallsInFlight(), len(svc.pending))
	}
	calls, failures := svc.calls, n.e.Stats.Global.CallFailures
	// The worker's tick comes 60 ms late.
	now += int64(60 * time.Millisecond)
	n.e.Sweep(now)
	svc.deliver()
	if n.e.CircuitOpen() || n.e.Stats.Global.CallFailures != failures {
		t.Errorf("circuit open %v, call failures %d -> %d, calls sent %d -> %d: no call failed",
			n.e.CircuitOpen(), failures, n.e.Stats.Global.CallFailures, calls, svc.calls)
	}
	if v := n.run(req("/", "GET", "10.0.0.1:1", "x-client", "fresh")); v.Outcome != Allow {
		t.Errorf("a new client with the service healthy: %v (err %v), want admitted", v.Outcome, v.Err)
	}
}

// A request with two global rules whose g1 answer arrives on its own stream
// sends g2's call at once from that stream (the answer will come back to
// it), not from the next tick: with g1 answered after 35 ms of a 50 ms
// timeout, waiting for a tick 16 ms later would run out the request's time.
// The service answers every call in time, so the request is admitted and
// the circuit stays closed.
func TestGlobalSecondRuleCallSentFromTheStream(t *testing.T) {
	const doc = `{"rules":[
		{"name":"g1","scope":"global","limit":100,"window":"1m","key":["header:x-client"]},
		{"name":"g2","scope":"global","limit":100,"window":"1m","key":["header:x-user"]}],
		"global":{"cluster":"ratelimit","timeout":"50ms"},"on_error":"deny"}`
	now := t0 + int64(time.Second)
	svc := newWindowService(&now, time.Minute, 100)
	n := newEnvoy(t, doc, svc, &now)
	v := n.e.Decide(req("/", "GET", "10.0.0.1:1", "x-client", "c", "x-user", "u"), now)
	if v.Outcome != Call {
		t.Fatal(v.Outcome)
	}
	now += int64(35 * time.Millisecond)
	svc.deliverOne() // g1 admits; g2's call is needed
	if len(svc.pending) != 1 {
		t.Errorf("%d calls sent while g1's answer was handled, want g2's", len(svc.pending))
	}
	now += int64(16 * time.Millisecond) // the next tick, 51 ms after arrival
	n.e.Sweep(now)
	svc.deliver()
	d, ok := n.got[v.Pending]
	if !ok {
		t.Fatal("not decided")
	}
	if d.Outcome != Allow || n.e.CircuitOpen() {
		t.Errorf("decided %v (err %v), circuit open %v; the service answered every call in time",
			d.Outcome, d.Err, n.e.CircuitOpen())
	}
}

// delayedService delivers each answer after its own latency (the service
// counts the call when it answers).
type delayedService struct {
	*windowService
	rng   *rand.Rand
	maxMS int
	queue []delayed
}

type delayed struct {
	at int64
	f  func()
}

func (s *delayedService) Call(cluster string, body []byte, timeout time.Duration, done func(rls.Response, error)) error {
	if err := s.windowService.Call(cluster, body, timeout, done); err != nil {
		return err
	}
	f := s.pending[len(s.pending)-1]
	s.pending = s.pending[:len(s.pending)-1]
	at := *s.now + int64(s.rng.IntN(s.maxMS+1))*int64(time.Millisecond)
	if at-*s.now > int64(timeout) {
		at = *s.now + int64(timeout) // Envoy's timeout: the call fails then
		f = func() { done(rls.Response{}, &rls.CallError{HTTPStatus: "504"}) }
	}
	s.queue = append(s.queue, delayed{at, f})
	return nil
}

// due delivers the answers due by now.
func (s *delayedService) due() {
	for {
		var rest []delayed
		var run []func()
		for _, d := range s.queue {
			if d.at <= *s.now {
				run = append(run, d.f)
			} else {
				rest = append(rest, d)
			}
		}
		s.queue = rest
		if len(run) == 0 {
			return
		}
		for _, f := range run {
			f()
		}
	}
}

func (s *delayedService) deliver() { s.due() }

// Across a fleet a global rule never admits more than limit per window: 3
// Envoys of 2 workers (workers of an Envoy share its shared data), 3
// clients, demand well over the limit over several 1 s windows, answers
// after 0..40 ms (timeout 50 ms), ticks every 20 ms, some streams gone while
// waiting. Every waiting request is decided and no call stays in flight.
func TestGlobalFleetNeverExceedsPerWindow(t *testing.T) {
	const doc = `{"rules":[{"name":"g","scope":"global","limit":%d,"window":"1s","key":["header:x-client"]}],
		"global":{"cluster":"ratelimit","timeout":"50ms"}}`
	for _, limit := range []int{5, 50, 400} {
		for seed := uint64(1); seed <= 3; seed++ {
			now := t0 + int64(300*time.Millisecond)
			rng := rand.New(rand.NewPCG(seed, uint64(limit)))
			svc := &delayedService{windowService: newWindowService(&now, time.Second, uint32(limit)), rng: rng, maxMS: 40}
			cfg := mustConfig(t, fmt.Sprintf(doc, limit))
			type worker struct {
				e       *Engine
				waiting map[*Pending]string
			}
			admits := map[string]int{}
			var workers []*worker
			for env := 0; env < 3; env++ {
				store := newMemStore()
				for w := 0; w < 2; w++ {
					wk := &worker{waiting: map[*Pending]string{}}
					wk.e = New(cfg, store, uint64(env+1), wallClock)
					wk.e.SetGlobal(svc, func(p *Pending, v *Verdict) {
						key, ok := wk.waiting[p]
						if !ok {
							t.Fatalf("decided a request not waiting (or twice)")
						}
						delete(wk.waiting, p)
						if v.Outcome == Allow && v.Err == nil {
							admits[fmt.Sprintf("%s@%d", key, (now-t0)/int64(time.Second))]++
						}
					})
					wk.e.Now = func() int64 { return now }
					workers = append(workers, wk)
				}
			}
			clients := []string{"a", "b", "c"}
			for step := 0; step < 3500; step++ {
				now += int64(time.Millisecond)
				svc.due()
				for i, wk := range workers {
					if (step+i*3)%20 == 0 {
						wk.e.Sweep(now)
					}
				}
				for k := rng.IntN(4); k > 0; k-- {
					wk := workers[rng.IntN(len(workers))]
					c := clients[rng.IntN(len(clients))]
					v := wk.e.Decide(req("/", "GET", "10.0.0.1:1", "x-client", c), now)
					switch v.Outcome {
					case Allow:
						if v.Err == nil {
							admits[fmt.Sprintf("%s@%d", c, (now-t0)/int64(time.Second))]++
						}
					case Call:
						if rng.IntN(20) == 0 {
							v.Pending.Cancel() // the stream ends while it waits
						} else {
							wk.waiting[v.Pending] = c
						}
					}
				}
			}
			for i := 0; i < 10; i++ {
				now += int64(20 * time.Millisecond)
				svc.due()
				for _, wk := range workers {
					wk.e.Sweep(now)
				}
			}
			for i, wk := range workers {
				if len(wk.waiting) != 0 || wk.e.CallsInFlight() != 0 {
					t.Errorf("limit %d seed %d worker %d: %d requests still waiting, %d calls in flight", limit, seed, i, len(wk.waiting), wk.e.CallsInFlight())
				}
			}
			for k, n := range admits {
				if n > limit {
					t.Errorf("limit %d seed %d: %s admitted %d", limit, seed, k, n)
				}
			}
			t.Logf("limit %d seed %d: admits %v, calls %d", limit, seed, admits, svc.calls)
		}
	}
}

// A debt (a cost the lease could not cover) travels with the worker's next
// lease call for the client, and stays owed when Envoy does not send that
// call (no healthy upstream): once the service is reachable again it counts
// at least what the engine charged.
func TestGlobalDebtKeptWhenLeaseCallNotSent(t *testing.T) {
	const doc = `{"rules":[{"name":"g","scope":"global","limit":1000,"window":"1m","key":["header:x-client"],
		"cost":{"response_header":"x-used","max":100}}],"global":{"cluster":"ratelimit","timeout":"50ms"}}`
	now := t0 + int64(time.Second)
	svc := newWindowService(&now, time.Minute, 1000)
	n := newEnvoy(t, doc, svc, &now)
	r := req("/", "GET", "10.0.0.1:1", "x-client", "c")
	v := n.run(r) // the first call: one hit
	if v.Outcome != Allow {
		t.Fatal(v.Outcome)
	}
	n.e.Settle(&v, resp("200", "x-used", "100"), now) // 99 owed
	charged := n.e.Stats.Rules[0].Charged
	svc.refuse = true
	if v := n.run(r); v.Outcome != Allow || v.Err == nil {
		t.Fatalf("with the service unreachable: %v (err %v), want on_error allow", v.Outcome, v.Err)
	}
	svc.refuse = false
	for i := 0; i < 20; i++ { // the circuit closes, the ticks send what is owed
		now += int64(100 * time.Millisecond)
		n.e.Sweep(now)
		svc.deliver()
	}
	counted := uint32(0)
	for _, c := range svc.counts {
		if c < 1<<29 {
			counted += c
		}
	}
	if uint64(counted) < charged {
		t.Fatalf("the engine charged %d, the service counted %d (charge errors %d)", charged, counted, n.e.Stats.ChargeErrors)
	}
}

// A call answered after the tick failed it (Envoy's answer late): on_error
// applies once per waiter, the late answer decides nobody again, and no
// call is left in flight.
func TestGlobalLateAnswerAfterSweep(t *testing.T) {
	const doc = `{"rules":[{"name":"g","scope":"global","limit":100,"window":"1m","key":["header:x-client"]}],
		"global":{"cluster":"ratelimit","timeout":"50ms"},"on_error":"deny"}`
	now := t0 + int64(time.Second)
	svc := newWindowService(&now, time.Minute, 100)
	n := newEnvoy(t, doc, svc, &now)
	r := req("/", "GET", "10.0.0.1:1", "x-client", "c")
	a := n.e.Decide(r, now)
	b := n.e.Decide(r, now)
	now += int64(70 * time.Millisecond)
	n.e.Sweep(now)
	if len(n.got) != 2 || n.e.Stats.OnErrorDenied != 2 {
		t.Fatalf("decided %d, denied %d", len(n.got), n.e.Stats.OnErrorDenied)
	}
	svc.deliver() // the late answer
	if len(n.got) != 2 || n.e.Stats.OnErrorDenied != 2 || n.e.CallsInFlight() != 0 {
		t.Fatalf("after the late answer: decided %d, denied %d, in flight %d", len(n.got), n.e.Stats.OnErrorDenied, n.e.CallsInFlight())
	}
	if n.got[a.Pending].Outcome != Reject || n.got[b.Pending].Outcome != Reject {
		t.Fatal("on_error deny not applied")
	}
}

// Requests whose streams end while they wait: the answer's hits stay in the
// lease for the client's next request (no call), nothing stays in flight.
func TestGlobalCancelledWaitersKeepHits(t *testing.T) {
	const doc = `{"rules":[{"name":"g","scope":"global","limit":100,"window":"1m","key":["header:x-client"]}],
		"global":{"cluster":"ratelimit","timeout":"50ms"}}`
	now := t0 + int64(time.Second)
	svc := newWindowService(&now, time.Minute, 100)
	n := newEnvoy(t, doc, svc, &now)
	r := req("/", "GET", "10.0.0.1:1", "x-client", "c")
	var ps []*Pending
	for i := 0; i < 3; i++ {
		v := n.e.Decide(r, now)
		if v.Outcome != Call {
			t.Fatal(v.Outcome)
		}
		ps = append(ps, v.Pending)
	}
	for _, p := range ps {
		p.Cancel()
	}
	now += int64(5 * time.Millisecond)
	svc.deliver()
	n.e.Sweep(now)
	svc.deliver()
	if len(n.got) != 0 || n.e.CallsInFlight() != 0 {
		t.Fatalf("decided %d cancelled requests, %d calls in flight", len(n.got), n.e.CallsInFlight())
	}
	calls := svc.calls
	if v := n.e.Decide(r, now); v.Outcome != Allow || svc.calls != calls {
		t.Fatalf("next request: %v, calls %d -> %d: the cancelled requests' hits were lost", v.Outcome, calls, svc.calls)
	}
}

// Many clients waiting at once, several requests each: every request is
// decided, admitted within the limit, and no call is left in flight.
func TestGlobalManyClientsWaiting(t *testing.T) {
	const doc = `{"rules":[{"name":"g","scope":"global","limit":3,"window":"1m","key":["header:x-client"]}],
		"global":{"cluster":"ratelimit","timeout":"50ms"}}`
	now := t0 + int64(time.Second)
	svc := newWindowService(&now, time.Minute, 3)
	n := newEnvoy(t, doc, svc, &now)
	var ps []*Pending
	for c := 0; c < 2000; c++ {
		for i := 0; i < 5; i++ {
			v := n.e.Decide(req("/", "GET", "10.0.0.1:1", "x-client", itoa(c)), now)
			if v.Outcome != Call {
				t.Fatalf("client %d request %d: %v", c, i, v.Outcome)
			}
			ps = append(ps, v.Pending)
		}
	}
	for i := 0; i < 10 && len(n.got) < len(ps); i++ {
		now += int64(2 * time.Millisecond)
		svc.deliver()
		n.e.Sweep(now)
	}
	allowed := 0
	for _, p := range ps {
		d, ok := n.got[p]
		if !ok {
			t.Fatalf("a request never decided (%d of %d decided)", len(n.got), len(ps))
		}
		if d.Outcome == Allow {
			allowed++
			if d.Err != nil {
				t.Fatalf("on_error decided: %v", d.Err)
			}
		}
	}
	if allowed != 2000*3 || n.e.CallsInFlight() != 0 {
		t.Fatalf("allowed %d, want %d; %d in flight", allowed, 2000*3, n.e.CallsInFlight())
	}
}

// When the request whose stream sent a call goes away, Envoy drops the
// call's answer (the Go SDK delivers it only while the sending stream
// lives). Another request of the same client waiting for that call is
// decided by on_error at the next tick, within global.timeout, and the
// circuit stays closed: the service did not fail, so new clients of the
// worker must still get calls rather than on_error.
func TestGlobalLostAnswerDecidedWithinTimeout(t *testing.T) {
	const doc = `{"rules":[{"name":"g","scope":"global","limit":100,"window":"1m","key":["header:x-client"]}],
		"global":{"cluster":"ratelimit","timeout":"50ms"},"on_error":"deny"}`
	start := t0 + int64(time.Second)
	now := start
	svc := newWindowService(&now, time.Minute, 100)
	n := newEnvoy(t, doc, svc, &now)
	r := req("/", "GET", "10.0.0.1:1", "x-client", "c")
	a := n.e.Decide(r, now)
	now += int64(time.Millisecond)
	b := n.e.Decide(r, now)
	if a.Outcome != Call || b.Outcome != Call || len(svc.pending) != 1 {
		t.Fatalf("%v %v, %d calls", a.Outcome, b.Outcome, len(svc.pending))
	}
	if in := n.e.call(callKey{Rule: 0, FP: a.Pending.globals[0].FP}); in == nil || in.owner != a.Pending {
		t.Fatal("the call is not A's")
	}
	a.Pending.Cancel()  // A's client hangs up
	svc.pending = nil   // so Envoy never delivers the answer (the service counted it)
	var decidedAt int64 // B: decided when
	for now < start+int64(200*time.Millisecond) {
		now += int64(20 * time.Millisecond) // the worker's tick
		n.e.Sweep(now)
		if _, ok := n.got[b.Pending]; ok && decidedAt == 0 {
			decidedAt = now
		}
		if n.e.CircuitOpen() {
			break
		}
	}
	if waited := time.Duration(decidedAt - b.Pending.Arrival); decidedAt == 0 || waited > 50*time.Millisecond {
		t.Errorf("B waited %v (decided %v), global.timeout is 50ms", waited, decidedAt != 0)
	}
	if n.e.CircuitOpen() {
		t.Errorf("the circuit opened though the service answered every call (B: %v, err %v)", n.got[b.Pending].Outcome, n.got[b.Pending].Err)
	}
	if g := n.e.Stats.Global; g.LostAnswers != 1 || g.CallFailures != 0 || n.e.CallsInFlight() != 0 {
		t.Errorf("lost answers %d (want 1), call failures %d (want 0), %d calls in flight", g.LostAnswers, g.CallFailures, n.e.CallsInFlight())
	}
}

// A call that waits for the tick (B's g2 call, started while A's g1 answer
// is handled on A's stream, where B's answer would not be delivered) and
// a tick that comes after B's timeout: B is decided by on_error then,
// counted as expired, and the circuit stays closed, since the service did
// not fail (no call was even sent). The call is still sent, as a refill of
// the lease, and nothing stays in flight once it is answered.
func TestGlobalLateTickExpiresWaiterWithoutFailure(t *testing.T) {
	const doc = `{"rules":[
		{"name":"g1","scope":"global","limit":100,"window":"1m","key":["header:x-client"]},
		{"name":"g2","scope":"global","limit":100,"window":"1m","key":["header:x-user"]}],
		"global":{"cluster":"ratelimit","timeout":"50ms"},"on_error":"deny"}`
	start := t0 + int64(time.Second)
	now := start
	svc := newWindowService(&now, time.Minute, 100)
	n := newEnvoy(t, doc, svc, &now)
	a := n.e.Decide(req("/", "GET", "10.0.0.1:1", "x-client", "c", "x-user", "u1"), now)
	b := n.e.Decide(req("/", "GET", "10.0.0.1:1", "x-client", "c", "x-user", "u2"), now)
	if a.Outcome != Call || b.Outcome != Call || len(svc.pending) != 1 {
		t.Fatalf("%v %v, %d calls", a.Outcome, b.Outcome, len(svc.pending))
	}
	now += int64(5 * time.Millisecond)
	svc.deliver() // g1 grants one hit, to B; A asks again, and is admitted
	if d, ok := n.got[a.Pending]; !ok || d.Outcome != Allow {
		t.Fatalf("A: %+v (decided %v)", d, ok)
	}
	if _, ok := n.got[b.Pending]; ok || n.e.CallsInFlight() != 1 {
		t.Fatalf("B decided %v, %d calls in flight; want B waiting for its g2 call", ok, n.e.CallsInFlight())
	}
	now = start + int64(60*time.Millisecond) // the tick, late
	n.e.Sweep(now)
	d, ok := n.got[b.Pending]
	if !ok || d.Outcome != Reject || !errors.Is(d.Err, ErrTimeout) {
		t.Fatalf("B: %v (err %v, decided %v), want on_error deny after its timeout", d.Outcome, d.Err, ok)
	}
	if g := n.e.Stats.Global; n.e.CircuitOpen() || g.CallFailures != 0 || g.Expired != 1 {
		t.Errorf("circuit open %v, call failures %d (want 0), expired %d (want 1)", n.e.CircuitOpen(), g.CallFailures, g.Expired)
	}
	svc.deliver()
	if n.e.CallsInFlight() != 0 {
		t.Errorf("%d calls in flight", n.e.CallsInFlight())
	}
}

// Local rules with a global one: a request the global rule refuses (after
// a call, or by on_error deny) is refunded by the local rate rule and gives
// back its concurrency slot; a request a local rule refuses costs no call.
func TestGlobalWithLocalRulesRefunds(t *testing.T) {
	const doc = `{"rules":[
		{"name":"loc","limit":5,"window":"1m","algorithm":"fixed_window"},
		{"name":"conc","algorithm":"concurrency","limit":1},
		{"name":"g","scope":"global","limit":1,"window":"1m","key":["header:x-client"]}],
		"global":{"cluster":"ratelimit","timeout":"50ms"},"on_error":"deny"}`
	now := t0 + int64(time.Second)
	svc := newWindowService(&now, time.Minute, 1)
	n := newEnvoy(t, doc, svc, &now)
	v := n.run(req("/", "GET", "10.0.0.1:1", "x-client", "c"))
	if v.Outcome != Allow {
		t.Fatal(v.Outcome)
	}
	n.e.Release(v.Slots, now)
	// c is over its global limit: refused (one call), 3 times.
	for i := 0; i < 3; i++ {
		v := n.run(req("/", "GET", "10.0.0.1:1", "x-client", "c"))
		if v.Outcome != Reject || v.Report == nil || v.Report.Name != "g" {
			t.Fatalf("c %d: %v %v", i, v.Outcome, v.Report)
		}
	}
	// A failing service with on_error deny refuses d: refunded too.
	svc.down = true
	if v := n.run(req("/", "GET", "10.0.0.1:1", "x-client", "d")); v.Outcome != Reject || v.Err == nil {
		t.Fatalf("d: %v %v", v.Outcome, v.Err)
	}
	svc.down = false
	now += int64(time.Second)
	n.e.Sweep(now)
	svc.deliver()
	if n.e.CircuitOpen() {
		t.Fatal("circuit still open")
	}
	// The local rule charged only the admitted request: 4 left, and the slot
	// is free.
	for i := 0; i < 4; i++ {
		v := n.run(req("/", "GET", "10.0.0.1:1", "x-client", "e"+itoa(i)))
		if v.Outcome != Allow {
			t.Fatalf("e%d: %v by %v (local charges or slot not given back)", i, v.Outcome, v.Report.Name)
		}
		n.e.Release(v.Slots, now)
	}
	calls := svc.calls
	if v := n.run(req("/", "GET", "10.0.0.1:1", "x-client", "f")); v.Outcome != Reject || v.Report.Name != "loc" || svc.calls != calls {
		t.Fatalf("f: %v by %v, calls %d -> %d: want refused by loc without a call", v.Outcome, v.Report.Name, calls, svc.calls)
	}
}

// A request_header cost on a global rule: the service is charged what the
// engine charged, and sequential requests (none in flight when the balance
// runs out) charge at most limit + (max - 1) per Envoy.
func TestGlobalRequestCostCharged(t *testing.T) {
	const doc = `{"rules":[{"name":"g","scope":"global","limit":100,"window":"1m","key":["header:x-client"],
		"cost":{"request_header":"x-cost","max":10}}],"global":{"cluster":"ratelimit","timeout":"50ms"}}`
	now := t0 + int64(time.Second)
	svc := newWindowService(&now, time.Minute, 100)
	var fleet []*envoy
	for i := 0; i < 2; i++ {
		fleet = append(fleet, newEnvoy(t, doc, svc, &now))
	}
	admitted := 0
	for i := 0; i < 200; i++ {
		now += int64(5 * time.Millisecond)
		n := fleet[i%2]
		if v := n.run(req("/", "GET", "10.0.0.1:1", "x-client", "c", "x-cost", "7")); v.Outcome == Allow {
			admitted++
		}
		if i%4 == 0 {
			for _, n := range fleet {
				n.e.Sweep(now)
			}
			svc.deliver()
		}
	}
	for i := 0; i < 5; i++ {
		now += int64(20 * time.Millisecond)
		for _, n := range fleet {
			n.e.Sweep(now)
		}
		svc.deliver()
	}
	var charged uint64
	for _, n := range fleet {
		charged += n.e.Stats.Rules[0].Charged
	}
	var counted uint32
	for _, c := range svc.counts {
		counted += c
	}
	t.Logf("admitted %d, charged %d, service counted %d", admitted, charged, counted)
	if uint64(counted) < charged {
		t.Errorf("the service counted %d, less than the %d charged", counted, charged)
	}
	if charged > 100+2*9 {
		t.Errorf("charged %d on a limit of 100 with sequential requests of cost 7", charged)
	}
}

// Descriptors: two global rules with the same key are counted apart at the
// service; one rule's clients apart; a client the same on two Envoys.
func TestGlobalDescriptorsPerRuleAndKey(t *testing.T) {
	const doc = `{"rules":[
		{"name":"g1","scope":"global","limit":100,"window":"1m","key":["header:x-client"]},
		{"name":"g2","scope":"global","limit":100,"window":"1m","key":["header:x-client"]}],
		"global":{"cluster":"ratelimit","timeout":"50ms"}}`
	now := t0 + int64(time.Second)
	svc := newWindowService(&now, time.Minute, 100)
	seen := map[string]int{}
	for _, seed := range []uint64{1, 2} {
		e := New(mustConfig(t, doc), newMemStore(), seed, wallClock)
		e.SetGlobal(svc, func(*Pending, *Verdict) {})
		e.Now = func() int64 { return now }
		for _, c := range []string{"a", "b"} {
			e.Decide(req("/", "GET", "10.0.0.1:1", "x-client", c), now)
			svc.deliver()
			e.Sweep(now)
			svc.deliver()
		}
	}
	for k := range svc.counts {
		seen[k]++
	}
	if len(seen) != 4 {
		t.Fatalf("want 4 counters (2 rules x 2 clients, shared by both Envoys): %v", svc.counts)
	}
	for k, c := range svc.counts {
		if c != 2 {
			t.Errorf("%s counted %d, want 2 (one hit per Envoy)", k, c)
		}
	}
}
