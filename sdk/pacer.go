package sdk

import (
	"slices"
	"time"
)

// pacer spaces requests at a rate with a burst, as a token bucket does
// (GCRA), and hands out turns that keep their place in line rather than
// their time: when the rate changes, or a turn ahead is given back, the
// turns not yet due are re-timed. A reservation of golang.org/x/time/rate
// keeps the time it was given, so that after a cut a crowd waiting on
// turns taken at the old rate still went out at it (and was refused), and
// after a raise it still waited on the slow turns. It is a pure algorithm:
// time is passed in, the caller locks (the view's mutex).
type pacer struct {
	every time.Duration // between two turns: 1 / rate
	burst int
	tat   time.Time // when the turn after every turn handed out would be due, burst aside
	line  []*turn   // the turns not yet due when last looked at, in order
	// moved is closed when turns in line move, sooner or later, from what
	// their holders were told; nil: nobody waits on it. A later turn needs
	// a wake-up too: its holder may have a deadline the new time passes,
	// and must give up at once rather than sleep on to the old time (see
	// Transport.pace).
	moved chan struct{}
	slow  time.Duration // the slowest every a holder waiting on moved was told
	fast  time.Duration // the fastest
}

// turn is a place in a pacer's line. empty is the turn before it that
// nobody holds, if it was reserved with one (see reserve).
type turn struct {
	p     *pacer
	empty *turn
}

// pacerRaise is how much faster (or, inverted, slower) than the turns'
// holders were told the pacer must become before they are woken to take
// the new times: the rate a learner follows (see adaptiveRate) creeps at
// every answer, and waking every holder at every answer would cost more
// than the few milliseconds the creep moves a turn.
const pacerRaise = 0.9

// newPacer returns a pacer of one turn per every, with a burst, full or
// (empty) with no turn in hand.
func newPacer(now time.Time, every time.Duration, burst int, empty bool) *pacer {
	p := &pacer{every: max(every, 1), burst: max(burst, 1), tat: now}
	if empty {
		p.tat = now.Add(time.Duration(p.burst) * p.every)
	}
	return p
}

func (p *pacer) tau() time.Duration { return time.Duration(p.burst-1) * p.every }

// dueAt is when p.line[i] is due: the turns in line follow each other by
// every, the last one a burst's tolerance before tat.
func (p *pacer) dueAt(i int) time.Time {
	return p.tat.Add(-p.tau() - time.Duration(len(p.line)-i)*p.every)
}

// trim forgets the turns that are due.
func (p *pacer) trim(now time.Time) {
	k := 0
	for k < len(p.line) && !p.dueAt(k).After(now) {
		k++
	}
	if k > 0 {
		n := copy(p.line, p.line[k:])
		clear(p.line[n:])
		p.line = p.line[:n]
	}
}

// waiting reports whether turns not due at now are in line.
func (p *pacer) waiting(now time.Time) bool {
	p.trim(now)
	return len(p.line) > 0
}

// reserve hands out the next turn and says how long until it is due; nil
// when it is due now. With first, the turn is the first in line (the turns
// in line move back). With gap, the turn before it is left empty: it is
// reserved too, and nobody holds it (see call.gap); giving the turn back
// gives back both.
func (p *pacer) reserve(now time.Time, first, gap bool) (*turn, time.Duration) {
	p.trim(now)
	if first && len(p.line) > 0 {
		return p.jump(now, gap)
	}
	var empty *turn
	if gap {
		empty, _ = p.next(now)
	}
	t, d := p.next(now)
	if t != nil {
		t.empty = empty
	}
	return t, d
}

// jump puts a turn first in line, after an empty one with gap (see
// reserve), and says how long until it is due.
func (p *pacer) jump(now time.Time, gap bool) (*turn, time.Duration) {
	t := &turn{p: p}
	ins := []*turn{t}
	if gap {
		t.empty = &turn{p: p}
		ins = []*turn{t.empty, t}
	}
	p.line = slices.Insert(p.line, 0, ins...)
	p.tat = p.tat.Add(time.Duration(len(ins)) * p.every)
	p.wake() // the turns behind are later: see moved
	return t, p.dueAt(len(ins) - 1).Sub(now)
}

// next hands out the turn after every turn handed out (see reserve).
func (p *pacer) next(now time.Time) (*turn, time.Duration) {
	due := p.tat.Add(-p.tau())
	if due.Before(now) {
		due = now
	}
	if p.tat.Before(due) {
		p.tat = due
	}
	p.tat = p.tat.Add(p.every)
	if !due.After(now) {
		return nil, 0
	}
	t := &turn{p: p}
	p.line = append(p.line, t)
	return t, due.Sub(now)
}

// after says how long, at least, until a turn is due for the request
// behind k others that each take one (see view.lineWaitLocked): the turns
// in line are theirs (a request that waits for a turn waits in the view's
// line), the others take the next turns.
func (p *pacer) after(now time.Time, k int) time.Duration {
	p.trim(now)
	next := p.tat.Add(-p.tau())
	if next.Before(now) {
		next = now
	}
	k = max(k-len(p.line), 0)
	return next.Add(time.Duration(k) * p.every).Sub(now)
}

// delay says how long until t is due.
func (p *pacer) delay(t *turn, now time.Time) time.Duration {
	if i := p.index(t); i >= 0 {
		return max(p.dueAt(i).Sub(now), 0)
	}
	return 0
}

func (p *pacer) index(t *turn) int {
	if t == nil || t.p != p {
		return -1
	}
	for i, u := range p.line {
		if u == t {
			return i
		}
	}
	return -1
}

// cancel gives t back, and the empty turn before it, if they are not due
// yet: the turns behind them move up, and their holders are woken to take
// their places.
func (p *pacer) cancel(t *turn, now time.Time) {
	p.trim(now)
	if t != nil {
		p.drop(t.empty)
	}
	p.drop(t)
}

// drop takes t out of the line, if it is in it.
func (p *pacer) drop(t *turn) {
	i := p.index(t)
	if i < 0 {
		return
	}
	p.line = slices.Delete(p.line, i, i+1)
	p.tat = p.tat.Add(-p.every)
	if i < len(p.line) {
		p.wake()
	}
}

// set changes the rate and the burst. The turns in hand are kept (a full
// bucket stays full, up to the new burst; an empty one empty), and the
// turns in line are re-timed at the new rate, in their order.
func (p *pacer) set(now time.Time, every time.Duration, burst int) {
	every, burst = max(every, 1), max(burst, 1)
	if every == p.every && burst == p.burst {
		return
	}
	p.trim(now)
	n := time.Duration(len(p.line))
	// The turns in hand, those in line aside (the first is not due yet,
	// so less than one).
	tokens := float64(p.burst) - float64(p.tat.Add(-n*p.every).Sub(now))/float64(p.every)
	tokens = min(tokens, float64(p.burst), float64(burst))
	p.every, p.burst = every, burst
	p.tat = now.Add(time.Duration((float64(burst)-tokens)*float64(every)) + n*every)
	if p.moved != nil && (float64(every) < pacerRaise*float64(p.slow) ||
		pacerRaise*float64(every) > float64(p.fast)) {
		p.wake()
	}
}

// changed returns the channel closed when the turns in line move from
// what the holder that asks for it is told now.
func (p *pacer) changed() <-chan struct{} {
	if p.moved == nil {
		p.moved, p.slow, p.fast = make(chan struct{}), p.every, p.every
	}
	p.slow, p.fast = max(p.slow, p.every), min(p.fast, p.every)
	return p.moved
}

// wake tells the holders of turns in line to look at their times again.
func (p *pacer) wake() {
	if p.moved != nil {
		close(p.moved)
		p.moved = nil
	}
}
