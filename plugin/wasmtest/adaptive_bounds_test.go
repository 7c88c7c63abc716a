package wasmtest

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

// buyStream opens a POST /buy from client on vm whose response will be
// via_upstream.
func buyStream(t *testing.T, vm *wasmhost.VM, client string) *wasmhost.Stream {
	t.Helper()
	s, err := vm.NewStream(wasmhost.Properties{"source.address": client, "response.code_details": "via_upstream"})
	if err != nil {
		t.Fatal(err)
	}
	r := wasmhost.HTTPRequest("POST", "shop.example", "/buy")
	if _, err := s.SendRequestHeaders(r.Headers, true); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestAdaptiveFixedBoundsIsConcurrency: min_limit == max_limit must
// behave like concurrency at that number, whatever the latencies.
func TestAdaptiveFixedBoundsIsConcurrency(t *testing.T) {
	for _, n := range []int{1, 7} {
		h := newHost(t)
		vms := workers(t, h, 2, `{"rules":[{"name":"store","algorithm":"adaptive_concurrency","key":["path"],"min_limit":`+strconv.Itoa(n)+`,"max_limit":`+strconv.Itoa(n)+`}]}`)
		for round := 0; round < 40; round++ {
			var open []*wasmhost.Stream
			for i := 0; i < 3*n+2; i++ {
				s := buyStream(t, vms[i%2], "10.0.0.1:1")
				if state(s) == wasmhost.StreamUpstream {
					open = append(open, s)
				} else if r := s.Result(); r.Status != 429 || r.Headers.Value("x-ratelimit-limit") != strconv.Itoa(n) {
					t.Fatalf("n=%d round %d: refused %d limit %q", n, round, r.Status, r.Headers.Value("x-ratelimit-limit"))
				}
			}
			if len(open) != n {
				t.Fatalf("n=%d round %d: %d admitted, want %d", n, round, len(open), n)
			}
			lat := time.Millisecond
			if round%3 == 2 {
				lat = 500 * time.Millisecond // slow rounds too
			}
			h.AdvanceClock(lat)
			for _, s := range open {
				res := respond(t, s)
				if res.Headers.Value("x-ratelimit-limit") != strconv.Itoa(n) {
					t.Fatalf("n=%d: response limit %q", n, res.Headers.Value("x-ratelimit-limit"))
				}
			}
			h.AdvanceClock(20 * time.Millisecond)
		}
		h.AdvanceClock(1100 * time.Millisecond)
		if l := h.Metrics().Gauge("sluice.rule.store.limit"); l != uint64(n) {
			t.Errorf("n=%d: limit gauge %d", n, l)
		}
		healthy(t, vms...)
	}
}

// TestAdaptiveShadowNeverRefusesOrQueues: a shadow adaptive rule (even
// with max_delay) lets every request through at once, and still learns
// from the ones it admitted.
func TestAdaptiveShadowNeverRefusesOrQueues(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, `{"rules":[{"name":"store","algorithm":"adaptive_concurrency","key":["path"],"shadow":true,"max_delay":"2s"}]}`)
	for round := 0; round < 30; round++ {
		var open []*wasmhost.Stream
		for i := 0; i < 40; i++ {
			s := buyStream(t, vms[i%2], "10.0.0.1:1")
			if state(s) != wasmhost.StreamUpstream {
				t.Fatalf("round %d request %d: %v (shadow must not refuse or queue)", round, i, state(s))
			}
			open = append(open, s)
		}
		h.AdvanceClock(5 * time.Millisecond)
		for _, s := range open {
			if r := respond(t, s); r.Status != 200 {
				t.Fatalf("status %d", r.Status)
			}
		}
		h.AdvanceClock(20 * time.Millisecond)
	}
	h.AdvanceClock(1100 * time.Millisecond)
	if l := h.Metrics().Gauge("sluice.rule.store.limit"); l <= 4 {
		t.Errorf("shadow rule did not learn: limit gauge %d", l)
	}
	healthy(t, vms...)
}

// TestAdaptiveMinAboveInitial: min_limit 10 from cold admits 10 at once.
func TestAdaptiveMinAboveInitial(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 1, `{"rules":[{"name":"store","algorithm":"adaptive_concurrency","key":["path"],"min_limit":10,"max_limit":20}]}`)
	n := 0
	for i := 0; i < 30; i++ {
		if state(buyStream(t, vms[0], "10.0.0.1:1")) == wasmhost.StreamUpstream {
			n++
		}
	}
	if n != 10 {
		t.Errorf("cold with min_limit 10: %d admitted", n)
	}
}

// TestAdaptiveFixedKilledWorker: slots come back within 2 s.
func TestAdaptiveFixedKilledWorker(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, `{"rules":[{"name":"store","algorithm":"adaptive_concurrency","key":["path"],"min_limit":2,"max_limit":2}]}`)
	for i := 0; i < 2; i++ {
		if s := open(t, vms[0], "/buy", "10.0.0.1:1"); state(s) != wasmhost.StreamUpstream {
			t.Fatalf("request %d not admitted", i)
		}
	}
	killedSlotsComeBack(t, h, vms)
}
