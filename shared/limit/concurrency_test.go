package limit

import (
	"math/rand/v2"
	"testing"
	"time"
)

func mustConc(t *testing.T, n int64) Limit {
	t.Helper()
	l, err := NewConcurrency(n)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestSlotsEncodeRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 1000; i++ {
		s := Slots{Epoch: uint16(r.Uint32()), Cur: uint16(r.Uint32()), Prev: uint16(r.Uint32()),
			Head: uint16(r.Uint32()), Tail: uint16(r.Uint32()), Done: uint16(r.Uint32()), Last: r.Uint32()}
		if got := DecodeSlots(EncodeSlots(s)); got != s {
			t.Fatalf("%+v -> %+v", s, got)
		}
	}
	if DecodeSlots(State{}) != (Slots{}) || !DecodeSlots(State{}).Idle() {
		t.Fatal("the zero State is not an idle key")
	}
}

func TestNewConcurrencyRange(t *testing.T) {
	for _, n := range []int64{0, -1, MaxConcurrency + 1} {
		if _, err := NewConcurrency(n); err == nil {
			t.Errorf("NewConcurrency(%d) accepted", n)
		}
	}
	l := mustConc(t, MaxConcurrency)
	if l.Algorithm() != Concurrency || l.Algorithm().String() != "concurrency" || l.Window() != 0 {
		t.Fatalf("%v %v %v", l.Algorithm(), l.Algorithm().String(), l.Window())
	}
	if a, ok := ParseAlgorithm("concurrency"); !ok || a != Concurrency {
		t.Fatal("ParseAlgorithm(concurrency)")
	}
}

// TestConcurrencyAdmitsUpToLimit: limit admissions, then rejections; a
// release admits one more.
func TestConcurrencyAdmitsUpToLimit(t *testing.T) {
	l := mustConc(t, 3)
	now := 10 * sec
	var st State
	var d ConcDecision
	for i := 0; i < 3; i++ {
		if st, d = l.Acquire(st, now, 0, 0, 0); !d.Admitted || d.InFlight != int64(i+1) {
			t.Fatalf("acquire %d: %+v", i, d)
		}
	}
	if st2, d := l.Acquire(st, now, 0, 0, 0); d.Admitted || d.Queued || st2 != st {
		t.Fatalf("fourth: %+v (state changed: %v)", d, st2 != st)
	}
	st = l.Release(st, now+1, 1, d.Epoch)
	if _, d := l.Acquire(st, now+2, 0, 0, 0); !d.Admitted {
		t.Fatal("not admitted after a release")
	}
}

// TestConcurrencyLeases: slots nobody renews are dropped when the state
// enters the second epoch after their registration; renewed ones stay;
// releasing dropped slots changes nothing.
func TestConcurrencyLeases(t *testing.T) {
	l := mustConc(t, 10)
	t0 := 100*sec + sec/2
	var st State
	var dead, live ConcDecision
	for i := 0; i < 4; i++ {
		st, dead = l.Acquire(st, t0, 0, 0, 0) // a worker that will vanish
	}
	st, live = l.Acquire(st, t0, 0, 0, 0) // a worker that renews
	var liveEpoch uint16
	st, liveEpoch = l.Renew(st, t0+sec, 1, live.Epoch) // epoch +1: renewed
	if v := l.View(st, t0+sec); v.InFlight() != 5 {
		t.Fatalf("one epoch on: %d in flight, want 5", v.InFlight())
	}
	// Epochs are aligned on the clock: registered in epoch 100 (t0 is
	// 100.5 s), dropped when the state enters epoch 102.
	if v := l.View(st, 102*sec-1); v.InFlight() != 5 {
		t.Fatalf("just before the second epoch: %d", v.InFlight())
	}
	if v := l.View(st, 102*sec); v.InFlight() != 1 {
		t.Fatalf("second epoch: %d in flight, want 1 (the renewed slot)", v.InFlight())
	}
	st, liveEpoch = l.Renew(st, t0+2*sec, 1, liveEpoch)
	// The vanished worker's release, were it to come, changes nothing.
	if st2 := l.Release(st, t0+2*sec, 4, dead.Epoch); l.View(st2, t0+2*sec).InFlight() != 1 {
		t.Fatal("a release of dropped slots changed the count")
	}
	st = l.Release(st, t0+3*sec, 1, liveEpoch)
	if v := l.View(st, t0+3*sec); !v.Idle() {
		t.Fatalf("after the last release: %+v", v)
	}
	// A worker alive after all (late renewal) puts its slots back.
	st, _ = l.Renew(st, t0+5*sec, 2, dead.Epoch)
	if v := l.View(st, t0+5*sec); v.InFlight() != 2 {
		t.Fatalf("late renewal: %d", v.InFlight())
	}
}

// TestConcurrencyQueueOrder: tickets are admitted in order as slots free;
// a ticket cannot pass the tickets ahead of it, an abandoned ticket does not
// block, and a queue stuck on a vanished worker's tickets is skipped after
// Stall.
func TestConcurrencyQueueOrder(t *testing.T) {
	l := mustConc(t, 1)
	now := 50 * sec
	st, first := l.Acquire(State{}, now, 0, 0, 10)
	var tickets []uint16
	for i := 0; i < 4; i++ {
		var d ConcDecision
		st, d = l.Acquire(st, now, 0, 0, 10)
		if !d.Queued || d.Admitted {
			t.Fatalf("waiter %d: %+v", i, d)
		}
		tickets = append(tickets, d.Ticket)
	}
	st = l.Release(st, now+1, 1, first.Epoch)
	// Ticket 1 cannot take the slot: ticket 0 waits ahead of it.
	if _, d := l.Claim(st, now+2, tickets[1], 0, 0); d.Admitted {
		t.Fatal("ticket 1 passed ticket 0")
	}
	// Ticket 0 leaves (its client went away): ticket 1 may go.
	st, ok := l.Leave(st, now+3, tickets[0])
	if !ok {
		t.Fatal("leave")
	}
	st, d := l.Claim(st, now+4, tickets[1], 0, 0)
	if !d.Admitted {
		t.Fatal("ticket 1 not admitted after ticket 0 left")
	}
	if _, d := l.Claim(st, now+5, tickets[2], 0, 0); d.Admitted {
		t.Fatal("ticket 2 admitted with no slot free")
	}
	st = l.Release(st, now+6, 1, d.Epoch)
	// Tickets 2 and 3 belong to a worker that vanished: nobody claims. A
	// newcomer queues behind them...
	st, nd := l.Acquire(st, now+7, 0, 0, 10)
	if !nd.Queued {
		t.Fatalf("newcomer: %+v", nd)
	}
	if _, d := l.Claim(st, now+8, nd.Ticket, 0, 0); d.Admitted {
		t.Fatal("newcomer passed waiting tickets")
	}
	// ...until Head has not moved for Stall with a slot free.
	if _, d := l.Claim(st, now+6+int64(Stall)+int64(time.Millisecond)*2, nd.Ticket, 0, 0); !d.Admitted {
		t.Fatal("stuck queue not skipped after Stall")
	}
}

// TestConcurrencyQueueBound: a queue takes at most queue tickets.
func TestConcurrencyQueueBound(t *testing.T) {
	l := mustConc(t, 1)
	st, _ := l.Acquire(State{}, sec, 0, 0, 2)
	for i := 0; i < 2; i++ {
		var d ConcDecision
		if st, d = l.Acquire(st, sec, 0, 0, 2); !d.Queued {
			t.Fatalf("waiter %d not queued", i)
		}
	}
	if _, d := l.Acquire(st, sec, 0, 0, 2); d.Queued || d.Admitted || d.Waiting != 2 {
		t.Fatalf("third waiter: %+v", d)
	}
}

// TestConcurrencyNeverOverAdmits: random acquire/release by live workers
// that renew every epoch never holds more than limit slots at once.
func TestConcurrencyNeverOverAdmits(t *testing.T) {
	l := mustConc(t, 5)
	r := rand.New(rand.NewPCG(7, 8))
	var st State
	type held struct{ epoch uint16 }
	var hs []held
	now := 1000 * sec
	for i := 0; i < 20000; i++ {
		now += r.Int64N(int64(50 * time.Millisecond))
		// Renew at every epoch change (one holder record per slot here).
		for j := range hs {
			if hs[j].epoch != EpochAt(now) {
				st, hs[j].epoch = l.Renew(st, now, 1, hs[j].epoch)
			}
		}
		if r.IntN(2) == 0 || len(hs) == 0 {
			var d ConcDecision
			if st, d = l.Acquire(st, now, 0, 0, 0); d.Admitted {
				hs = append(hs, held{d.Epoch})
			}
		} else {
			k := r.IntN(len(hs))
			st = l.Release(st, now, 1, hs[k].epoch)
			hs = append(hs[:k], hs[k+1:]...)
		}
		if len(hs) > 5 {
			t.Fatalf("step %d: %d held", i, len(hs))
		}
		if v := l.View(st, now); v.InFlight() != int64(len(hs)) {
			t.Fatalf("step %d: state counts %d, %d held", i, v.InFlight(), len(hs))
		}
	}
}

// TestConcurrencyExpirePassesOlderTickets: a ticket's timeout moves Head
// past it and every older ticket (they timed out too, or were served), so
// abandoned tickets never clog the queue for longer than max_delay.
func TestConcurrencyExpirePassesOlderTickets(t *testing.T) {
	l := mustConc(t, 1)
	now := 20 * sec
	st, first := l.Acquire(State{}, now, 0, 0, 100)
	var tickets []uint16
	for i := 0; i < 40; i++ {
		var d ConcDecision
		st, d = l.Acquire(st, now, 0, 0, 100)
		tickets = append(tickets, d.Ticket)
	}
	// Ticket 30 times out: 0..30 leave at once, far beyond QueueWindow.
	st = l.Expire(st, now+sec, tickets[30])
	if v := l.View(st, now+sec); v.Head != tickets[31] || v.Queued() != 9 {
		t.Fatalf("after the timeout of ticket 30: head %d (want %d), %d queued", v.Head, tickets[31], v.Queued())
	}
	st = l.Release(st, now+sec, 1, first.Epoch)
	if _, d := l.Claim(st, now+sec, tickets[31], 0, 0); !d.Admitted {
		t.Fatal("ticket 31 not admitted once the older tickets timed out")
	}
	// An older ticket whose holder has not noticed its timeout finds
	// itself passed (its worker checks the deadline before claiming).
	if _, d := l.Claim(st, now+sec, tickets[3], 0, 0); !d.Admitted {
		t.Fatal("a passed ticket is admitted first when a slot is free")
	}
}

// TestConcurrencyStaleClockIsNotAStall: a worker whose now is a little
// older than the Last another worker wrote must not take the queue for
// stuck (a stall skip serves the waiting tickets in any order).
func TestConcurrencyStaleClockIsNotAStall(t *testing.T) {
	l := mustConc(t, 1)
	now := 30 * sec
	st, first := l.Acquire(State{}, now, 0, 0, 10)
	st, a := l.Acquire(st, now+10*int64(time.Millisecond), 0, 0, 10)
	st, b := l.Acquire(st, now+10*int64(time.Millisecond), 0, 0, 10)
	st = l.Release(st, now+20*int64(time.Millisecond), 1, first.Epoch)
	// Ticket b's worker polls with a clock read 5 ms before Last.
	if _, d := l.Claim(st, now+5*int64(time.Millisecond), b.Ticket, 0, 0); d.Admitted {
		t.Fatal("ticket b passed ticket a: a stale clock was taken for a stall")
	}
	if _, d := l.Claim(st, now+20*int64(time.Millisecond), a.Ticket, 0, 0); !d.Admitted {
		t.Fatal("ticket a not admitted")
	}
}

// TestConcurrencyLongHoldIsNotAStall: a ticket that waited longer than
// Stall because every slot was held is not a vanished worker's: when a
// slot frees, a newcomer queues behind it.
func TestConcurrencyLongHoldIsNotAStall(t *testing.T) {
	l := mustConc(t, 1)
	now := 40 * sec
	st, first := l.Acquire(State{}, now, 0, 0, 10)
	st, w := l.Acquire(st, now, 0, 0, 10)
	later := now + int64(Stall) + int64(Stall)/2
	// The holder renews its slot, then gives it back after 1.5 Stall.
	st, ep := l.Renew(st, later, 1, first.Epoch)
	st = l.Release(st, later, 1, ep)
	st, nd := l.Acquire(st, later+int64(time.Millisecond), 0, 0, 10)
	if nd.Admitted {
		t.Fatal("a newcomer took the slot ahead of a ticket that waited through a long hold")
	}
	if _, d := l.Claim(st, later+2*int64(time.Millisecond), w.Ticket, 0, 0); !d.Admitted {
		t.Fatalf("the waiting ticket after the release: %+v", d)
	}
}
