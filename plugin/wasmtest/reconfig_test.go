package wasmtest

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

// Configuration updates while traffic flows: two generations of VMs
// (old ones draining, new ones serving) sharing one host store.

const apiRule = `{"name":"api","limit":5,"window":"10s","burst":5,"key":["path"]}`

// spend sends n requests and counts the 200s.
func admittedOf(t *testing.T, vms []*wasmhost.VM, n int, path string) int {
	t.Helper()
	ok := 0
	for i := 0; i < n; i++ {
		r := get(vms[i%len(vms)], path, "10.0.0.1:1")
		if r.Status == 200 {
			ok++
		}
	}
	return ok
}

func TestReconfigTokenBucketRuleAddedBefore(t *testing.T) {
	for _, tc := range []struct{ name, cfg string }{
		{"added-before", `{"rules":[{"name":"pre","match":{"path_prefix":"/x"},"limit":100,"window":"1s"},` + apiRule + `]}`},
		{"added-before-pinned", `{"rules":[{"name":"pre","match":{"path_prefix":"/x"},"limit":100,"window":"1s","max_keys":1024},` + apiRule + `]}`},
		{"reordered", `{"rules":[{"name":"pre","match":{"path_prefix":"/x"},"limit":100,"window":"1s"},` + apiRule + `]}`},
		{"removed", `{"rules":[` + apiRule + `]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(t)
			oldCfg := `{"rules":[` + apiRule + `]}`
			if tc.name == "reordered" || tc.name == "removed" {
				oldCfg = `{"rules":[` + apiRule + `,{"name":"pre","match":{"path_prefix":"/x"},"limit":100,"window":"1s"}]}`
			}
			old := workers(t, h, 2, oldCfg)
			if n := admittedOf(t, old, 5, "/buy"); n != 5 {
				t.Fatalf("old admitted %d of 5", n)
			}
			h.AdvanceClock(100 * time.Millisecond)
			nu := workers(t, h, 2, tc.cfg)
			if n := admittedOf(t, nu, 5, "/buy"); n != 0 {
				t.Errorf("new VMs admitted %d after the bucket was spent on the old ones, want 0 (\"adding or removing another rule moves none of its states\")", n)
			}
			if n := admittedOf(t, old, 3, "/buy"); n != 0 {
				t.Errorf("old VMs admitted %d after the update, want 0", n)
			}
			// 5 per 10s: one token per 2s. After 2s, exactly one across both generations.
			h.AdvanceClock(2 * time.Second)
			n := admittedOf(t, append(append([]*wasmhost.VM{}, old...), nu...), 6, "/buy")
			if n != 1 {
				t.Errorf("after one refill interval both generations admitted %d, want 1", n)
			}
			healthy(t, append(old, nu...)...)
		})
	}
}

// A rule whose limit changed (10 -> 20) starts fresh: 20 admitted on the
// new VMs even though the old rule is spent; the old VMs stay on theirs.
func TestReconfigLimitChangedStartsFresh(t *testing.T) {
	h := newHost(t)
	old := workers(t, h, 2, `{"rules":[{"name":"api","limit":10,"window":"10s","key":["path"]}]}`)
	if n := admittedOf(t, old, 10, "/buy"); n != 10 {
		t.Fatalf("old admitted %d of 10", n)
	}
	nu := workers(t, h, 2, `{"rules":[{"name":"api","limit":20,"window":"10s","key":["path"]}]}`)
	if n := admittedOf(t, nu, 25, "/buy"); n != 20 {
		t.Errorf("new VMs admitted %d for a changed rule (limit 10->20), want 20 (\"a changed rule starts fresh\")", n)
	}
	if n := admittedOf(t, old, 3, "/buy"); n != 0 {
		t.Errorf("old VMs admitted %d after the update, want 0 (their rule is spent)", n)
	}
	healthy(t, append(old, nu...)...)
}

// Slots held by requests on the old VMs are counted by the new ones; their
// release frees them for the new VMs; no leak, no over-admission.
func TestReconfigConcurrencySlotsCounted(t *testing.T) {
	h := newHost(t)
	store := `{"name":"store","algorithm":"concurrency","limit":2,"key":["path"]}`
	old := workers(t, h, 2, `{"rules":[`+store+`]}`)
	a := open(t, old[0], "/buy", "10.0.0.1:1")
	b := open(t, old[1], "/buy", "10.0.0.1:2")
	wantState(t, "a", a, wasmhost.StreamUpstream)
	wantState(t, "b", b, wasmhost.StreamUpstream)
	nu := workers(t, h, 2, `{"rules":[{"name":"pre","match":{"path_prefix":"/x"},"limit":100,"window":"1s"},`+store+`]}`)
	if r := open(t, nu[0], "/buy", "10.0.0.2:1").Result(); r.Status != 429 {
		t.Fatalf("new VM with both slots held on old VMs: %d, want 429", r.Status)
	}
	h.AdvanceClock(1100 * time.Millisecond) // a flush
	if g := h.Metrics().Gauge("sluice.concurrency.slots_held"); g != 2 {
		t.Errorf("slots_held %d with two held, want 2", g)
	}
	respond(t, a)
	c := open(t, nu[1], "/buy", "10.0.0.2:1")
	wantState(t, "c after an old slot was released", c, wasmhost.StreamUpstream)
	if r := open(t, nu[0], "/buy", "10.0.0.2:2").Result(); r.Status != 429 {
		t.Errorf("third in flight across generations: %d, want 429", r.Status)
	}
	if r := open(t, old[0], "/buy", "10.0.0.2:3").Result(); r.Status != 429 {
		t.Errorf("third in flight on an old VM: %d, want 429", r.Status)
	}
	respond(t, b)
	d := open(t, nu[0], "/buy", "10.0.0.2:4")
	wantState(t, "d", d, wasmhost.StreamUpstream)
	respond(t, c)
	respond(t, d)
	for _, vm := range old {
		if err := vm.Close(); err != nil {
			t.Fatal(err)
		}
	}
	idle(t, h)
	// All slots free: two admitted on the new VMs.
	e, f := open(t, nu[0], "/buy", "10.0.0.3:1"), open(t, nu[1], "/buy", "10.0.0.3:2")
	wantState(t, "e", e, wasmhost.StreamUpstream)
	wantState(t, "f", f, wasmhost.StreamUpstream)
	if r := open(t, nu[0], "/buy", "10.0.0.3:3").Result(); r.Status != 429 {
		t.Errorf("third after drain: %d, want 429", r.Status)
	}
	respond(t, e)
	respond(t, f)
	idle(t, h)
	healthy(t, nu...)
}

// A concurrency rule whose limit changed starts fresh; the old VMs' later
// releases do not give the new rule extra slots.
func TestReconfigConcurrencyLimitChanged(t *testing.T) {
	h := newHost(t)
	old := workers(t, h, 1, `{"rules":[{"name":"store","algorithm":"concurrency","limit":2,"key":["path"]}]}`)
	a, b := open(t, old[0], "/buy", "10.0.0.1:1"), open(t, old[0], "/buy", "10.0.0.1:2")
	wantState(t, "b", b, wasmhost.StreamUpstream)
	nu := workers(t, h, 1, `{"rules":[{"name":"store","algorithm":"concurrency","limit":3,"key":["path"]}]}`)
	var in []*wasmhost.Stream
	for i := 0; i < 3; i++ {
		s := open(t, nu[0], "/buy", "10.0.0.2:1")
		wantState(t, "fresh slot", s, wasmhost.StreamUpstream)
		in = append(in, s)
	}
	respond(t, a)
	respond(t, b)
	if r := open(t, nu[0], "/buy", "10.0.0.2:2").Result(); r.Status != 429 {
		t.Errorf("fourth on the changed rule after old releases: %d, want 429", r.Status)
	}
	for _, s := range in {
		respond(t, s)
	}
	idle(t, h)
	healthy(t, append(old, nu...)...)
}

// The old VMs die mid-flight (drain ends) holding slots and a waiter: the
// new VMs get the slots back within 2 s.
func TestReconfigOldKilledWithSlots(t *testing.T) {
	h := newHost(t)
	store := `{"name":"store","algorithm":"concurrency","limit":2,"key":["path"],"max_delay":"5s"}`
	old := workers(t, h, 1, `{"rules":[`+store+`]}`)
	open(t, old[0], "/buy", "10.0.0.1:1")
	open(t, old[0], "/buy", "10.0.0.1:2")
	w := open(t, old[0], "/buy", "10.0.0.1:3")
	wantState(t, "w", w, wasmhost.StreamPaused)
	nu := workers(t, h, 1, `{"rules":[{"name":"pre","match":{"path_prefix":"/x"},"limit":100,"window":"1s"},`+store+`]}`)
	n := open(t, nu[0], "/buy", "10.0.0.2:1")
	wantState(t, "n", n, wasmhost.StreamPaused)
	if err := old[0].Kill(); err != nil {
		t.Fatal(err)
	}
	var at time.Duration
	for step := 10 * time.Millisecond; step <= 5*time.Second; step += 10 * time.Millisecond {
		h.AdvanceClock(10 * time.Millisecond)
		if state(n) == wasmhost.StreamUpstream {
			at = step
			break
		}
	}
	if at == 0 || at > 2100*time.Millisecond {
		t.Fatalf("the new VM's waiter got a slot at %v after the old VM was killed, want within 2s", at)
	}
	m := open(t, nu[0], "/buy", "10.0.0.2:2")
	wantState(t, "second slot", m, wasmhost.StreamUpstream)
	if r := open(t, nu[0], "/buy", "10.0.0.2:3"); state(r) == wasmhost.StreamUpstream {
		t.Errorf("third admitted: over-admission")
	}
	healthy(t, nu...)
}

// Requests held (throttled) on the old VMs are released at their times;
// the new VMs' requests queue behind them, no extra admissions.
func TestReconfigHeldRequests(t *testing.T) {
	h := newHost(t)
	rule := `{"name":"login","limit":10,"window":"1s","burst":2,"max_delay":"1s"}`
	old := workers(t, h, 1, `{"rules":[`+rule+`]}`)
	var held []*wasmhost.Result
	for i := 0; i < 4; i++ {
		r := get(old[0], "/login", "10.0.0.1:1")
		if i < 2 {
			if r.Status != 200 {
				t.Fatalf("%d: %d", i, r.Status)
			}
			continue
		}
		if !r.Paused {
			t.Fatalf("%d not held: %+v", i, r)
		}
		held = append(held, r)
	}
	nu := workers(t, h, 1, `{"rules":[{"name":"pre","match":{"path_prefix":"/x"},"limit":100,"window":"1s"},`+rule+`]}`)
	for i := 0; i < 2; i++ {
		r := get(nu[0], "/login", "10.0.0.1:1")
		if !r.Paused {
			t.Fatalf("new %d not held: status %d", i, r.Status)
		}
		held = append(held, r)
	}
	released := make([]time.Duration, len(held))
	for step := time.Duration(0); step <= 1200*time.Millisecond; step += 10 * time.Millisecond {
		for i, r := range held {
			if released[i] == 0 && r.Stream.State() != wasmhost.StreamPaused {
				released[i] = step
			}
		}
		h.AdvanceClock(10 * time.Millisecond)
	}
	for i := range held {
		want := time.Duration(i+1) * 100 * time.Millisecond
		if released[i] < want || released[i] > want+20*time.Millisecond {
			t.Errorf("held %d released at %v, want %v", i, released[i], want)
		}
		if res := held[i].Stream.Finish(); res.Status != 200 {
			t.Errorf("held %d: %d", i, res.Status)
		}
	}
	healthy(t, append(old, nu...)...)
}

// reconfigLearn drives the adaptive rule "store" on vms with an upstream of 6
// slots x 20 ms for 2 s and returns the learnt limit (closing the clients).
func reconfigLearn(t *testing.T, h *wasmhost.Host, vms []*wasmhost.VM) int {
	t.Helper()
	up := &slotUpstream{slots: 6, service: 20 * time.Millisecond, serving: map[*wasmhost.Stream]time.Duration{}}
	start := func(i int) *wasmhost.Stream { return buyStream(t, vms[i%len(vms)], "10.0.0.1:1") }
	clients := make([]*wasmhost.Stream, 24)
	forwarded := map[*wasmhost.Stream]bool{}
	for i := range clients {
		clients[i] = start(i)
	}
	var now time.Duration
	limit := ""
	for step := 0; step < 2000; step++ {
		h.AdvanceClock(time.Millisecond)
		now += time.Millisecond
		for _, s := range up.due(now) {
			limit = respond(t, s).Headers.Value("x-ratelimit-limit")
		}
		for i, s := range clients {
			switch state(s) {
			case wasmhost.StreamUpstream:
				if !forwarded[s] {
					forwarded[s] = true
					up.arrive(s, now)
				}
			case wasmhost.StreamResponded, wasmhost.StreamClosed:
				clients[i] = start(i)
			}
		}
	}
	for _, s := range clients {
		s.Close()
	}
	// The clients closed mid-request end a round too (their samples), which
	// may move the limit after the last response: one more request reads
	// the limit a new VM finds in shared data.
	if s := start(0); state(s) == wasmhost.StreamUpstream {
		limit = respond(t, s).Headers.Value("x-ratelimit-limit")
	}
	n := 0
	for _, c := range limit {
		n = n*10 + int(c-'0')
	}
	return n
}

func reconfigAdmitNow(t *testing.T, h *wasmhost.Host, vm *wasmhost.VM) int {
	t.Helper()
	var again []*wasmhost.Stream
	for i := 0; i < 20; i++ {
		s, err := vm.NewStream(wasmhost.Properties{"source.address": "10.0.0.1:1", "response.code_details": "via_upstream"})
		if err != nil {
			t.Fatal(err)
		}
		r := wasmhost.HTTPRequest("POST", "shop.example", "/buy")
		if _, err := s.SendRequestHeaders(r.Headers, true); err != nil {
			t.Fatal(err)
		}
		again = append(again, s)
	}
	h.AdvanceClock(20 * time.Millisecond)
	admitted := 0
	for _, s := range again {
		if state(s) == wasmhost.StreamUpstream {
			admitted++
		}
	}
	for _, s := range again {
		s.Close()
	}
	return admitted
}

// adaptive_concurrency's learnt limit survives an update that leaves the
// rule unchanged (another rule added), and a changed rule starts cold (4).
func TestReconfigAdaptiveLearntLimit(t *testing.T) {
	const rule = `{"name":"store","algorithm":"adaptive_concurrency","key":["path"],"max_delay":"5s"}`
	for _, tc := range []struct {
		name, cfg string
		kept      bool
	}{
		{"unchanged", `{"rules":[{"name":"pre","match":{"path_prefix":"/x"},"limit":100,"window":"1s"},` + rule + `]}`, true},
		{"unchanged-max_delay", `{"rules":[{"name":"store","algorithm":"adaptive_concurrency","key":["path"],"max_delay":"3s"}]}`, true},
		{"max_limit-changed", `{"rules":[{"name":"store","algorithm":"adaptive_concurrency","key":["path"],"max_delay":"5s","max_limit":500}]}`, false},
		{"key-changed", `{"rules":[{"name":"store","algorithm":"adaptive_concurrency","key":["method"],"max_delay":"5s"}]}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(t)
			old := workers(t, h, 2, `{"rules":[`+rule+`]}`)
			n := reconfigLearn(t, h, old)
			if n < 5 {
				t.Fatalf("learnt %d, want >= 5 to tell it from the cold 4", n)
			}
			nu := workers(t, h, 1, tc.cfg)
			got := reconfigAdmitNow(t, h, nu[0])
			t.Logf("learnt %d, new VM admitted %d", n, got)
			want := 4
			if tc.kept {
				want = n
			}
			if got != want {
				t.Errorf("new VM admitted %d at once, want %d (learnt %d; kept=%v)", got, want, n, tc.kept)
			}
			healthy(t, append(old, nu...)...)
		})
	}
}
