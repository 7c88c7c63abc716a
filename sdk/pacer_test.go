//go:build go1.25

package sdk

import (
	"testing"
	"time"
)

// TestPacerRetimes: the turns not yet due follow the rate. Five turns
// taken at 10/s (empty bucket) are due every 100 ms; cut to 2/s they are
// due every 500 ms, in the same order, and the holders are woken (one
// whose deadline the later time passes gives up at once); a creep of a few
// percent wakes nobody; raised to 20/s they are due every 50 ms, and the
// holders are woken. A turn given back moves the ones
// behind it up one place; a retry's turn goes first in line.
func TestPacerRetimes(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	p := newPacer(t0, 100*time.Millisecond, 1, true)
	var ts []*turn
	for i := range 5 {
		tk, d := p.reserve(t0, false, false)
		if want := time.Duration(i+1) * 100 * time.Millisecond; tk == nil || d != want {
			t.Fatalf("turn %d: %v, want %v", i, d, want)
		}
		ts = append(ts, tk)
	}
	moved := p.changed()
	due := func(want ...time.Duration) {
		t.Helper()
		for i, tk := range ts {
			if d := p.delay(tk, t0); d != want[i] {
				t.Errorf("turn %d due in %v, want %v", i, d, want[i])
			}
		}
	}
	p.set(t0, 500*time.Millisecond, 1)
	due(500*time.Millisecond, time.Second, 1500*time.Millisecond, 2*time.Second, 2500*time.Millisecond)
	select {
	case <-moved:
	default:
		t.Error("a cut did not wake the holders (one whose deadline the new time passes must give up now)")
	}
	moved = p.changed()
	p.set(t0, 510*time.Millisecond, 1)
	select {
	case <-moved:
		t.Error("a creep of 2% woke the holders")
	default:
	}
	p.set(t0, 50*time.Millisecond, 1)
	due(50*time.Millisecond, 100*time.Millisecond, 150*time.Millisecond, 200*time.Millisecond, 250*time.Millisecond)
	select {
	case <-moved:
	default:
		t.Error("a raise did not wake the holders")
	}
	p.cancel(ts[1], t0)
	ts = append(ts[:1], ts[2:]...)
	due(50*time.Millisecond, 100*time.Millisecond, 150*time.Millisecond, 200*time.Millisecond)
	moved = p.changed()
	if tk, d := p.reserve(t0, true, false); d != 50*time.Millisecond || p.delay(ts[0], t0) != 100*time.Millisecond {
		t.Errorf("a retry's turn in %v (first %v), want first in line", d, p.delay(ts[0], t0))
	} else {
		ts = append([]*turn{tk}, ts...)
	}
	select {
	case <-moved:
	default:
		t.Error("a retry's turn put the others one later without waking their holders")
	}
	// Time passes: the turns due are forgotten, the others keep their times.
	at := t0.Add(120 * time.Millisecond)
	if d := p.delay(ts[2], at); d != 30*time.Millisecond {
		t.Errorf("third turn due in %v at +120ms, want 30ms", d)
	}
	if d := p.delay(ts[0], at); d != 0 {
		t.Errorf("a turn past due: %v", d)
	}
	// A full bucket stays full up to the new burst, an idle pacer admits
	// its burst at once.
	q := newPacer(t0, 100*time.Millisecond, 5, false)
	q.set(t0, 200*time.Millisecond, 3)
	for i := range 3 {
		if tk, d := q.reserve(t0, false, false); tk != nil || d != 0 {
			t.Errorf("burst turn %d: wait %v", i, d)
		}
	}
	if _, d := q.reserve(t0, false, false); d != 200*time.Millisecond {
		t.Errorf("past the burst: %v, want 200ms", d)
	}
}

// TestPacerGap: a turn reserved with a gap comes after an empty turn that
// nobody holds: first in line, it is due two turns after the front was,
// and the turns behind it three; given back, it gives back the empty turn
// too. With no line, it takes two of the pacer's turns (one at once, from
// a full bucket), and the next turn comes after both.
func TestPacerGap(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	p := newPacer(t0, 100*time.Millisecond, 1, true)
	var ts []*turn
	for range 3 {
		tk, _ := p.reserve(t0, false, false)
		ts = append(ts, tk)
	}
	due := func(want ...time.Duration) {
		t.Helper()
		for i, tk := range ts {
			if d := p.delay(tk, t0); d != want[i] {
				t.Errorf("turn %d due in %v, want %v", i, d, want[i])
			}
		}
	}
	retry, d := p.reserve(t0, true, true)
	if d != 200*time.Millisecond {
		t.Errorf("a retry's turn with a gap, first in line: due in %v, want 200ms (after an empty turn at 100ms)", d)
	}
	due(300*time.Millisecond, 400*time.Millisecond, 500*time.Millisecond)
	p.cancel(retry, t0)
	due(100*time.Millisecond, 200*time.Millisecond, 300*time.Millisecond)
	if len(p.line) != 3 {
		t.Errorf("%d turns in line after the retry gave its turn back, want 3", len(p.line))
	}

	q := newPacer(t0, 100*time.Millisecond, 1, false)
	if _, d := q.reserve(t0, true, true); d != 100*time.Millisecond {
		t.Errorf("with no line, a retry's turn with a gap due in %v, want 100ms", d)
	}
	if _, d := q.reserve(t0, false, false); d != 200*time.Millisecond {
		t.Errorf("the next turn due in %v, want 200ms", d)
	}
}
