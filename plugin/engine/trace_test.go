package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// stepNames name the steps in the recorded routes.
var stepNames = [...]string{"match", "exempt", "local", "local-refuse", "slot", "queue", "dequeue", "slot-refuse",
	"global", "call", "global-refuse", "refund", "admit", "reject", "settle", "release"}

// recorder is a Tracer that writes the route as "step rule" items.
type recorder struct{ steps []string }

func (r *recorder) Step(s Step, rule int) {
	if rule < 0 {
		r.steps = append(r.steps, stepNames[s])
		return
	}
	r.steps = append(r.steps, fmt.Sprintf("%s %d", stepNames[s], rule))
}

// take returns the route recorded since the last take.
func (r *recorder) take() string {
	s := strings.Join(r.steps, ", ")
	r.steps = r.steps[:0]
	return s
}

func wantRoute(t *testing.T, rec *recorder, what, want string) {
	t.Helper()
	if got := rec.take(); got != want {
		t.Errorf("%s:\n got  %s\n want %s", what, got, want)
	}
}

// TestRouteRefund traces requests through the local rate rules: both
// charge the first; the second rule refuses the second request, which is
// refused and gets back what the first rule charged it.
func TestRouteRefund(t *testing.T) {
	e := New(mustConfig(t, `{"rules":[
		{"name":"wide","limit":100,"window":"1h","key":["client_ip"]},
		{"name":"narrow","limit":1,"window":"1h","key":["client_ip"]}]}`), newMemStore(), 1, wallClock)
	rec := &recorder{}
	e.SetTracer(rec)
	if v := e.Decide(req("/", "GET", "10.0.0.1:1"), t0); v.Outcome != Allow {
		t.Fatalf("first request: %v", v.Outcome)
	}
	wantRoute(t, rec, "first request", "match 0, match 1, local 0, local 1, admit")
	left := func() int64 {
		fp := e.fingerprint(&e.cfg.Rules[0], &requestInfo{req: req("/", "GET", "10.0.0.1:1")})
		d, _, err := e.Table().Update(Peek, fp, 0, &e.cfg.Rules[0].Limit, t0, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}
	before := left()
	if v := e.Decide(req("/", "GET", "10.0.0.1:1"), t0); v.Outcome != Reject {
		t.Fatalf("second request: %v", v.Outcome)
	}
	wantRoute(t, rec, "second request", "match 0, match 1, local 0, local-refuse 1, reject 1, refund 0")
	// The refund is real: the refused request left rule 0 as it found it.
	if after := left(); after != before {
		t.Errorf("rule 0: %d left before the refused request, %d after; want its charge given back", before, after)
	}
}

// TestRouteQueue traces requests through a concurrency rule's queue: the
// first takes the slot, the second waits; the first's stream ends and
// releases it, the second leaves the queue with it and is admitted, and
// releases it in turn.
func TestRouteQueue(t *testing.T) {
	e := New(mustConfig(t, `{"rules":[
		{"name":"rate","limit":100,"window":"1h","key":["client_ip"]},
		{"name":"slot","algorithm":"concurrency","limit":1,"key":["path"],"max_delay":"10s"}]}`), newMemStore(), 1, wallClock)
	rec := &recorder{}
	e.SetTracer(rec)
	now := t0
	v1 := e.Decide(streamReq{req("/buy", "POST", "10.0.0.1:1"), 1}, now)
	if v1.Outcome != Allow {
		t.Fatalf("first request: %v", v1.Outcome)
	}
	wantRoute(t, rec, "first request", "match 0, match 1, local 0, slot 1, admit")
	v2 := e.Decide(streamReq{req("/buy", "POST", "10.0.0.2:1"), 2}, now)
	if v2.Outcome != Queue {
		t.Fatalf("second request: %v, want Queue", v2.Outcome)
	}
	wantRoute(t, rec, "second request", "match 0, match 1, local 0, queue 1")
	now += int64(10 * time.Millisecond)
	e.Release(v1.Slots, now)
	wantRoute(t, rec, "first stream's end", "release 1")
	evs := e.Poll(now, nil)
	if len(evs) != 1 || evs[0].ID != 2 || evs[0].Verdict.Outcome != Allow {
		t.Fatalf("poll: %+v, want stream 2 admitted", evs)
	}
	wantRoute(t, rec, "poll", "dequeue 1, admit")
	e.Release(evs[0].Verdict.Slots, now)
	wantRoute(t, rec, "second stream's end", "release 1")
}

// TestRouteGlobal traces requests through a global rule: the first waits
// for a call and is admitted by its answer; the next is admitted from the
// lease and charged after its response (settle); once the service's
// budget is spent, the global rule refuses, and the local rule's charge is
// given back.
func TestRouteGlobal(t *testing.T) {
	e := New(mustConfig(t, `{"rules":[
		{"name":"loc","limit":100,"window":"1h","key":["client_ip"]},
		{"name":"g","scope":"global","limit":2,"window":"1m","key":["header:x-client"],"cost":{"response_header":"x-cost"}}],
		"global":{"cluster":"ratelimit","timeout":"50ms"}}`), newMemStore(), 7, wallClock)
	now := t0 + int64(time.Second)
	e.Now = func() int64 { return now }
	svc := &fakeService{limit: 2}
	var decided []Verdict
	e.SetGlobal(svc, func(p *Pending, v *Verdict) { decided = append(decided, *v) })
	rec := &recorder{}
	e.SetTracer(rec)
	r := req("/", "GET", "10.0.0.1:1", "x-client", "a")
	if v := e.Decide(r, now); v.Outcome != Call {
		t.Fatalf("first request: %v, want Call", v.Outcome)
	}
	wantRoute(t, rec, "first request", "match 0, match 1, local 0, call 1")
	svc.deliver()
	if len(decided) != 1 || decided[0].Outcome != Allow {
		t.Fatalf("after the answer: %+v", decided)
	}
	wantRoute(t, rec, "the call's answer", "global 1, admit")
	e.Settle(&decided[0], req("/", "GET", "", "x-cost", "1"), now)
	wantRoute(t, rec, "first response", "settle 1")
	for i := 0; i < 4; i++ {
		v := e.Decide(r, now)
		if v.Outcome == Call {
			svc.deliver()
			continue
		}
		if v.Outcome == Reject {
			break
		}
		e.Settle(&v, req("/", "GET", "", "x-cost", "1"), now)
	}
	got := rec.take()
	t.Logf("the next requests: %s", got)
	if !strings.Contains(got, "global-refuse 1, reject 1, refund 0") {
		t.Errorf("requests past the service's limit: %s\n want a global refusal refunding rule 0", got)
	}
}
