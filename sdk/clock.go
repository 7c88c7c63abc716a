package sdk

import "time"

// Clock is the time source a Transport reads and waits on. The default is
// the system clock. Tests inject a fake one to run minutes of retries and
// rate-limit resets in microseconds and without flakiness; see WithClock.
//
// Context deadlines are compared against Clock.Now, so a fake clock should
// start at (or near) the real time when requests carry deadlines.
type Clock interface {
	Now() time.Time
	// NewTimer returns a Timer that fires once, d after Now.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer that a Transport uses.
type Timer interface {
	// C delivers the time once the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time { return t.t.C }
func (t systemTimer) Stop() bool          { return t.t.Stop() }

// backoffClock adapts a Clock to backoff.Clock so that the default
// ExponentialBackOff measures its elapsed time on the same clock.
type backoffClock struct{ c Clock }

func (b backoffClock) Now() time.Time { return b.c.Now() }
