package limit

import (
	"math"
	"testing"
	"time"
)

const sec = int64(time.Second)

func mustNew(t testing.TB, a Algorithm, limit int64, window time.Duration, burst int64) Limit {
	t.Helper()
	l, err := New(a, limit, window, burst)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// admitRun sends k single requests at now and returns how many were admitted
// without delay.
func admitRun(l Limit, s *State, now int64, k int) int {
	admitted := 0
	for i := 0; i < k; i++ {
		ns, d := l.AllowN(*s, now, 1, 0)
		*s = ns
		if d.Allowed && d.Delay == 0 {
			admitted++
		}
	}
	return admitted
}

func TestNewValidates(t *testing.T) {
	if _, err := New(TokenBucket, 0, time.Second, 1); err == nil {
		t.Error("limit 0 accepted")
	}
	if _, err := New(TokenBucket, 1, 0, 1); err == nil {
		t.Error("window 0 accepted")
	}
	if _, err := New(TokenBucket, math.MaxUint32+1, time.Second, 1); err == nil {
		t.Error("huge limit accepted")
	}
	l := mustNew(t, TokenBucket, 10, time.Minute, 0)
	if l.Burst() != 10 {
		t.Errorf("default burst = %d, want limit 10", l.Burst())
	}
	if l.Interval() != 6*time.Second {
		t.Errorf("interval = %v, want 6s", l.Interval())
	}
}

func TestTokenBucketBurstThenRefill(t *testing.T) {
	l := mustNew(t, TokenBucket, 10, time.Second, 5) // one token per 100ms, capacity 5
	var s State
	now := 1000 * sec
	for i := 0; i < 5; i++ {
		var d Decision
		s, d = l.AllowN(s, now, 1, 0)
		if !d.Allowed || d.Delay != 0 {
			t.Fatalf("request %d rejected: %+v", i, d)
		}
		if want := int64(4 - i); d.Remaining != want {
			t.Errorf("request %d remaining = %d, want %d", i, d.Remaining, want)
		}
		if want := time.Duration(i+1) * 100 * time.Millisecond; d.Reset != want {
			t.Errorf("request %d reset = %v, want %v", i, d.Reset, want)
		}
	}
	ns, d := l.AllowN(s, now, 1, 0)
	if d.Allowed {
		t.Fatal("sixth request of the burst admitted")
	}
	if ns != s {
		t.Error("rejection changed the state")
	}
	if d.RetryAfter != 100*time.Millisecond {
		t.Errorf("retry after = %v, want 100ms", d.RetryAfter)
	}
	if d.Reset != 500*time.Millisecond {
		t.Errorf("reset = %v, want 500ms", d.Reset)
	}
	// 99ms later: still nothing; 100ms later: exactly one.
	if _, d := l.AllowN(s, now+99*int64(time.Millisecond), 1, 0); d.Allowed {
		t.Error("admitted before a token refilled")
	}
	if got := admitRun(l, &s, now+100*int64(time.Millisecond), 3); got != 1 {
		t.Errorf("after 100ms admitted %d, want 1", got)
	}
	// After a long idle period the bucket is full again, never fuller.
	if got := admitRun(l, &s, now+3600*sec, 20); got != 5 {
		t.Errorf("after an hour admitted %d, want burst 5", got)
	}
}

func TestTokenBucketSubSecondWindow(t *testing.T) {
	l := mustNew(t, TokenBucket, 5, 50*time.Millisecond, 0) // 100/s, burst 5
	var s State
	now := int64(0)
	total := 0
	for step := 0; step < 100; step++ { // 100 steps of 10ms = 1s
		total += admitRun(l, &s, now, 10)
		now += int64(10 * time.Millisecond)
	}
	// One second at 100/s plus the initial burst of 5 (the first step).
	if total < 100 || total > 105 {
		t.Errorf("admitted %d in 1s at 100/s burst 5, want 100..105", total)
	}
}

func TestTokenBucketClockBackwards(t *testing.T) {
	l := mustNew(t, TokenBucket, 10, time.Second, 10)
	var s State
	now := 500 * sec
	if got := admitRun(l, &s, now, 10); got != 10 {
		t.Fatalf("burst admitted %d", got)
	}
	// The clock jumps back an hour: nothing is refilled, nothing more admitted.
	if got := admitRun(l, &s, now-3600*sec, 10); got != 0 {
		t.Errorf("clock going backwards admitted %d", got)
	}
	if got := admitRun(l, &s, now+100*int64(time.Millisecond), 10); got != 1 {
		t.Errorf("after the clock recovered admitted %d, want 1", got)
	}
}

func TestHugeWindows(t *testing.T) {
	if _, err := New(TokenBucket, 1, time.Duration(math.MaxInt64), 1); err != ErrSpan {
		t.Errorf("290-year window: err = %v, want ErrSpan", err)
	}
	if _, err := New(TokenBucket, 1, 24*365*time.Hour, 1000); err != ErrSpan {
		t.Errorf("1000 x 1 year: err = %v, want ErrSpan", err)
	}
	// The largest accepted span still limits correctly at a present-day clock.
	for a := TokenBucket; a <= LeakyBucket; a++ {
		l := mustNew(t, a, 1, time.Duration(MaxSpan), 1)
		var s State
		now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC).UnixNano()
		got := 0
		for i := 0; i < 100; i++ {
			var d Decision
			s, d = l.AllowN(s, now, 1, 0)
			if d.Allowed && d.Delay == 0 {
				got++
			}
			if d.RetryAfter < 0 || d.Reset < 0 || d.Delay < 0 {
				t.Fatalf("%v: negative durations: %+v", a, d)
			}
		}
		if got != 1 {
			t.Errorf("%v: admitted %d with a 73-year window, want 1", a, got)
		}
		if r := l.Reset(s, now); r <= 0 {
			t.Errorf("%v: state looks recovered: reset %v", a, r)
		}
	}
	// n larger than burst can never be admitted.
	l2 := mustNew(t, TokenBucket, 10, time.Second, 5)
	_, d := l2.AllowN(State{}, 0, 6, time.Hour)
	if d.Allowed || d.RetryAfter != math.MaxInt64 {
		t.Errorf("n > burst: %+v", d)
	}
}

func TestTokenBucketThrottleSpacing(t *testing.T) {
	l := mustNew(t, TokenBucket, 10, time.Second, 5)
	var s State
	now := 10 * sec
	var delays []time.Duration
	rejected := 0
	for i := 0; i < 40; i++ {
		var d Decision
		s, d = l.AllowN(s, now, 1, 2*time.Second)
		if d.Allowed {
			delays = append(delays, d.Delay)
		} else {
			rejected++
			if d.RetryAfter <= 0 {
				t.Errorf("rejection without retry-after: %+v", d)
			}
		}
	}
	// 5 at once, then one every 100ms up to 2s: 20 delayed.
	if len(delays) != 25 || rejected != 15 {
		t.Fatalf("admitted %d rejected %d, want 25 and 15", len(delays), rejected)
	}
	for i, d := range delays {
		want := time.Duration(0)
		if i >= 5 {
			want = time.Duration(i-4) * 100 * time.Millisecond
		}
		if d != want {
			t.Errorf("delay[%d] = %v, want %v", i, d, want)
		}
	}
}

func TestLeakyBucketShapes(t *testing.T) {
	l := mustNew(t, LeakyBucket, 10, time.Second, 3)
	var s State
	now := 10 * sec
	var got []time.Duration
	for i := 0; i < 6; i++ {
		var d Decision
		s, d = l.AllowN(s, now, 1, 0)
		if d.Allowed {
			got = append(got, d.Delay)
		} else if d.RetryAfter != 100*time.Millisecond {
			t.Errorf("request %d retry after %v, want 100ms", i, d.RetryAfter)
		}
	}
	want := []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond}
	if len(got) != len(want) {
		t.Fatalf("admitted delays %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("delay[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	if r := l.Reset(s, now); r != 400*time.Millisecond {
		t.Errorf("reset = %v, want 400ms", r)
	}
}

func TestFixedWindow(t *testing.T) {
	l := mustNew(t, FixedWindow, 3, time.Second, 0)
	var s State
	now := 100*sec + 900*int64(time.Millisecond) // 100ms before a window edge
	if got := admitRun(l, &s, now, 5); got != 3 {
		t.Fatalf("admitted %d, want 3", got)
	}
	_, d := l.AllowN(s, now, 1, 0)
	if d.RetryAfter != 100*time.Millisecond || d.Reset != 100*time.Millisecond {
		t.Errorf("at window end: %+v", d)
	}
	// The next window starts fresh (the known fixed-window edge burst).
	if got := admitRun(l, &s, 101*sec, 5); got != 3 {
		t.Errorf("next window admitted %d, want 3", got)
	}
	// Throttled: reservations go to the next windows.
	s = State{}
	now = 200 * sec
	var delays []time.Duration
	for i := 0; i < 8; i++ {
		var d Decision
		s, d = l.AllowN(s, now, 1, 1500*time.Millisecond)
		if d.Allowed {
			delays = append(delays, d.Delay)
		}
	}
	want := []time.Duration{0, 0, 0, time.Second, time.Second, time.Second}
	if len(delays) != len(want) {
		t.Fatalf("delays %v, want %v", delays, want)
	}
	for i := range want {
		if delays[i] != want[i] {
			t.Errorf("delay[%d] = %v want %v", i, delays[i], want[i])
		}
	}
	if r := l.Reset(s, now); r != 2*time.Second {
		t.Errorf("reset with reservations = %v, want 2s", r)
	}
}

func TestSlidingWindow(t *testing.T) {
	l := mustNew(t, SlidingWindow, 10, time.Second, 0)
	var s State
	base := 50 * sec
	if got := admitRun(l, &s, base, 20); got != 10 {
		t.Fatalf("first window admitted %d", got)
	}
	// Halfway into the next window, the previous 10 still weigh 5.
	if got := admitRun(l, &s, base+1500*int64(time.Millisecond), 20); got != 5 {
		t.Errorf("half-way admitted %d, want 5", got)
	}
	_, d := l.AllowN(s, base+1500*int64(time.Millisecond), 1, 0)
	if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > 500*time.Millisecond {
		t.Errorf("rejection: %+v", d)
	}
	// Two windows later everything has decayed.
	if r := l.Reset(s, base+3*sec); r > 0 {
		t.Errorf("reset after two windows = %v", r)
	}
	if got := admitRun(l, &s, base+3*sec, 20); got != 10 {
		t.Errorf("after idle admitted %d, want 10", got)
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	for _, s := range []State{{}, {A: 1, B: -1}, {A: math.MaxInt64, B: math.MinInt64}, {A: 123456789, B: packCounts(7, 9)}} {
		var b [StateSize]byte
		s.Encode(b[:])
		if got := DecodeState(b[:]); got != s {
			t.Errorf("round trip %+v -> %+v", s, got)
		}
	}
}

func TestAllowNAllocatesNothing(t *testing.T) {
	for a := TokenBucket; a <= LeakyBucket; a++ {
		l := mustNew(t, a, 10, time.Second, 5)
		var s State
		now := int64(0)
		allocs := testing.AllocsPerRun(1000, func() {
			now += int64(time.Millisecond)
			s, _ = l.AllowN(s, now, 1, 0)
		})
		if allocs != 0 {
			t.Errorf("%v: %v allocs per decision", a, allocs)
		}
	}
}

func BenchmarkAllowN(b *testing.B) {
	for a := TokenBucket; a <= LeakyBucket; a++ {
		b.Run(a.String(), func(b *testing.B) {
			l := mustNew(b, a, 1000, time.Second, 100)
			var s State
			now := int64(0)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				now += int64(time.Microsecond) * 500
				s, _ = l.AllowN(s, now, 1, 0)
			}
		})
	}
}

func TestRefundUndoesCharge(t *testing.T) {
	for a := TokenBucket; a <= LeakyBucket; a++ {
		l := mustNew(t, a, 3, time.Second, 3)
		now := 77 * sec
		var s State
		s, _ = l.AllowN(s, now, 1, 0)
		s, _ = l.AllowN(s, now, 1, 0)
		charged, d := l.AllowN(s, now, 1, 0)
		if !d.Allowed {
			t.Fatalf("%v: third request rejected", a)
		}
		back := l.Refund(charged, now, 1)
		// After the refund, the same request is admitted again, and no more.
		s2, d2 := l.AllowN(back, now, 1, 0)
		if !d2.Allowed {
			t.Errorf("%v: refunded request not admitted again", a)
		}
		if _, d3 := l.AllowN(s2, now, 1, 0); d3.Allowed && d3.Delay == 0 {
			t.Errorf("%v: refund gave back more than was charged", a)
		}
		// Refunding a fresh state stays a fresh state.
		if r := l.Reset(l.Refund(State{}, now, 5), now); r > 0 {
			t.Errorf("%v: refund of nothing left reset %v", a, r)
		}
	}
}
