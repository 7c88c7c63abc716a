package wasmtest

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

const classesConfig = `{"rules":[{"name":"store","algorithm":"concurrency","limit":4,"key":[],"max_delay":"5s",
 "classes":[{"name":"login","match":{"path_prefix":"/login"},"reserve":0.25}]}]}`

// TestClassesInThePlugin: in the compiled plugin, across workers, the buys
// (the default class) hold at most 3 of the rule's 4 slots, a login takes
// the fourth at once, a freed slot goes to a waiting login before a buy
// that waited longer, the access log's wasm.sluice_class names the class,
// and the per-class metrics count it.
func TestClassesInThePlugin(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, classesConfig)
	var buys []*wasmhost.Stream
	for i := 0; i < 3; i++ {
		s := open(t, vms[i%2], "/buy", "10.0.0.1:1")
		if state(s) != wasmhost.StreamUpstream {
			t.Fatalf("buy %d: %v", i, state(s))
		}
		buys = append(buys, s)
	}
	waitingBuy := open(t, vms[1], "/buy", "10.0.0.2:1")
	if state(waitingBuy) != wasmhost.StreamPaused {
		t.Fatalf("a fourth buy: %v, want it waiting (3 of 4 slots are the buys')", state(waitingBuy))
	}
	login := open(t, vms[0], "/login", "10.0.0.3:1")
	if state(login) != wasmhost.StreamUpstream {
		t.Fatalf("a login with the buys at their cap: %v, want it let in at once", state(login))
	}
	if c, ok := login.FilterState("sluice_class"); !ok || c != "login" {
		t.Errorf("login's sluice_class %q %v", c, ok)
	}
	if c, ok := buys[0].FilterState("sluice_class"); !ok || c != "default" {
		t.Errorf("buy's sluice_class %q %v", c, ok)
	}
	waitingLogin := open(t, vms[1], "/login", "10.0.0.4:1")
	if state(waitingLogin) != wasmhost.StreamPaused {
		t.Fatalf("a second login over the limit: %v", state(waitingLogin))
	}
	h.AdvanceClock(20 * time.Millisecond)
	m := h.Metrics()
	if m.Gauge("sluice.class.store.default.in_flight") != 3 || m.Gauge("sluice.class.store.login.in_flight") != 1 ||
		m.Gauge("sluice.class.store.default.queued") != 1 || m.Gauge("sluice.class.store.login.queued") != 1 {
		t.Errorf("class gauges: default %d/%d, login %d/%d", m.Gauge("sluice.class.store.default.in_flight"), m.Gauge("sluice.class.store.default.queued"),
			m.Gauge("sluice.class.store.login.in_flight"), m.Gauge("sluice.class.store.login.queued"))
	}
	// A buy's slot frees: the waiting login gets it, not the older buy.
	respond(t, buys[0])
	h.AdvanceClock(20 * time.Millisecond)
	if state(waitingLogin) != wasmhost.StreamUpstream || state(waitingBuy) != wasmhost.StreamPaused {
		t.Fatalf("after a slot freed: login %v, buy %v; want the login in", state(waitingLogin), state(waitingBuy))
	}
	// A login's slot frees: the buy is under its cap again.
	respond(t, login)
	h.AdvanceClock(20 * time.Millisecond)
	if state(waitingBuy) != wasmhost.StreamUpstream {
		t.Fatalf("buy after a login's slot freed: %v", state(waitingBuy))
	}
	// No max_delay left for a fifth: it waits and times out, counted as
	// refused in its class.
	late := open(t, vms[0], "/buy", "10.0.0.5:1")
	h.AdvanceClock(5100 * time.Millisecond)
	if r := late.Result(); r.Status != 429 {
		t.Fatalf("a buy that waited past max_delay: %v %d", state(late), r.Status)
	}
	h.AdvanceClock(time.Second)
	if got := h.Metrics().Counter("sluice.class.store.default.refused"); got != 1 {
		t.Errorf("default class refused %d, want 1", got)
	}
}

// TestIdleWorkerKeepsRuleGauges: the rule's in_flight and queued gauges are
// process-wide and the last worker to publish wins: a worker that never
// saw the rule's slots publishes nothing (its zeros would flap the gauges
// of the busy one every tick), as for the class gauges.
func TestIdleWorkerKeepsRuleGauges(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, classesConfig)
	var held []*wasmhost.Stream
	for i := 0; i < 3; i++ {
		s := open(t, vms[0], "/buy", "10.0.0.1:1")
		if state(s) != wasmhost.StreamUpstream {
			t.Fatalf("buy %d: %v", i, state(s))
		}
		held = append(held, s)
	}
	waiting := open(t, vms[0], "/buy", "10.0.0.2:1")
	if state(waiting) != wasmhost.StreamPaused {
		t.Fatalf("a fourth buy: %v, want it waiting", state(waiting))
	}
	for tick := 0; tick < 5; tick++ {
		h.AdvanceClock(20 * time.Millisecond)
		m := h.Metrics()
		if n, q := m.Gauge("sluice.rule.store.in_flight"), m.Gauge("sluice.rule.store.queued"); n != 3 || q != 1 {
			t.Fatalf("after %d ticks of both workers (one idle): rule in_flight %d queued %d, want 3 and 1", tick+1, n, q)
		}
	}
	respond(t, held[0])
	h.AdvanceClock(60 * time.Millisecond)
	if state(waiting) != wasmhost.StreamUpstream {
		t.Fatalf("the waiting buy after a release: %v", state(waiting))
	}
	if n := h.Metrics().Gauge("sluice.rule.store.in_flight"); n != 3 {
		t.Errorf("after a release (the waiting buy let in): rule in_flight %d, want 3", n)
	}
}
