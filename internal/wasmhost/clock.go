package wasmhost

import (
	"sync"
	"time"
)

// Clock is the time source of a Host. It feeds WASI clock_time_get
// (REALTIME from Now, MONOTONIC from Monotonic), proxy_get_current_time_nanoseconds
// (Now), and the tick timers driven by Host.AdvanceClock. Envoy reads its
// own time source for the same calls (cpp-host exports.cc
// wasi_unstable_clock_time_get: getCurrentTimeNanoseconds /
// getMonotonicTimeNanoseconds).
//
// Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns the wall-clock time.
	Now() time.Time
	// Monotonic returns a monotonic reading; only differences are meaningful.
	Monotonic() time.Duration
}

// ManualClock is a Clock that only moves when the test says so. Now and
// Monotonic move together on Advance, so guest code that mixes time.Now()
// and time.Since() sees a consistent picture. It is safe for concurrent use.
type ManualClock struct {
	mu   sync.Mutex
	wall time.Time
	mono time.Duration
}

// NewManualClock returns a ManualClock whose wall time is start. Its
// monotonic reading starts at one hour (an arbitrary non-zero origin, as a
// real monotonic clock counts from boot).
func NewManualClock(start time.Time) *ManualClock {
	return &ManualClock{wall: start, mono: time.Hour}
}

// Now returns the current wall time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wall
}

// Monotonic returns the current monotonic reading.
func (c *ManualClock) Monotonic() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mono
}

// Advance moves both the wall and the monotonic clock forward by d.
// A negative d panics: use Set to step the wall clock backwards.
func (c *ManualClock) Advance(d time.Duration) {
	if d < 0 {
		panic("wasmhost: ManualClock.Advance with a negative duration")
	}
	c.mu.Lock()
	c.wall = c.wall.Add(d)
	c.mono += d
	c.mu.Unlock()
}

// Set steps the wall clock to t, like an NTP step. The monotonic clock moves
// forward by t minus the old wall time when that is positive and does not
// move otherwise, so it never goes backwards.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	if d := t.Sub(c.wall); d > 0 {
		c.mono += d
	}
	c.wall = t
	c.mu.Unlock()
}

type realClock struct{ start time.Time }

func (c realClock) Now() time.Time           { return time.Now() }
func (c realClock) Monotonic() time.Duration { return time.Since(c.start) + time.Hour }

// RealClock returns a Clock that reads the machine's clocks (for benchmarks).
func RealClock() Clock { return realClock{start: time.Now()} }
