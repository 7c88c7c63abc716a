package flight

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/shared/limit"
)

// memTable is a Table of one worker's own: each key's state per region in
// a map, with no buckets or leases of other workers (the engine's Table is
// tested in package engine; this tests Rules through its boundary).
type memTable struct {
	states map[[2]uint64]limit.State
	values map[string][]byte
}

func newMemTable() *memTable {
	return &memTable{states: map[[2]uint64]limit.State{}, values: map[string][]byte{}}
}

func (m *memTable) Modify(fp uint64, region int, onlyOverflow bool, now int64, mod Modifier) (int, error) {
	k := [2]uint64{uint64(region), fp}
	next, _, write := mod.Modify(m.states[k], now, false)
	if write {
		m.states[k] = next
	}
	return 0, nil
}

func (m *memTable) LoadValue(key string, size int, buf []byte) ([]byte, uint32, error) {
	v, ok := m.values[key]
	if !ok || len(v) != size {
		clear(buf[:size])
		return buf[:size], 1, nil
	}
	return append(buf[:0], v...), 1, nil
}

func (m *memTable) StoreValue(key string, val []byte, _ uint32) (bool, error) {
	m.values[key] = append([]byte(nil), val...)
	return false, nil
}

func (m *memTable) Contended() {}

func newRules(t *testing.T, doc string) (*Rules, *AdaptiveStats) {
	t.Helper()
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	st := &AdaptiveStats{}
	r := NewRules(cfg, newMemTable(), 8, st)
	return &r, st
}

var t0 = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC).UnixNano()

// TestRulesSlots: a concurrency rule's slots through Rules alone: two
// taken, the third queued with a ticket, admitted by a poll once one is
// released; the hold time observed; nothing held at the end.
func TestRulesSlots(t *testing.T) {
	r, _ := newRules(t, `{"rules":[{"name":"c","algorithm":"concurrency","limit":2,"max_delay":"1s"}]}`)
	now := t0
	var held []SlotRef
	for i := range 2 {
		tk, err := r.Acquire(Pending{Rule: 0, FP: 7}, r.QueueFull(), now)
		if err != nil || !tk.Admitted {
			t.Fatalf("acquisition %d: %+v, %v", i, tk, err)
		}
		s, rem := r.Take(&tk, 0, now)
		if rem != int64(1-i) {
			t.Errorf("acquisition %d leaves %d free, want %d", i, rem, 1-i)
		}
		held = append(held, s)
	}
	tk, err := r.Acquire(Pending{Rule: 0, FP: 7}, r.QueueFull(), now)
	if err != nil || tk.Admitted || !tk.Queued {
		t.Fatalf("third acquisition: %+v, %v: want queued", tk, err)
	}
	w := &Waiter{ID: 3, Deadline: now + int64(time.Second), Arrived: now, Key: tk.Key, Ticket: tk.Ticket}
	r.Enqueue(w)
	if r.HeldSlots() != 2 || r.Waiting() != 1 {
		t.Fatalf("held %d, waiting %d: want 2, 1", r.HeldSlots(), r.Waiting())
	}
	now += int64(100 * time.Millisecond)
	r.PollStart()
	if got, _, _ := r.PollNext(now); got != nil {
		t.Fatalf("poll with every slot held gave %+v", got)
	}
	r.PollEnd(now)
	if err := r.Release(&held[0], now); err != nil {
		t.Fatal(err)
	}
	if r.HoldEstimate(0) != 100*time.Millisecond {
		t.Errorf("hold estimate %v, want 100ms", r.HoldEstimate(0))
	}
	r.PollStart()
	got, ptk, admitted := r.PollNext(now)
	if got != w || !admitted {
		t.Fatalf("poll after a release: %+v admitted %v, want the waiter admitted", got, admitted)
	}
	s, _ := r.Take(&ptk, time.Duration(now-w.Arrived), now)
	if next, _, _ := r.PollNext(now); next != nil {
		t.Fatalf("second waiter %+v from a queue of one", next)
	}
	r.PollEnd(now)
	for _, s := range []SlotRef{held[1], s} {
		if err := r.Release(&s, now); err != nil {
			t.Fatal(err)
		}
	}
	if r.HeldSlots() != 0 {
		t.Errorf("held %d after every release", r.HeldSlots())
	}
	if in, q := r.LastSlots(0, now); in != 0 || q != 0 {
		t.Errorf("last slots %d in flight, %d queued: want 0, 0", in, q)
	}
}

// TestJumpHash: keys spread over the buckets, and growing from n to n+1
// buckets moves only keys to the new one.
func TestJumpHash(t *testing.T) {
	moved := 0
	for k := uint64(1); k <= 1000; k++ {
		a, b := JumpHash(k*0x9e3779b97f4a7c15, 10), JumpHash(k*0x9e3779b97f4a7c15, 11)
		if a >= 10 || b >= 11 {
			t.Fatalf("key %d: buckets %d, %d out of range", k, a, b)
		}
		if a != b {
			if b != 10 {
				t.Fatalf("key %d moved from %d to %d, not to the new bucket", k, a, b)
			}
			moved++
		}
	}
	if moved < 50 || moved > 150 {
		t.Errorf("%d of 1000 keys moved to the 11th bucket, want about 91", moved)
	}
}
