package sdk

import (
	"time"

	"github.com/sluicehq/sluice/sdk/header"
)

// shape is what a view has learnt of the shape of its limit from the
// server's answers: the Limit announced, the capacity shown, and the
// window. The quota, the spent log and the pacing are computed from it.
// The caller locks (the view's mutex).
type shape struct {
	limit    int           // the Limit the server announced; 0: unknown
	maxSeen  int           // the largest Remaining seen, plus one; 0: none seen
	win      time.Duration // the policy's window, or the longest reset seen
	explicit bool          // win came from the policy's w parameter
}

// learn records what an answer says of the limit's shape: the Limit, and
// the window (the policy's, or the longest reset seen as a lower bound of
// it).
func (s *shape) learn(in header.Info) {
	if in.Has&header.HasLimit != 0 && in.Limit > 0 {
		s.limit = in.Limit
	}
	if in.Has&header.HasWindow != 0 {
		s.win, s.explicit = in.Window, true
	} else if in.Has&header.HasReset != 0 && !s.explicit && in.Reset > s.win {
		// No reset exceeds the window, so the longest one seen is the best
		// lower bound of it.
		s.win = min(in.Reset, 24*time.Hour)
	}
}

// admitted records the Remaining of an answer that admitted its request:
// a request that leaves r shows a capacity of at least r+1.
func (s *shape) admitted(remaining int) {
	if remaining < 1<<30 && remaining+1 > s.maxSeen {
		s.maxSeen = remaining + 1
	}
}

// window is the policy's window, or the longest reset seen; 0: unknown.
func (s *shape) window() time.Duration { return s.win }

// capacity is the most requests a restored window admits, as far as the
// client has seen: the largest Remaining seen plus the request that
// received it, at most the announced Limit. It is smaller than Limit for a
// token bucket whose burst is smaller than its limit.
func (s *shape) capacity() int {
	if s.maxSeen > 0 && (s.limit == 0 || s.maxSeen < s.limit) {
		return s.maxSeen
	}
	return s.limit
}

// tokenEvery is how often the server adds one request to the quota, for a
// limit that refills continuously (a token bucket), or 0 when the view
// does not know it to: a window (fixed, or unknown) restores its quota only
// at the reset. The server shows a token bucket by admitting fewer at
// once than its announced Limit per window (a burst below the limit),
// which a window never does.
func (s *shape) tokenEvery() time.Duration {
	if s.limit <= 0 || s.win <= 0 || s.maxSeen <= 0 || s.maxSeen >= s.limit {
		return 0
	}
	return max(s.win/time.Duration(s.perWindow()), time.Millisecond)
}

// perWindow is how many requests the server admits per window: the
// announced Limit, unless the window is only learnt from resets (legacy
// headers name none) and the capacity seen is under half the Limit. A
// reset is then the time a spent burst takes to refill (a token bucket of
// 600 a minute with a burst of 20 says 2 s), and Limit per that time would
// be many times the server's rate; the capacity per that time is its rate,
// at worst a little under it (resets are whole seconds, rounded up). With a
// burst of at least half the Limit, rounding would cost more than that
// error, and the Limit stands.
func (s *shape) perWindow() int {
	if c := s.capacity(); !s.explicit && c > 0 && 2*c < s.limit {
		return c
	}
	return s.limit
}

// announced is the rate the server announced, perWindow per window, in
// requests per second, with a burst two below the capacity seen (see
// pacing.tune); 0 when the Limit, the window or the capacity is unknown.
func (s *shape) announced() (perSecond float64, burst int) {
	if c := s.capacity(); s.limit > 0 && s.win > 0 && c > 0 {
		return float64(s.perWindow()) / s.win.Seconds(), max(c-2, 1)
	}
	return 0, 0
}
