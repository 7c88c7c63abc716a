package engine

import (
	stdsha256 "crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/plugin/engine/global"
	"github.com/sluicehq/sluice/plugin/internal/rls"
)

// fakeService answers calls like envoyproxy/ratelimit for one window: it
// counts hits and says OVER_LIMIT past the limit. Answers are delivered
// when the test calls deliver, as Envoy delivers them later.
type fakeService struct {
	limit   uint32
	count   uint32
	down    bool
	calls   []uint32 // hits asked per call
	bodies  [][]byte
	pending []func()
}

func (s *fakeService) Call(cluster string, body []byte, timeout time.Duration, done func(rls.Response, error)) error {
	if cluster != "ratelimit" || len(body) < 5 {
		return errors.New("bad call")
	}
	k := hitsOf(body)
	s.bodies = append(s.bodies, append([]byte(nil), body...))
	s.calls = append(s.calls, k)
	s.pending = append(s.pending, func() {
		if s.down {
			done(rls.Response{}, &rls.CallError{HTTPStatus: "200", GRPCStatus: 14})
			return
		}
		s.count += k
		if s.count > s.limit {
			done(rls.Response{Code: rls.CodeOverLimit, Reset: time.Minute}, nil)
			return
		}
		done(rls.Response{Code: rls.CodeOK, Remaining: s.limit - s.count}, nil)
	})
	return nil
}

// hitsOf reads hits_addend (field 3, varint) from the framed request.
func hitsOf(b []byte) uint32 {
	m := b[5:]
	for i := 0; i < len(m); {
		tag := m[i]
		i++
		switch tag & 7 {
		case 0:
			var v uint64
			for s := 0; ; s += 7 {
				c := m[i]
				i++
				v |= uint64(c&0x7f) << s
				if c < 0x80 {
					break
				}
			}
			if tag>>3 == 3 {
				return uint32(v)
			}
		case 2:
			n := int(m[i])
			i += 1 + n
		}
	}
	return 1
}

func (s *fakeService) deliver() {
	p := s.pending
	s.pending = nil
	for _, f := range p {
		f()
	}
}

const globalDoc = `{"rules":[{"name":"g","scope":"global","limit":%d,"window":"1m","key":["header:x-client"]}],
 "global":{"cluster":"ratelimit","timeout":"50ms"},"on_error":"%s"}`

func globalEngine(t *testing.T, limit int, onError string) (*Engine, *fakeService, *[]*Verdict, *int64) {
	t.Helper()
	now := new(int64)
	*now = t0 + int64(time.Second)
	e := New(mustConfig(t, fmt.Sprintf(globalDoc, limit, onError)), newMemStore(), 7, wallClock)
	svc := &fakeService{limit: uint32(limit)}
	var decided []*Verdict
	e.SetGlobal(svc, func(p *Pending, v *Verdict) { c := *v; decided = append(decided, &c) })
	e.Now = func() int64 { return *now }
	return e, svc, &decided, now
}

func TestGlobalLeaseServesWithoutCalls(t *testing.T) {
	e, svc, decided, now := globalEngine(t, 100, "allow")
	r := req("/", "GET", "10.0.0.1:1", "x-client", "a")
	v := e.Decide(r, *now)
	if v.Outcome != Call || v.Pending == nil {
		t.Fatalf("first request: %+v", v)
	}
	// Two more requests of the client on this worker wait for the same call.
	for i := 0; i < 2; i++ {
		if v := e.Decide(r, *now); v.Outcome != Call {
			t.Fatalf("waiter %d: %v", i, v.Outcome)
		}
	}
	if len(svc.calls) != 1 || svc.calls[0] != 1 {
		t.Fatalf("calls %v, want one call for 1 hit (the first call of a window asks for what waits when it is sent)", svc.calls)
	}
	svc.deliver()
	// The answer served one; the two others wait for one more call, sized
	// for both.
	if len(svc.calls) != 2 || svc.calls[1] < 2 {
		t.Fatalf("calls %v", svc.calls)
	}
	svc.deliver()
	if len(*decided) != 3 {
		t.Fatalf("%d decided", len(*decided))
	}
	for _, d := range *decided {
		if d.Outcome != Allow || d.Report == nil || d.Report.Name != "g" {
			t.Fatalf("decided %+v", d)
		}
	}
	k := svc.calls[0] + svc.calls[1]
	// The rest of the lease admits without calls.
	for i := uint32(0); i < k-3; i++ {
		if v := e.Decide(r, *now); v.Outcome != Allow {
			t.Fatalf("lease request %d: %v", i, v.Outcome)
		}
	}
	if len(svc.calls) != 2 || e.Stats.Global.LeaseAdmits != uint64(k-3) {
		t.Fatalf("calls %d, lease admits %d (k %d)", len(svc.calls), e.Stats.Global.LeaseAdmits, k)
	}
}

// TestGlobalNeverExceeds drives one worker to the limit: exactly limit
// admitted, the tail at one hit per call, then rejections without calls.
func TestGlobalNeverExceeds(t *testing.T) {
	e, svc, decided, now := globalEngine(t, 50, "allow")
	r := req("/", "GET", "10.0.0.1:1", "x-client", "a")
	admitted, rejected := 0, 0
	for i := 0; i < 200; i++ {
		*now += int64(time.Millisecond)
		v := e.Decide(r, *now)
		if v.Outcome == Call {
			svc.deliver()
			d := (*decided)[len(*decided)-1]
			v = *d
		}
		switch v.Outcome {
		case Allow:
			admitted++
		case Reject:
			rejected++
			if v.RetryAfter <= 0 || v.RetryAfter > time.Minute {
				t.Fatalf("Retry-After %v", v.RetryAfter)
			}
		}
	}
	calls := len(svc.calls)
	if admitted != 50 || rejected != 150 {
		t.Fatalf("admitted %d, rejected %d", admitted, rejected)
	}
	if last := svc.calls[calls-1]; last != 1 {
		t.Errorf("the last call asked %d hits, want 1", last)
	}
	if calls > 30 {
		t.Errorf("%d calls for 200 requests", calls)
	}
	t.Logf("calls: %v", svc.calls)
}

// TestGlobalFailureCircuit: a failed call lets on_error decide; while the
// circuit is open requests are decided without waiting; a probe after the
// back-off closes it when the service is back.
func TestGlobalFailureCircuit(t *testing.T) {
	e, svc, decided, now := globalEngine(t, 100, "deny")
	svc.down = true
	v := e.Decide(req("/", "GET", "10.0.0.1:1", "x-client", "a"), *now)
	if v.Outcome != Call {
		t.Fatal(v.Outcome)
	}
	svc.deliver()
	if d := (*decided)[0]; d.Outcome != Reject || d.Err == nil || e.Stats.OnErrorDenied != 1 {
		t.Fatalf("on_error deny not applied: %+v", d)
	}
	if !e.CircuitOpen() {
		t.Fatal("circuit closed after a failure")
	}
	// Open: decided at once, no call.
	v = e.Decide(req("/", "GET", "10.0.0.1:1", "x-client", "b"), *now)
	if v.Outcome != Reject || len(svc.calls) != 1 || e.Stats.Global.ShortCircuited != 1 {
		t.Fatalf("open circuit: %v, %d calls", v.Outcome, len(svc.calls))
	}
	// The tick sends no probe before the back-off, one after it (no request
	// waits for it); the service is back.
	svc.down = false
	e.Sweep(*now)
	if len(svc.calls) != 1 {
		t.Fatalf("probe before the back-off")
	}
	*now += int64(global.CircuitMinBackoff)
	e.Sweep(*now)
	e.Sweep(*now)
	if len(svc.calls) != 2 || e.Stats.Global.Probes != 1 {
		t.Fatalf("calls %d, probes %d: want one probe", len(svc.calls), e.Stats.Global.Probes)
	}
	if v := e.Decide(req("/", "GET", "10.0.0.1:1", "x-client", "d"), *now); v.Outcome != Reject {
		t.Fatalf("request during the probe: %v, want on_error deny at once", v.Outcome)
	}
	svc.deliver()
	if e.CircuitOpen() {
		t.Fatal("circuit still open after a successful probe")
	}
	if v := e.Decide(req("/", "GET", "10.0.0.1:1", "x-client", "e"), *now); v.Outcome != Call {
		t.Fatalf("after recovery: %v, want a call", v.Outcome)
	}
}

// TestGlobalSweep: an answer Envoy never delivers is failed by Sweep after
// the timeout, and its waiters are decided.
func TestGlobalSweep(t *testing.T) {
	e, svc, decided, now := globalEngine(t, 100, "allow")
	e.Decide(req("/", "GET", "10.0.0.1:1", "x-client", "a"), *now)
	e.Decide(req("/", "GET", "10.0.0.1:1", "x-client", "a"), *now)
	svc.pending = nil // lost
	e.Sweep(*now + int64(20*time.Millisecond))
	if len(*decided) != 0 {
		t.Fatal("swept before the timeout")
	}
	*now += int64(100 * time.Millisecond)
	e.Sweep(*now)
	if len(*decided) != 2 || e.CallsInFlight() != 0 || e.Stats.OnErrorAllowed != 2 {
		t.Fatalf("decided %d, in flight %d", len(*decided), e.CallsInFlight())
	}
}

// TestGlobalDescriptorFleetStable: Envoys with different fingerprint seeds
// (every Envoy process has its own) name a client identically at the
// service, and different clients differently.
func TestGlobalDescriptorFleetStable(t *testing.T) {
	call := func(seed uint64, client string) string {
		e := New(mustConfig(t, fmt.Sprintf(globalDoc, 100, "allow")), newMemStore(), seed, wallClock)
		svc := &fakeService{limit: 100}
		e.SetGlobal(svc, func(*Pending, *Verdict) {})
		e.Decide(req("/", "GET", "10.0.0.1:1", "x-client", client), t0)
		if len(svc.bodies) != 1 {
			t.Fatal("no call")
		}
		return string(svc.bodies[0])
	}
	a1, a2, b := call(1, "a"), call(2, "a"), call(1, "b")
	if a1 != a2 {
		t.Error("one client, two seeds: different requests to the service")
	}
	if a1 == b {
		t.Error("two clients: the same request to the service")
	}
}

// TestGlobalPrefetch: a client at a steady rate well under its limit is
// served from its lease while the next call is prepared when the lease
// runs low and sent from the tick; after the first two calls of the window
// no request waits, and there is never more than one call in flight.
func TestGlobalPrefetch(t *testing.T) {
	e, svc, _, now := globalEngine(t, 100000, "allow")
	r := req("/", "GET", "10.0.0.1:1", "x-client", "a")
	waited := 0
	for i := 0; i < 20000; i++ {
		*now += int64(2 * time.Millisecond) // 500 per second
		v := e.Decide(r, *now)
		switch v.Outcome {
		case Call:
			waited++
			svc.deliver()
		case Allow:
		default:
			t.Fatalf("request %d: %v", i, v.Outcome)
		}
		if e.CallsInFlight() > 1 {
			t.Fatalf("request %d: %d calls in flight", i, e.CallsInFlight())
		}
		if i%10 == 0 { // the tick, every 20 ms
			e.Sweep(*now)
			svc.deliver()
		}
	}
	if e.Stats.Global.Prefetches == 0 || waited > 2 {
		t.Fatalf("%d prefetches, %d requests waited (calls %v)", e.Stats.Global.Prefetches, waited, svc.calls)
	}
	if svc.count > 100000 || uint64(len(svc.calls)) > 20000/10 {
		t.Fatalf("service count %d, %d calls", svc.count, len(svc.calls))
	}
	t.Logf("%d calls for 20000 requests, %d prefetched, %d waited", len(svc.calls), e.Stats.Global.Prefetches, waited)
}

// TestDescriptorKeyUnchanged: the descriptor key is the hex of the first 16
// bytes of crypto/sha256's digest, as before the plugin had its own
// SHA-256, so that a fleet mixing old and new Envoys shares its counters.
func TestDescriptorKeyUnchanged(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for n := 0; n < 3000; n++ {
		b := make([]byte, n%300)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		sum := stdsha256.Sum256(b)
		if got, want := descriptorKey(b), hex.EncodeToString(sum[:16]); got != want {
			t.Fatalf("descriptorKey(%x) = %s, want %s", b, got, want)
		}
	}
}

// streamReq is a fakeRequest of a stream (it can wait in a queue).
type streamReq struct {
	*fakeRequest
	id uint32
}

func (r streamReq) StreamID() uint32 { return r.id }

// TestGlobalCountsRequestsLetInFromAQueue: a request that waited in a
// concurrency queue passes the global rules once its slot is free, like
// one admitted at once: across both paths, the global rule admits at most
// its limit.
func TestGlobalCountsRequestsLetInFromAQueue(t *testing.T) {
	now := t0 + int64(time.Second)
	e := New(mustConfig(t, `{"rules":[
		{"name":"g","scope":"global","limit":3,"window":"1m","key":["header:x-client"]},
		{"name":"slot","algorithm":"concurrency","limit":1,"key":["path"],"max_delay":"10s"}],
		"global":{"cluster":"ratelimit","timeout":"50ms"}}`), newMemStore(), 7, wallClock)

	svc := &fakeService{limit: 3}
	admitted, rejected := 0, 0
	var holding []SlotRef
	count := func(v *Verdict) {
		switch v.Outcome {
		case Allow, Delay:
			admitted++
			holding = append(holding, v.Slots...)
		case Reject:
			rejected++
		}
	}
	e.SetGlobal(svc, func(p *Pending, v *Verdict) { count(v) })
	e.Now = func() int64 { return now }
	queued := 0
	release := func() {
		// Whatever holds the slot ends: the next in the queue goes on.
		now += int64(10 * time.Millisecond)
		e.Release(holding, now)
		holding = holding[:0]
		for _, ev := range e.Poll(now, nil) {
			count(&ev.Verdict)
		}
		svc.deliver()
	}
	for i := range 4 {
		// Two requests at once: one takes the slot, the other waits.
		for k := range 2 {
			v := e.Decide(streamReq{req("/buy", "POST", "10.0.0.1:1", "x-client", "a"), uint32(2*i + k + 1)}, now)
			if v.Outcome == Queue {
				queued++
			}
			count(&v)
		}
		svc.deliver()
		release()
		release()
	}
	if queued == 0 {
		t.Fatal("no request waited in the queue")
	}
	if admitted > 3 || admitted+rejected != 8 {
		t.Errorf("%d admitted, %d rejected of 8 (the global limit is 3, every request decided)", admitted, rejected)
	}
}

// TestGlobalCircuitRecoversWithItsEnvoy: two workers of an Envoy (one
// shared data) open their circuits while the service fails. The service
// answers again; the first worker's probe gets through just after the
// second worker's probe met a failure (a service that answers some calls
// and fails others while it reconnects). The second worker closes
// its circuit at its next tick, without waiting for a probe of its own
// (whose back-off has grown), since the service answered after its last
// failure; a worker whose last failure came after that answer stays open
// and probes again at the shortest back-off.
func TestGlobalCircuitRecoversWithItsEnvoy(t *testing.T) {
	cfg := mustConfig(t, `{"rules":[{"name":"g","scope":"global","limit":100,"window":"1m","key":["header:x-client"]}],
		"global":{"cluster":"ratelimit","timeout":"50ms"},"on_error":"allow"}`)
	store := newMemStore()
	now := t0
	svc := &fakeService{limit: 1000}
	var workers []*Engine
	for i := 0; i < 3; i++ {
		e := New(cfg, store, 1, wallClock)
		e.SetGlobal(svc, func(*Pending, *Verdict) {})
		e.Now = func() int64 { return now }
		workers = append(workers, e)
	}
	a, b, c := workers[0], workers[1], workers[2]
	// The service fails: every worker's call fails, four times in a row
	// (the back-off grows to its maximum).
	svc.down = true
	for round := 0; round < 4; round++ {
		for _, e := range workers {
			if round == 0 {
				e.Decide(req("/", "GET", "10.0.0.1:1", "x-client", "x"), now)
			} else {
				e.Sweep(now)
			}
		}
		svc.deliver()
		now += int64(global.CircuitMaxBackoff)
	}
	for i, e := range workers {
		if !e.CircuitOpen() {
			t.Fatalf("worker %d: circuit closed while the service fails", i)
		}
	}
	// b's probe meets a failure; c's probe is sent; the service answers
	// a's probe; c's answer is a failure, after a's (a service that
	// answers some calls and fails others while it reconnects).
	b.Sweep(now)
	svc.deliver()
	now += int64(time.Millisecond)
	c.Sweep(now)
	now += int64(time.Millisecond)
	a.Sweep(now)
	if len(svc.pending) != 2 {
		t.Fatalf("%d probes pending, want c's and a's", len(svc.pending))
	}
	cProbe, aProbe := svc.pending[0], svc.pending[1]
	svc.pending = nil
	svc.down = false
	aProbe()
	if a.CircuitOpen() {
		t.Fatal("a: circuit open after its probe got through")
	}
	now += int64(time.Millisecond)
	svc.down = true
	cProbe()
	if !b.CircuitOpen() || !c.CircuitOpen() {
		t.Fatal("b or c closed by a failed probe")
	}
	// The next tick, long before b's back-off ends: b closes (the service
	// answered a after b's last failure), c stays open (its failure came
	// after).
	now += int64(prefetchTick)
	calls := len(svc.calls)
	b.Sweep(now)
	c.Sweep(now)
	if b.CircuitOpen() {
		t.Error("b: circuit still open after its Envoy's other worker was answered")
	}
	if !c.CircuitOpen() {
		t.Error("c: circuit closed though it failed after the answer")
	}
	if len(svc.calls) != calls {
		t.Errorf("%d probes sent before the back-off ended", len(svc.calls)-calls)
	}
	// c probes again at the shortest back-off (the service answers some
	// calls), not the back-off it had grown to.
	now += int64(global.CircuitMinBackoff)
	c.Sweep(now)
	if len(svc.calls) != calls+1 {
		t.Errorf("c: %d probes at its shortest back-off, want 1", len(svc.calls)-calls)
	}
	svc.down = false
	svc.deliver()
	if c.CircuitOpen() {
		t.Error("c: circuit open after its probe got through")
	}
	if v := b.Decide(req("/", "GET", "10.0.0.1:1", "x-client", "y"), now); v.Outcome != Call {
		t.Errorf("b after the recovery: %v, want a call to the service", v.Outcome)
	}
}

// TestGlobalCircuitProbeNotStuck: a probe the service does not answer (its
// call stuck until its timeout) does not keep the circuit open: another
// probe goes after the longest back-off, the first answered closes it,
// and the stuck one's late failure does not open it again.
func TestGlobalCircuitProbeNotStuck(t *testing.T) {
	e, svc, _, now := globalEngine(t, 100, "allow")
	svc.down = true
	e.Decide(req("/", "GET", "10.0.0.1:1", "x-client", "a"), *now)
	svc.deliver()
	if !e.CircuitOpen() {
		t.Fatal("circuit closed after a failure")
	}
	*now += int64(global.CircuitMinBackoff)
	e.Sweep(*now)
	if e.Stats.Global.Probes != 1 {
		t.Fatalf("probes %d, want 1", e.Stats.Global.Probes)
	}
	stuck := svc.pending
	svc.pending = nil
	*now += int64(global.CircuitMaxBackoff) - int64(time.Millisecond)
	e.Sweep(*now)
	if e.Stats.Global.Probes != 1 {
		t.Fatalf("a second probe before the first waited %v", global.CircuitMaxBackoff)
	}
	*now += int64(time.Millisecond)
	e.Sweep(*now)
	if e.Stats.Global.Probes != 2 {
		t.Fatalf("probes %d: none sent while the first is stuck", e.Stats.Global.Probes)
	}
	svc.down = false
	svc.deliver()
	if e.CircuitOpen() {
		t.Fatal("circuit open after the second probe was answered")
	}
	// The stuck probe fails at last (its timeout): sent before the
	// service answered, it does not open the circuit again.
	svc.down = true
	*now += int64(10 * time.Millisecond)
	for _, f := range stuck {
		f()
	}
	if e.CircuitOpen() {
		t.Error("the late failure of a probe sent before the answer opened the circuit")
	}
	// Calls sent after the answer that fail: the first, so soon after an
	// answer, leaves it closed; the second opens it.
	e.Decide(req("/", "GET", "10.0.0.1:1", "x-client", "b"), *now)
	svc.deliver()
	if e.CircuitOpen() {
		t.Error("one failure just after an answer opened the circuit")
	}
	e.Decide(req("/", "GET", "10.0.0.1:1", "x-client", "c"), *now)
	svc.deliver()
	if !e.CircuitOpen() {
		t.Error("two failures in a row left the circuit closed")
	}
}
