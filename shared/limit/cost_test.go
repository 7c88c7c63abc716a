package limit

import (
	"math/rand"
	"testing"
	"time"
)

// A response-charged rule: admitted while the balance is positive, charged
// after; a charge may leave a debt that refill pays back, and Retry-After
// covers it.
func TestDebitTokenBucketDebt(t *testing.T) {
	l, _ := New(TokenBucket, 1000, time.Minute, 0) // 60ms per unit
	var s State
	now := int64(time.Hour)
	admitted := 0
	for i := 0; i < 10; i++ {
		d := l.Admit(s, now)
		if !d.Allowed {
			if d.RetryAfter != 12060*time.Millisecond {
				t.Fatalf("RetryAfter = %v, want 12.06s (a debt of 200 units, then one unit)", d.RetryAfter)
			}
			break
		}
		admitted++
		var dd Decision
		s, dd = l.Debit(s, now, 400)
		if want := max(1000-400*int64(admitted), 0); dd.Remaining != want {
			t.Fatalf("after %d charges Remaining = %d, want %d", admitted, dd.Remaining, want)
		}
	}
	if admitted != 3 {
		t.Fatalf("admitted %d requests of 400 units on a budget of 1000, want 3", admitted)
	}
	if b := l.Balance(s, now); b != -200 {
		t.Fatalf("Balance = %d, want -200", b)
	}
	// Refill pays the debt: 12s later the balance is 0 (refused), 60ms
	// more and one unit is back.
	if d := l.Admit(s, now+int64(12*time.Second)); d.Allowed {
		t.Fatalf("admitted with a balance of %d", l.Balance(s, now+int64(12*time.Second)))
	}
	if d := l.Admit(s, now+int64(12060*time.Millisecond)); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("after the debt is paid: %+v, want admitted with 1 remaining", d)
	}
}

func TestDebitAlgorithms(t *testing.T) {
	w := int64(time.Minute)
	for _, a := range []Algorithm{TokenBucket, FixedWindow, SlidingWindow} {
		l, _ := New(a, 10, time.Minute, 0)
		var s State
		now := 100 * w // a window's start
		if b := l.Balance(s, now); b != 10 {
			t.Fatalf("%v: new client's balance %d, want 10", a, b)
		}
		// Three failures of cost 4: two fit, the third is admitted (balance
		// 2 > 0) and leaves a debt of 2.
		for i := 0; i < 3; i++ {
			if d := l.Admit(s, now); !d.Allowed {
				t.Fatalf("%v: request %d refused with balance %d", a, i, l.Balance(s, now))
			}
			s, _ = l.Debit(s, now, 4)
		}
		if b := l.Balance(s, now); b != -2 {
			t.Fatalf("%v: balance %d, want -2", a, b)
		}
		d := l.Admit(s, now)
		if d.Allowed || d.RetryAfter <= 0 {
			t.Fatalf("%v: in debt but %+v", a, d)
		}
		// Once Retry-After has passed the client is admitted again.
		if d2 := l.Admit(s, now+int64(d.RetryAfter)); !d2.Allowed {
			t.Fatalf("%v: still refused after Retry-After %v: balance %d", a, d.RetryAfter, l.Balance(s, now+int64(d.RetryAfter)))
		}
		if d.RetryAfter > time.Millisecond {
			if d3 := l.Admit(s, now+int64(d.RetryAfter)-int64(time.Millisecond)); d3.Allowed {
				t.Fatalf("%v: admitted before Retry-After %v", a, d.RetryAfter)
			}
		}
		// A zero charge (a status not charged) changes nothing.
		if s2, _ := l.Debit(s, now, 0); s2 != s {
			t.Fatalf("%v: a zero charge changed the state", a)
		}
	}
}

// A debt larger than a window: the fixed window carries it into the next
// windows, and Retry-After says when it is paid.
func TestDebitFixedWindowLongDebt(t *testing.T) {
	l, _ := New(FixedWindow, 10, time.Second, 0)
	now := int64(50 * time.Second)
	s, d := l.Debit(State{}, now, 35) // 3.5 windows' worth
	if d.Remaining != 0 || d.RetryAfter != 3*time.Second {
		t.Fatalf("after a charge of 35 on 10/s: %+v, want Remaining 0, RetryAfter 3s", d)
	}
	if b := l.Balance(s, now+int64(3*time.Second)); b != 5 {
		t.Fatalf("balance 3 windows later %d, want 5", b)
	}
}

// Request costs at admission (AllowN with n): cost 4 on a budget of 10
// admits twice.
func TestAllowNCost(t *testing.T) {
	for _, a := range []Algorithm{TokenBucket, FixedWindow, SlidingWindow} {
		l, _ := New(a, 10, time.Minute, 0)
		var s State
		now := int64(100 * time.Minute)
		n := 0
		for i := 0; i < 5; i++ {
			var d Decision
			s, d = l.AllowN(s, now, 4, 0)
			if d.Allowed {
				n++
				if d.Remaining != 10-4*int64(n) {
					t.Fatalf("%v: Remaining %d after %d", a, d.Remaining, n)
				}
			}
		}
		if n != 2 {
			t.Fatalf("%v: cost 4 on 10 admitted %d, want 2", a, n)
		}
	}
}

// Random sequences of admissions and charges after the response: Admit
// passes exactly while the balance is at least one unit and never changes
// the state; a charge of n at one instant lowers the balance by exactly n;
// the balance never exceeds the capacity; the Retry-After of a refusal is
// exactly when Admit passes again.
func TestDebitProperties(t *testing.T) {
	r := rand.New(rand.NewSource(20))
	for _, a := range []Algorithm{TokenBucket, FixedWindow, SlidingWindow} {
		for trial := 0; trial < 300; trial++ {
			l := randomLimit(r, a)
			capacity := l.Burst()
			if a != TokenBucket {
				capacity = l.Limit()
			}
			var s State
			now := int64(1000 * time.Hour)
			for i, ev := range randomSequence(r, now, 60, int64(l.Window())) {
				now = ev.at
				b := l.Balance(s, now)
				if b > capacity {
					t.Fatalf("%v trial %d: balance %d over capacity %d", a, trial, b, capacity)
				}
				d := l.Admit(s, now)
				if d.Allowed != (b >= 1) {
					t.Fatalf("%v trial %d event %d: Admit %v with balance %d", a, trial, i, d.Allowed, b)
				}
				if !d.Allowed {
					if d.RetryAfter <= 0 || !l.Admit(s, now+int64(d.RetryAfter)).Allowed {
						t.Fatalf("%v trial %d: Retry-After %v does not admit (balance then %d)", a, trial, d.RetryAfter, l.Balance(s, now+int64(d.RetryAfter)))
					}
					continue
				}
				n := 1 + r.Int63n(2*capacity)
				next, dd := l.Debit(s, now, n)
				// Sliding-window counts saturate at 32 bits: far from here.
				if got := l.Balance(next, now); got != b-n {
					t.Fatalf("%v trial %d: balance %d, charge %d, then %d", a, trial, b, n, got)
				}
				if dd.Remaining != max(b-n, 0) {
					t.Fatalf("%v trial %d: Remaining %d after a charge of %d on %d", a, trial, dd.Remaining, n, b)
				}
				s = next
			}
		}
	}
}
