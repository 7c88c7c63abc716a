package flight

import (
	"time"

	"github.com/sluicehq/sluice/shared/limit"
)

// loopLag estimates how late this worker's event loop runs what is due on
// it. An Envoy that is itself swamped (a flood of new clients and their
// 429s, a CPU shared with other work) reads an upstream's response late,
// and that wait is not the upstream's latency: taken for it, it backs the
// limit off an idle upstream. The tick is a timer on the same loop, so how
// late it fires samples the same wait. Two uses:
//
//   - A stall (the loop late by more than it usually is: a worker not
//     scheduled for a while on a busy machine) drops the samples of the
//     requests that were out during it (Sample, see noteStall): a
//     forwarded request waits for the loop more than once (the upstream
//     connection, the request's write, the response's read), so no
//     correction of one sample can say how much of its latency was the
//     stall. The stall is seen on the response path as soon as the loop
//     runs again (the tick is overdue: it fires after the answers read in
//     the same turn of the loop), or by the tick itself.
//   - The loop's usual lateness: Sample takes the recent mean of it
//     (MaxLoopLag at most) out of each latency, leaving at least a
//     quarter, but no more than the last tick's lateness: the mean
//     remembers a stall for a second after it ends, and taken out of the
//     responses read on time after it, it would teach the rule a Base
//     under the upstream's latency.
type loopLag struct {
	done   int64 // when the previous tick's work ended
	period int64 // ns: the tick period
	mean   int64 // ns: the mean lateness of recent ticks
	last   int64 // ns: the last tick's lateness
	// stallFrom is when the last stall seen began (the due time of the
	// tick it held up), stallBy how late over its usual the loop was.
	stallFrom, stallBy int64
}

// MaxLoopLag bounds how late a tick counts: later than that is a stall (a
// paused process) more than a busy loop, and counts as MaxLoopLag.
const MaxLoopLag = time.Second

// Ticked notes a tick that began at now, of a tick timer of the given
// period. Envoy arms the next tick when the callback returns (TickDone),
// so the lateness is measured from then: the tick's own work is not lag.
// The mean weighs the last tick by a quarter (about the last second at
// 100 ms ticks, the period with concurrency rules).
func (a *Adaptive) Ticked(now int64, period time.Duration) {
	l := &a.loop
	if l.done > 0 && period > 0 {
		l.period = int64(period)
		a.noteStall(now)
		late := min(max(now-l.done-int64(period), 0), int64(MaxLoopLag))
		l.mean += (late - l.mean) / 4
		l.last = late
	}
}

// TickDone notes that the tick's work ended at now.
func (a *Adaptive) TickDone(now int64) { a.loop.done = now }

// LoopLag returns the loop lag Sample takes out of a latency now (see
// loopLag).
func (a *Adaptive) LoopLag() time.Duration { return time.Duration(min(a.loop.mean, a.loop.last)) }

// noteStall notes a stall when this worker's loop is late at now by
// more than it usually is: the tick due at done+period has not run yet,
// or runs now. The requests forwarded by then and answered since were
// out during it (see Sample).
func (a *Adaptive) noteStall(now int64) {
	l := &a.loop
	if l.done <= 0 || l.period <= 0 {
		return
	}
	due := l.done + l.period
	over := now - due - l.mean
	if over < int64(minStall) {
		return
	}
	if due != l.stallFrom {
		l.stallFrom, l.stallBy = due, over
	}
	l.stallBy = max(l.stallBy, over)
}

// lateWindows drops l's sample windows of the requests out during the
// last stall, when a request forwarded at fwd was one of them (answered
// at now, after the stall began) and the stall could move the latency l
// learns (see stallFor).
// For a rule with classes, each window bears the stall its requests'
// classes bear (see limit.Sampler.AdmitBearing).
func (a *Adaptive) lateWindows(l *learner, fwd, now int64) {
	st := &a.loop
	if st.stallFrom <= 0 || fwd > st.stallFrom || now < st.stallFrom {
		return
	}
	switch {
	case l.cb != nil:
		a.stats.LateWindows += uint64(l.smp.LateBy(st.stallFrom, now, time.Duration(st.stallBy)))
	case time.Duration(st.stallBy) >= stallFor(l.g):
		a.stats.LateWindows += uint64(l.smp.Late(st.stallFrom, now))
	}
}

// minStall is the shortest stall noteStall looks for (the lateness of
// a busy but running loop is a few milliseconds, and counted in the
// mean).
const minStall = 2 * time.Millisecond

// stallFor returns how late over its usual a worker's loop must be for
// its stall to drop g's samples: an eighth of the latency learnt (a rise
// of Tolerance in a round is a queue), at least minStall; 5 ms before
// Base is known (the first round measures Base: a stall in it would be
// learnt as the upstream's latency).
func stallFor(g limit.Gauge) time.Duration {
	if g.Base <= 0 {
		return 5 * time.Millisecond
	}
	return max(g.Base/8, minStall)
}
