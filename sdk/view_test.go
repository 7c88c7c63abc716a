package sdk

import (
	"reflect"
	"testing"
	"time"
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
	if _, _, ok := l.take(); ok || l.open() {
		t.Fatal("an empty set has an answer")
	}
	l.note(5, t0.Add(time.Second))
	l.note(2, t0)
	l.note(7, t0.Add(2*time.Second))
	if r, end, ok := l.take(); !ok || r != 2 || !end.Equal(t0.Add(2*time.Second)) {
		t.Errorf("take = %d %v %v, want 2 at +2s", r, end, ok)
	}
	if l.open() {
		t.Error("the set is not emptied by take")
	}
}
