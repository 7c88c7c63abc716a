package sdk

import (
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sdk/header"
)

// fieldCount counts the fields of struct type t, those of embedded
// structs included (they are the struct's own to read).
func fieldCount(t reflect.Type) int {
	n := 0
	for i := range t.NumField() {
		if f := t.Field(i); f.Anonymous && f.Type.Kind() == reflect.Struct {
			n += fieldCount(f.Type)
		} else {
			n++
		}
	}
	return n
}

// TestViewFields: a view composes the small types that own each rule's
// state (cooldown, quota, shape, ...) rather than holding their fields:
// at most 15 fields, embedded structs counted field by field.
func TestViewFields(t *testing.T) {
	if n := fieldCount(reflect.TypeFor[view]()); n > 15 {
		t.Errorf("view has %d fields, want at most 15", n)
	}
}

// TestQuotaWait: a spent quota holds a request until the next token of a
// token bucket, when that comes before the reset; else until the reset,
// and then the slide is asked (and may free requests sooner); a spent
// quota whose reset has passed is unknown again.
func TestQuotaWait(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	spent := func() quota {
		q := newQuota()
		q.set(0, t0, t0.Add(time.Second), true)
		return q
	}
	q := spent()
	if w, slide := q.wait(t0, 100*time.Millisecond); w != 100*time.Millisecond || slide {
		t.Errorf("token bucket: wait %v slide %v, want 100ms false", w, slide)
	}
	q = spent()
	if w, slide := q.wait(t0, 2*time.Second); w != time.Second || !slide {
		t.Errorf("token after the reset: wait %v slide %v, want 1s true", w, slide)
	}
	if w := q.slide(t0, t0.Add(300*time.Millisecond), 0); w != 300*time.Millisecond {
		t.Errorf("slide frees one at 300ms: wait %v", w)
	}
	if w := q.slide(t0, t0.Add(2*time.Second), 0); w != time.Second {
		t.Errorf("slide frees one after the reset: wait %v, want the reset's 1s", w)
	}
	if w := q.slide(t0, t0, 3); w != 0 || q.spentUntilReset(t0) {
		t.Errorf("slide frees 3 now: wait %v, spent %v", w, q.spentUntilReset(t0))
	}
	q.take() // on the slide: counted in the quota that follows
	q.restore(t0.Add(time.Second), 10, time.Second)
	if w, _ := q.wait(t0.Add(time.Second), 0); w != 0 || q.budget != 9 {
		t.Errorf("restored with one slid request: wait %v budget %d, want 0 and 9", w, q.budget)
	}
	q = spent()
	if w, slide := q.wait(t0.Add(time.Second), 0); w != 0 || slide || q.budget != -1 {
		t.Errorf("past the reset: wait %v slide %v budget %d, want 0 false -1", w, slide, q.budget)
	}
}

// TestLowest: the lowest Remaining and the latest reset of a crowd's
// answers, in any order; taken once.
func TestLowest(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newLowest()
	if _, _, ok := l.take(t0); ok || l.open() {
		t.Fatal("an empty set has an answer")
	}
	l.note(5, t0.Add(time.Second))
	l.note(2, t0)
	l.note(7, t0.Add(2*time.Second))
	if r, end, ok := l.take(t0); !ok || r != 2 || !end.Equal(t0.Add(2*time.Second)) {
		t.Errorf("take = %d %v %v, want 2 at +2s", r, end, ok)
	}
	if l.open() {
		t.Error("the set is not emptied by take")
	}
}

// TestStrayAnswerAfterSettle: two answers of a crowd the view did not
// hold (sent before the route was known to be its policy's) each find
// nothing else in flight to the host, as both read the host's count
// before either reached the view: the first, Remaining 0, settles the
// crowd; the second, counted earlier by the server, says 11 left. It was
// sent before the settle, so it may only lower the budget: made a crowd of
// its own and settled, it raised the budget to 11 of a quota the server
// had spent, and the requests it let go were refused.
func TestStrayAnswerAfterSettle(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0.Add(20 * time.Millisecond)
	v := newView("api", 1, 1, false)
	answer := func(remaining int) header.Info {
		return header.Info{Has: header.HasLimit | header.HasRemaining | header.HasReset | header.HasWindow,
			Limit: 50, Remaining: remaining, Reset: 4 * time.Second, Window: 5 * time.Second}
	}
	unheld := ticket{sent: t0}
	v.observe(unheld, now, 200, answer(0), 0)
	v.observe(unheld, now, 200, answer(11), 0)
	v.mu.Lock()
	defer v.mu.Unlock()
	if w := v.waitLocked(now); w <= 0 {
		t.Errorf("the view lets a request go (budget %d) after the server said none is left", v.quota.budget)
	}
	// A request sent after the settle is the server's word on what is
	// left now.
	v.mu.Unlock()
	v.observe(ticket{sent: now}, now.Add(20*time.Millisecond), 200, answer(11), 0)
	v.mu.Lock()
	if w := v.waitLocked(now.Add(20 * time.Millisecond)); w > 0 || v.quota.budget != 11 {
		t.Errorf("after a fresh answer: wait %v, budget %d, want 0 and 11", w, v.quota.budget)
	}
}

// TestUnheldCrowdCountedInOneStep: ten requests go out blind to a host
// that has named no policy yet, and each answer names the policy "api":
// its view did not hold them (see host.observeUnheld). The server counted
// them in the reverse of the order their answers reach the view, so the
// first to reach it says 19 left and the last 10: 10 is what the server
// has left once every answer has come. Each answer reaches the view while
// the one before it is between the host-level view and the policy's
// (h.between): when the requests in flight were counted there, outside the
// view's lock, each answer but the first to reach the view counted the
// others still in flight, lowered the budget by them after the crowd was
// settled, and left 1 where the server had 10.
func TestUnheldCrowdCountedInOneStep(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var hs hosts
	var rs routes
	h := hs.get("api.test", t0, nil, false)
	k := routeOf(h.id, "GET", "/items")
	acquire := func(now time.Time) (g governing, ok bool) {
		pl := places{ticket: h.tickets.Add(1)}
		h.govern(&rs, k, &g)
		_, ok = h.acquire(&g, &pl, now, true, time.Minute)
		return g, ok
	}
	const n = 10
	gs := make([]governing, n)
	for i := range gs {
		var ok bool
		if gs[i], ok = acquire(t0); !ok {
			t.Fatalf("blind request %d not admitted", i)
		}
	}
	now := t0.Add(20 * time.Millisecond)
	answer := func(i int) header.Info {
		return header.Info{Has: header.HasLimit | header.HasRemaining | header.HasReset | header.HasWindow,
			Policy: "api", Limit: 50, Remaining: n + i, Reset: 4 * time.Second, Window: 5 * time.Second}
	}
	next := 1
	h.between = func() {
		if i := next; i < n {
			next++
			h.observe(&rs, k, false, &gs[i], now, 200, answer(i), nil)
		}
	}
	h.observe(&rs, k, false, &gs[0], now, 200, answer(0), nil)
	h.between = nil
	admitted := 0
	for admitted <= 50 {
		if _, ok := acquire(now); !ok {
			break
		}
		admitted++
	}
	if admitted != n {
		t.Errorf("after the crowd's answers the view admits %d requests, want the %d the server has left", admitted, n)
	}
}
