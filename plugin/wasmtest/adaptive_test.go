package wasmtest

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

// slotUpstream is a model upstream in the host's clock: slots workers of
// service time each, FIFO queue for the rest (what the e2e test runs for
// real).
type slotUpstream struct {
	slots   int
	service time.Duration
	busy    []time.Duration // finish times of the requests being served
	queue   []*wasmhost.Stream
	serving map[*wasmhost.Stream]time.Duration
	maxQ    int
}

// arrive takes s (just forwarded by the plugin) at now.
func (u *slotUpstream) arrive(s *wasmhost.Stream, now time.Duration) {
	if len(u.serving) < u.slots {
		u.serving[s] = now + u.service
		return
	}
	u.queue = append(u.queue, s)
	u.maxQ = max(u.maxQ, len(u.queue))
}

// due returns the streams whose response is ready at now, and starts the
// queued ones on the freed workers.
func (u *slotUpstream) due(now time.Duration) []*wasmhost.Stream {
	var out []*wasmhost.Stream
	for s, f := range u.serving {
		if f <= now {
			out = append(out, s)
			delete(u.serving, s)
		}
	}
	for len(u.serving) < u.slots && len(u.queue) > 0 {
		u.serving[u.queue[0]] = now + u.service
		u.queue = u.queue[1:]
	}
	return out
}

// TestAdaptiveLearnsUpstreamSlots: the compiled plugin on 2 workers, 24
// closed-loop clients queueing in the rule (max_delay), an upstream of 6
// slots × 20 ms. The rule learns a limit near 6 from latency alone: the
// upstream stays busy and its own queue short (with no limit, 18 would
// wait in it). Slots come back on every release path as for concurrency.
func TestAdaptiveLearnsUpstreamSlots(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, `{"rules":[{"name":"store","algorithm":"adaptive_concurrency","key":["path"],"max_delay":"5s"}]}`)
	up := &slotUpstream{slots: 6, service: 20 * time.Millisecond, serving: map[*wasmhost.Stream]time.Duration{}}
	start := func(i int) *wasmhost.Stream { return buyStream(t, vms[i%2], "10.0.0.1:1") }
	clients := make([]*wasmhost.Stream, 24)
	forwarded := map[*wasmhost.Stream]bool{}
	for i := range clients {
		clients[i] = start(i)
	}
	var now time.Duration
	served, limit, policy := 0, "", ""
	for step := 0; step < 3000; step++ { // 3 s in 1 ms steps
		if err := h.AdvanceClock(time.Millisecond); err != nil {
			t.Fatal(err)
		}
		now += time.Millisecond
		if step == 1000 {
			served, up.maxQ = 0, 0 // measure the last 2 s
		}
		for _, s := range up.due(now) {
			res := respond(t, s)
			limit, policy = res.Headers.Value("x-ratelimit-limit"), res.Headers.Value("ratelimit-policy")
			served++
		}
		for i, s := range clients {
			switch state(s) {
			case wasmhost.StreamUpstream:
				if !forwarded[s] {
					forwarded[s] = true
					up.arrive(s, now)
				}
			case wasmhost.StreamResponded, wasmhost.StreamClosed:
				if r := s.Result(); r.Status != 200 {
					t.Fatalf("a request got %d", r.Status)
				}
				clients[i] = start(i)
			}
		}
	}
	capacity := 2 * 6 / 0.020
	n, _ := strconv.Atoi(limit)
	t.Logf("served %d in 2 s (capacity %.0f), upstream queue at most %d, learnt limit %s", served, capacity, up.maxQ, limit)
	if float64(served) < 0.7*capacity || up.maxQ > 6 || n < 5 || n > 12 {
		t.Errorf("served %d (capacity %.0f), upstream queue up to %d, limit %d", served, capacity, up.maxQ, n)
	}
	// Each worker logs its decisions at debug level: one of them set the
	// limit the last response reported. (Not necessarily the last one: a
	// decision on the tick after it, from a window of samples completed
	// then, may have moved it.)
	decided := false
	for _, vm := range vms {
		for _, l := range vm.Logs() {
			decided = decided || strings.Contains(l.Message, "sluice: rule store learnt: limit ") &&
				strings.Contains(l.Message, "-> "+limit+" (round of ")
		}
	}
	if !decided {
		t.Errorf("no debug line of a decision that set the learnt limit %s", limit)
	}
	// The draft policy says the learnt number, in concurrent requests.
	if want := `"store";q=` + limit + `;qu="concurrent-requests"`; policy != want {
		t.Errorf("RateLimit-Policy %q, want %q", policy, want)
	}
	// Every slot comes back when the clients go away (as for concurrency).
	// The samples of the requests answered before they left still count,
	// so the limit may move once more (those gone after less than the
	// learnt latency teach nothing, where a stall of a second would).
	for _, s := range clients {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// The metrics publish the learnt limit and latency.
	h.AdvanceClock(1100 * time.Millisecond)
	m := h.Metrics()
	l, lat := m.Gauge("sluice.rule.store.limit"), m.Gauge("sluice.rule.store.latency_us")
	if l < 5 || l > 12 || lat < 19000 || lat > 25000 {
		t.Errorf("gauges: limit %d (%d at the last response), latency_us %d", l, n, lat)
	}
	var again []*wasmhost.Stream
	for i := 0; i < 20; i++ {
		again = append(again, start(i))
	}
	h.AdvanceClock(20 * time.Millisecond) // the queue admits up to the limit
	admitted := 0
	for _, s := range again {
		if state(s) == wasmhost.StreamUpstream {
			admitted++
		}
	}
	if uint64(admitted) != l {
		t.Errorf("after every client left, %d of 20 admitted, want the learnt limit %d", admitted, l)
	}
}

// TestAdaptiveIgnoresWhatIsNotUpstreamLatency: fast local replies of other
// filters and fast 5xx never teach the rule that the upstream is fast, and
// refused requests never count at all; only upstream responses do.
func TestAdaptiveIgnoresWhatIsNotUpstreamLatency(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 1, `{"rules":[{"name":"store","algorithm":"adaptive_concurrency","key":["path"]}]}`)
	round := func(details string, status int, latency time.Duration) (limit string) {
		var open []*wasmhost.Stream
		for i := 0; i < 20; i++ {
			s, _ := vms[0].NewStream(wasmhost.Properties{"source.address": "10.0.0.1:1", "response.code_details": details})
			r := wasmhost.HTTPRequest("POST", "shop.example", "/buy")
			s.SendRequestHeaders(r.Headers, true)
			if state(s) == wasmhost.StreamUpstream {
				open = append(open, s)
			}
		}
		h.AdvanceClock(latency)
		for _, s := range open {
			s.SendResponse(wasmhost.Response{Status: status})
			limit = s.Result().Headers.Value("x-ratelimit-limit")
		}
		h.AdvanceClock(20 * time.Millisecond) // a tick: the batch reaches the Gauge
		return limit
	}
	// Saturated rounds of fast local replies and fast 503s: no growth.
	for i := 0; i < 30; i++ {
		if l := round("ext_authz_denied", 403, time.Millisecond); l != "4" {
			t.Fatalf("local replies moved the limit to %s", l)
		}
		if l := round("via_upstream", 503, time.Millisecond); l != "4" {
			t.Fatalf("fast 503s moved the limit to %s", l)
		}
	}
	// Upstream responses do.
	var l string
	for i := 0; i < 30; i++ {
		l = round("via_upstream", 200, time.Millisecond)
	}
	if n, _ := strconv.Atoi(l); n <= 4 {
		t.Fatalf("upstream responses left the limit at %s", l)
	}
}

// TestAdaptiveKilledWorkerSlotsComeBack: an adaptive rule's slots are
// concurrency leases: a worker that vanishes holding them leaks them for
// at most 2 s, as for concurrency.
func TestAdaptiveKilledWorkerSlotsComeBack(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, `{"rules":[{"name":"store","algorithm":"adaptive_concurrency","key":["path"]}]}`)
	for i := 0; i < 4; i++ { // the cold limit
		if s := open(t, vms[0], "/buy", "10.0.0.1:1"); state(s) != wasmhost.StreamUpstream {
			t.Fatalf("request %d not admitted", i)
		}
	}
	killedSlotsComeBack(t, h, vms)
}
