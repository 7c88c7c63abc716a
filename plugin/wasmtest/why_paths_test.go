package wasmtest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

// "Telling operators and clients why" on every decision path
// (docs/configuration.md "Telling operators and clients why", "Responses";
// docs/operations.md Metrics, Access log; docs/configuration.md Responses).

// wantWhy checks the access-log filter state of s.
func wantWhy(t *testing.T, what string, s *wasmhost.Stream, decision, rule string) {
	t.Helper()
	d, ok1 := s.FilterState("sluice_decision")
	n, ok2 := s.FilterState("sluice_rule")
	if !ok1 || !ok2 || d != decision || n != rule {
		t.Errorf("%s: filter state decision %q (set %v) rule %q (set %v), want %q %q", what, d, ok1, n, ok2, decision, rule)
	}
}

// wantRejection checks a rejection: status, Retry-After >= 1, t ==
// Retry-After, Remaining 0, limit, policy, body and content type.
func wantRejection(t *testing.T, what string, r *wasmhost.Result, status int, mode, body, rule, limit, policy string, violated ...string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s: status %d, want %d (headers %v)", what, r.Status, status, r.Headers)
	}
	ra := r.Headers.Value("retry-after")
	if n, err := strconv.Atoi(ra); err != nil || n < 1 {
		t.Errorf("%s: retry-after %q", what, ra)
	}
	legacy, draft := mode == "both" || mode == "legacy", mode == "both" || mode == "draft"
	if r.Headers.Has("x-ratelimit-limit") != legacy || r.Headers.Has("x-ratelimit-remaining") != legacy || r.Headers.Has("x-ratelimit-reset") != legacy {
		t.Errorf("%s (%s): legacy headers %v", what, mode, r.Headers)
	}
	if r.Headers.Has("ratelimit") != draft || r.Headers.Has("ratelimit-policy") != draft {
		t.Errorf("%s (%s): draft headers %v", what, mode, r.Headers)
	}
	if legacy {
		if got := r.Headers.Value("x-ratelimit-limit"); got != limit {
			t.Errorf("%s: x-ratelimit-limit %q, want %q", what, got, limit)
		}
		if got := r.Headers.Value("x-ratelimit-remaining"); got != "0" {
			t.Errorf("%s: x-ratelimit-remaining %q, want 0", what, got)
		}
	}
	if draft {
		if got := r.Headers.Value("ratelimit"); got != fmt.Sprintf(`"%s";r=0;t=%s`, rule, ra) {
			t.Errorf("%s: ratelimit %q, retry-after %q: want t = Retry-After", what, got, ra)
		}
		if got := r.Headers.Value("ratelimit-policy"); got != policy {
			t.Errorf("%s: ratelimit-policy %q, want %q", what, got, policy)
		}
	}
	switch body {
	case "text":
		if ct := r.Headers.Value("content-type"); ct != "text/plain; charset=utf-8" {
			t.Errorf("%s: content-type %q", what, ct)
		}
		if string(r.Body) != "Too Many Requests: rate limit exceeded, retry after the time in Retry-After.\n" {
			t.Errorf("%s: text body %q", what, r.Body)
		}
	default:
		if ct := r.Headers.Value("content-type"); ct != "application/problem+json" {
			t.Errorf("%s: content-type %q", what, ct)
		}
		var doc struct {
			Type       string   `json:"type"`
			Status     int      `json:"status"`
			Violated   []string `json:"violated-policies"`
			RetryAfter int      `json:"retry-after"`
		}
		if err := json.Unmarshal(r.Body, &doc); err != nil {
			t.Fatalf("%s: body %q: %v", what, r.Body, err)
		}
		if doc.Type != "https://iana.org/assignments/http-problem-types#quota-exceeded" || doc.Status != status ||
			strings.Join(doc.Violated, ",") != strings.Join(violated, ",") || strconv.Itoa(doc.RetryAfter) != ra {
			t.Errorf("%s: body %s, want status %d violated %v retry-after %s", what, r.Body, status, violated, ra)
		}
	}
}

// wantCounters flushes and compares per-rule counters (name.outcome).
func wantCounters(t *testing.T, h *wasmhost.Host, want map[string]uint64) {
	t.Helper()
	h.AdvanceClock(1100 * time.Millisecond)
	for k, v := range want {
		if got := h.Metrics().Counter(k); got != v {
			t.Errorf("counter %s = %d, want %d", k, got, v)
		}
	}
}

// TestWhyRateEveryMode: admitted, then rejected at once by a rate rule,
// under every headers mode, status 503, both bodies.
func TestWhyRateEveryMode(t *testing.T) {
	for _, mode := range []string{"both", "legacy", "draft", "none"} {
		for _, body := range []string{"problem+json", "text"} {
			t.Run(mode+"/"+body, func(t *testing.T) {
				h := newHost(t)
				vm := workers(t, h, 1, fmt.Sprintf(`{"rules":[{"name":"r","limit":2,"window":"1m"}],"headers":%q,"status":503,"body":%q}`, mode, body))[0]
				ok := get(vm, "/", "10.0.0.1:1").Must(t)
				wantWhy(t, "admitted", ok.Stream, "allowed", "")
				if ok.Status != 200 || ok.Headers.Has("retry-after") {
					t.Errorf("admitted: %d %v", ok.Status, ok.Headers)
				}
				if mode == "both" || mode == "legacy" {
					if ok.Headers.Value("x-ratelimit-limit") != "2" || ok.Headers.Value("x-ratelimit-remaining") != "1" || ok.Headers.Value("x-ratelimit-reset") != "30" {
						t.Errorf("admitted legacy %v", ok.Headers)
					}
				} else if ok.Headers.Has("x-ratelimit-limit") {
					t.Errorf("admitted legacy in %s: %v", mode, ok.Headers)
				}
				if mode == "both" || mode == "draft" {
					if ok.Headers.Value("ratelimit") != `"r";r=1;t=30` || ok.Headers.Value("ratelimit-policy") != `"r";q=2;w=60` {
						t.Errorf("admitted draft %v", ok.Headers)
					}
				} else if ok.Headers.Has("ratelimit") {
					t.Errorf("admitted draft in %s: %v", mode, ok.Headers)
				}
				get(vm, "/", "10.0.0.1:1").Must(t)
				rej := get(vm, "/", "10.0.0.1:1").Must(t)
				wantWhy(t, "rejected", rej.Stream, "rejected", "r")
				wantRejection(t, "rejected", rej, 503, mode, body, "r", "2", `"r";q=2;w=60`, "r")
				wantCounters(t, h, map[string]uint64{"sluice.rule.r.allowed": 2, "sluice.rule.r.rejected": 1, "sluice.rule.r.delayed": 0})
				healthy(t, vm)
			})
		}
	}
}

// TestWhyNoMatchAndExempt: a request no rule matches and an exempt
// client: allowed, rule empty, no limit headers, no rule counter moves.
func TestWhyNoMatchAndExempt(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[{"name":"r","match":{"path_prefix":"/a"},"limit":1,"window":"1m"}],"exempt_cidrs":["10.9.0.0/16"]}`)[0]
	for i := 0; i < 3; i++ {
		for _, c := range []struct{ path, client string }{{"/b", "10.0.0.1:1"}, {"/a", "10.9.0.1:1"}} {
			r := get(vm, c.path, c.client).Must(t)
			wantWhy(t, c.path+" "+c.client, r.Stream, "allowed", "")
			if r.Status != 200 || r.Headers.Has("x-ratelimit-limit") || r.Headers.Has("ratelimit") || r.Headers.Has("retry-after") {
				t.Errorf("%s %s: %d %v", c.path, c.client, r.Status, r.Headers)
			}
		}
	}
	wantCounters(t, h, map[string]uint64{"sluice.rule.r.allowed": 0, "sluice.rule.r.rejected": 0, "sluice.exempt": 3})
	healthy(t, vm)
}

// TestWhyConcurrencyRejected: a concurrency rule without a queue
// rejects at once; the admitted response reports slots free.
func TestWhyConcurrencyRejected(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[{"name":"slots","algorithm":"concurrency","limit":2,"key":["path"]}]}`)[0]
	a := open(t, vm, "/buy", "10.0.0.1:1")
	b := open(t, vm, "/buy", "10.0.0.2:1")
	wantWhy(t, "a", a, "allowed", "")
	wantWhy(t, "b", b, "allowed", "")
	rej := open(t, vm, "/buy", "10.0.0.3:1").Result()
	wantWhy(t, "rejected", rej.Stream, "rejected", "slots")
	wantRejection(t, "rejected", rej, 429, "both", "problem+json", "slots", "2", `"slots";q=2;qu="concurrent-requests"`, "slots")
	ra := respond(t, a)
	if ra.Headers.Value("x-ratelimit-limit") != "2" || ra.Headers.Value("x-ratelimit-remaining") != "1" ||
		ra.Headers.Value("ratelimit-policy") != `"slots";q=2;qu="concurrent-requests"` {
		t.Errorf("first admitted: %v", ra.Headers)
	}
	respond(t, b)
	wantCounters(t, h, map[string]uint64{"sluice.rule.slots.allowed": 2, "sluice.rule.slots.rejected": 1})
	healthy(t, vm)
}

// TestWhyAdaptiveRejected: an adaptive rule at its limit rejects at
// once; the policy names the learnt limit and qu.
func TestWhyAdaptiveRejected(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[{"name":"cap","algorithm":"adaptive_concurrency","min_limit":1,"max_limit":1,"key":["path"]}]}`)[0]
	a := open(t, vm, "/buy", "10.0.0.1:1")
	wantWhy(t, "a", a, "allowed", "")
	rej := open(t, vm, "/buy", "10.0.0.2:1").Result()
	wantWhy(t, "rejected", rej.Stream, "rejected", "cap")
	wantRejection(t, "rejected", rej, 429, "both", "problem+json", "cap", "1", `"cap";q=1;qu="concurrent-requests"`, "cap")
	respond(t, a)
	wantCounters(t, h, map[string]uint64{"sluice.rule.cap.allowed": 1, "sluice.rule.cap.rejected": 1})
	healthy(t, vm)
}

// TestWhyRateHeld: held by a rate rule's max_delay, then released.
func TestWhyRateHeld(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[{"name":"pace","limit":10,"window":"1s","burst":1,"max_delay":"2s"}]}`)[0]
	first := get(vm, "/", "10.0.0.1:1").Must(t)
	wantWhy(t, "first", first.Stream, "allowed", "")
	held := get(vm, "/", "10.0.0.1:1").Must(t)
	if !held.Paused {
		t.Fatalf("not held: %d", held.Status)
	}
	wantWhy(t, "held", held.Stream, "delayed", "pace")
	h.AdvanceClock(150 * time.Millisecond)
	res := held.Stream.Finish()
	if res.Status != 200 || res.Headers.Has("retry-after") {
		t.Fatalf("released: %d %v", res.Status, res.Headers)
	}
	wantWhy(t, "released", held.Stream, "delayed", "pace")
	if res.Headers.Value("x-ratelimit-remaining") != "0" || res.Headers.Value("x-ratelimit-limit") != "10" ||
		!strings.HasPrefix(res.Headers.Value("ratelimit"), `"pace";r=0;t=`) {
		t.Errorf("released headers %v", res.Headers)
	}
	wantCounters(t, h, map[string]uint64{"sluice.rule.pace.allowed": 1, "sluice.rule.pace.delayed": 1, "sluice.rule.pace.rejected": 0})
	if g := h.Metrics().Gauge("sluice.held_requests"); g != 0 {
		t.Errorf("held gauge %d", g)
	}
	healthy(t, vm)
}

// TestWhyQueuePaths: queued by a concurrency rule then admitted, timed
// out (429), or its client gone.
func TestWhyQueuePaths(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[{"name":"store","algorithm":"concurrency","limit":1,"key":["path"],"max_delay":"300ms"}]}`)[0]
	a := open(t, vm, "/buy", "10.0.0.1:1")
	w := open(t, vm, "/buy", "10.0.0.2:1")
	wantState(t, "waiter", w, wasmhost.StreamPaused)
	h.AdvanceClock(50 * time.Millisecond)
	respond(t, a)
	h.AdvanceClock(20 * time.Millisecond)
	wantState(t, "waiter admitted", w, wasmhost.StreamUpstream)
	wantWhy(t, "waiter admitted", w, "delayed", "store")
	// gone, then timed out
	gone := open(t, vm, "/buy", "10.0.0.3:1")
	late := open(t, vm, "/buy", "10.0.0.4:1")
	gone.Close()
	if d, ok := gone.FilterState("sluice_decision"); ok {
		t.Logf("queued client gone: decision %q", d)
	}
	h.AdvanceClock(350 * time.Millisecond)
	r := late.Result()
	wantWhy(t, "timed out", late, "rejected", "store")
	wantRejection(t, "timed out", r, 429, "both", "problem+json", "store", "1", `"store";q=1;qu="concurrent-requests"`, "store")
	res := respond(t, w)
	if res.Headers.Value("x-ratelimit-limit") != "1" || res.Headers.Value("x-ratelimit-remaining") != "0" {
		t.Errorf("waiter's response %v", res.Headers)
	}
	wantCounters(t, h, map[string]uint64{"sluice.rule.store.allowed": 1, "sluice.rule.store.delayed": 1, "sluice.rule.store.rejected": 1})
	idle(t, h)
	healthy(t, vm)
}

// TestWhyQueuedThenHeld: queued by a concurrency rule, then held by a
// rate rule's delay.
func TestWhyQueuedThenHeld(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[
		{"name":"pace","limit":2,"window":"1s","burst":1,"max_delay":"3s"},
		{"name":"store","algorithm":"concurrency","limit":1,"key":["path"],"max_delay":"3s"}]}`)[0]
	a := open(t, vm, "/buy", "10.0.0.1:1")
	wantWhy(t, "a", a, "allowed", "")
	w := open(t, vm, "/buy", "10.0.0.1:1") // pace delays it 500ms, store queues it
	wantState(t, "w", w, wasmhost.StreamPaused)
	h.AdvanceClock(100 * time.Millisecond)
	respond(t, a)
	h.AdvanceClock(20 * time.Millisecond)
	// Admitted by store after ~120ms, still held by pace until 500ms.
	wantState(t, "w still held", w, wasmhost.StreamPaused)
	d, _ := w.FilterState("sluice_decision")
	n, _ := w.FilterState("sluice_rule")
	t.Logf("queued then held: %q %q", d, n)
	h.AdvanceClock(500 * time.Millisecond)
	wantState(t, "w released", w, wasmhost.StreamUpstream)
	wantWhy(t, "w released", w, "delayed", "pace")
	res := respond(t, w)
	if res.Status != 200 || res.Headers.Has("retry-after") {
		t.Errorf("w response %d %v", res.Status, res.Headers)
	}
	for _, k := range []string{"x-ratelimit-remaining"} {
		if v, err := strconv.Atoi(res.Headers.Value(k)); err != nil || v < 0 {
			t.Errorf("%s %q", k, res.Headers.Value(k))
		}
	}
	wantCounters(t, h, map[string]uint64{"sluice.rule.pace.allowed": 1, "sluice.rule.pace.delayed": 1,
		"sluice.rule.store.allowed": 1, "sluice.rule.store.delayed": 1})
	idle(t, h)
	healthy(t, vm)
}

// TestWhyShadowEachPath: a shadow rule that would refuse, on an
// admitted request, a rejected one, a held one, and a shadow concurrency
// rule.
func TestWhyShadowEachPath(t *testing.T) {
	t.Run("rate", func(t *testing.T) {
		h := newHost(t)
		vm := workers(t, h, 1, `{"rules":[
			{"name":"watch","limit":1,"window":"1m","shadow":true},
			{"name":"pace","match":{"path_prefix":"/p"},"limit":10,"window":"1s","burst":1,"max_delay":"2s"},
			{"name":"hard","match":{"path_prefix":"/h"},"limit":1,"window":"1m"}]}`)[0]
		get(vm, "/x", "10.0.0.1:1").Must(t)
		r := get(vm, "/x", "10.0.0.1:1").Must(t)
		wantWhy(t, "shadow only", r.Stream, "shadow_rejected", "watch")
		if r.Status != 200 || r.Headers.Value("x-ratelimit-shadow") != `"watch";retry-after=60` {
			t.Errorf("shadow only: %d %v", r.Status, r.Headers)
		}
		get(vm, "/h", "10.0.0.1:1").Must(t)
		rej := get(vm, "/h", "10.0.0.1:1").Must(t)
		wantWhy(t, "shadow+rejected", rej.Stream, "rejected", "hard")
		wantRejection(t, "shadow+rejected", rej, 429, "both", "problem+json", "hard", "1", `"hard";q=1;w=60`, "hard")
		get(vm, "/p", "10.0.0.1:1").Must(t)
		held := get(vm, "/p", "10.0.0.1:1").Must(t)
		if !held.Paused {
			t.Fatalf("not held: %d", held.Status)
		}
		wantWhy(t, "shadow+held", held.Stream, "delayed", "pace")
		h.AdvanceClock(150 * time.Millisecond)
		held.Stream.Finish()
		// The shadow rule counts what it would have admitted too (the
		// first request), so that its refusals have a base to compare with.
		wantCounters(t, h, map[string]uint64{"sluice.rule.watch.shadow_rejected": 5, "sluice.rule.hard.rejected": 1,
			"sluice.rule.pace.delayed": 1, "sluice.rule.watch.rejected": 0, "sluice.rule.watch.delayed": 0,
			"sluice.rule.watch.allowed": 1})
		healthy(t, vm)
	})
	t.Run("concurrency", func(t *testing.T) {
		h := newHost(t)
		vm := workers(t, h, 1, `{"rules":[{"name":"trial","algorithm":"concurrency","limit":1,"key":["path"],"shadow":true}]}`)[0]
		a := open(t, vm, "/buy", "10.0.0.1:1")
		b := open(t, vm, "/buy", "10.0.0.2:1")
		wantState(t, "b", b, wasmhost.StreamUpstream)
		wantWhy(t, "shadow conc", b, "shadow_rejected", "trial")
		rb := respond(t, b)
		if rb.Headers.Value("x-ratelimit-shadow") == "" {
			t.Errorf("shadow conc: no x-ratelimit-shadow: %v", rb.Headers)
		}
		t.Logf("shadow concurrency responses: a %v / b %v", respond(t, a).Headers, rb.Headers)
		wantCounters(t, h, map[string]uint64{"sluice.rule.trial.shadow_rejected": 1, "sluice.rule.trial.rejected": 0,
			"sluice.rule.trial.allowed": 1})
		healthy(t, vm)
	})
}

// TestWhyAllowedCountsOnlyAdmitted: "sluice.rule.<rule>.allowed:
// admitted at once" (docs/operations.md, Metrics). A request that a
// first concurrency rule would admit but a second rejects was not
// admitted: the first rule's allowed counter must not count it (the rate
// rules' counters count a request only once every rule admitted it).
func TestWhyAllowedCountsOnlyAdmitted(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[
		{"name":"rate","limit":100,"window":"1m"},
		{"name":"wide","algorithm":"concurrency","limit":10,"key":["path"]},
		{"name":"narrow","algorithm":"concurrency","limit":1,"key":["method"]}]}`)[0]
	a := open(t, vm, "/buy", "10.0.0.1:1")
	wantState(t, "a", a, wasmhost.StreamUpstream)
	for i := 0; i < 3; i++ {
		r := open(t, vm, "/buy", fmt.Sprintf("10.0.0.%d:1", i+2)).Result()
		if r.Status != 429 {
			t.Fatalf("request %d: %d, want 429 by narrow", i, r.Status)
		}
		wantWhy(t, "rejected", r.Stream, "rejected", "narrow")
	}
	respond(t, a)
	// 1 admitted, 3 rejected by narrow: rate counted 1 allowed; wide
	// admitted exactly one request.
	wantCounters(t, h, map[string]uint64{"sluice.rule.rate.allowed": 1, "sluice.rule.narrow.allowed": 1, "sluice.rule.narrow.rejected": 3,
		"sluice.rule.wide.allowed": 1, "sluice.rule.wide.rejected": 0})
	healthy(t, vm)
}

// TestWhyDelayedCountsOnlyAdmitted: "sluice.rule.<rule>.delayed:
// admitted after being held" (docs/operations.md, Metrics). A request that
// waited in one concurrency rule's queue, got its slot, then queued again
// on a later rule and timed out there (429) was never admitted: the first
// rule's delayed counter (and wait_ms) must not count it.
func TestWhyDelayedCountsOnlyAdmitted(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[
		{"name":"buy","match":{"path_prefix":"/buy"},"algorithm":"concurrency","limit":1,"key":["path"],"max_delay":"2s"},
		{"name":"shop","algorithm":"concurrency","limit":1,"key":["method"],"max_delay":"2s"}]}`)[0]
	x := open(t, vm, "/buy", "10.0.0.1:1") // holds buy's and shop's slots
	y := open(t, vm, "/buy", "10.0.0.2:1") // queued on buy
	wantState(t, "x", x, wasmhost.StreamUpstream)
	wantState(t, "y", y, wasmhost.StreamPaused)
	respond(t, x)
	z := open(t, vm, "/home", "10.0.0.3:1") // takes shop's slot before y's turn
	wantState(t, "z", z, wasmhost.StreamUpstream)
	h.AdvanceClock(20 * time.Millisecond) // y gets buy's slot, queues on shop
	wantState(t, "y on shop", y, wasmhost.StreamPaused)
	h.AdvanceClock(2100 * time.Millisecond)
	r := y.Result()
	if r.Status != 429 {
		t.Fatalf("y: %v %d, want 429", y.State(), r.Status)
	}
	wantWhy(t, "y", y, "rejected", "shop")
	respond(t, z)
	wantCounters(t, h, map[string]uint64{"sluice.rule.buy.allowed": 1, "sluice.rule.buy.delayed": 0, "sluice.rule.buy.wait_ms": 0,
		"sluice.rule.shop.allowed": 2, "sluice.rule.shop.rejected": 1})
	healthy(t, vm)
}

// TestWhyShadowConcurrencyHeaders: a shadow rule "count[s] and
// report[s] but never reject[s] or delay[s]" (docs/configuration.md, Plugin
// configuration); what it reports is x-ratelimit-shadow (docs/
// configuration.md, Responses). A shadow rate rule never appears in the
// limit headers; a shadow concurrency rule does, telling an admitted client
// "remaining 0" (which the SDK takes as exhausted and throttles on) for a
// rule that limits nothing, instead of the enforced rule's quota.
func TestWhyShadowConcurrencyHeaders(t *testing.T) {
	for _, c := range []struct{ name, shadow string }{
		{"rate", `{"name":"trial","limit":1,"window":"1m","shadow":true}`},
		{"concurrency", `{"name":"trial","algorithm":"concurrency","limit":1,"key":["path"],"shadow":true}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHost(t)
			vm := workers(t, h, 1, `{"rules":[{"name":"rate","limit":100,"window":"1m"},`+c.shadow+`]}`)[0]
			s := open(t, vm, "/buy", "10.0.0.1:1")
			wantWhy(t, "first", s, "allowed", "")
			res := respond(t, s)
			if res.Headers.Value("ratelimit-policy") != `"rate";q=100;w=60` || res.Headers.Value("x-ratelimit-remaining") != "99" {
				t.Errorf("admitted under shadow %s rule: headers %v, want the enforced rule rate's (remaining 99)", c.name, res.Headers)
			}
			healthy(t, vm)
		})
	}
}

// TestWhyHeldQueueFull: a worker already holding maxHeld (4096)
// requests rejects the next one that would be held "with Retry-After
// instead" (plugin/held.go). Then it is a rejection: the rule's rejected
// counter counts it, its delayed counter does not (docs/operations.md
// Metrics: delayed = "admitted after being held"), and the rule's charge
// is given back ("a request rejected by one rule is not charged by the
// others", and not by the rule itself either).
func TestWhyHeldQueueFull(t *testing.T) {
	if testing.Short() {
		t.Skip("4097 requests")
	}
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[{"name":"pace","limit":100000,"window":"1s","burst":1,"max_delay":"10s"}]}`)[0]
	get(vm, "/", "10.0.0.1:1").Must(t)
	var held []*wasmhost.Result
	var rej *wasmhost.Result
	for i := 0; i < 4097 && rej == nil; i++ {
		r := get(vm, "/", "10.0.0.1:1").Must(t)
		if r.Paused {
			held = append(held, r)
		} else {
			rej = r
		}
	}
	if rej == nil || rej.Status != 429 {
		t.Fatalf("after %d held: no rejection", len(held))
	}
	t.Logf("%d held, then %d", len(held), rej.Status)
	wantWhy(t, "held queue full", rej.Stream, "rejected", "pace")
	wantRejection(t, "held queue full", rej, 429, "both", "problem+json", "pace", "100000", `"pace";q=100000;w=1`, "pace")
	for _, r := range held {
		r.Stream.Close()
	}
	wantCounters(t, h, map[string]uint64{"sluice.rule.pace.rejected": 1, "sluice.rule.pace.delayed": uint64(len(held))})
	healthy(t, vm)
}
