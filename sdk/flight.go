package sdk

import "time"

// flight counts the requests a view admits, and those of them still in
// flight (admitted, not answered yet), so that an answer tells how many
// requests the server may have counted after it (see view.observe). The
// caller locks (the view's mutex).
type flight struct {
	seq      uint64    // requests admitted so far
	lastSend time.Time // when the latest of them was admitted
	inflight int       // admitted and not answered yet
}

// ticket identifies an admitted request to observe.
type ticket struct {
	// held: the view admitted the request and counts it in flight. An
	// answer may also name a policy whose view did not hold the request
	// (its route was not known to be governed by it yet).
	held bool
	seq  uint64
	// ordered: no other request was in flight when this one was sent, or
	// the latest was sent at least orderGap before: the server then saw the
	// earlier ones first, so Remaining in this one's answer counts them.
	ordered bool
	// sent is when the request was admitted: a throttle of a request sent
	// before the adaptive rate's last cut belongs to the congestion event
	// already cut for. (The turns of requests still waiting then are
	// re-timed at the cut rate, see pacer.)
	sent time.Time
	// probe: the view held the request longer than MaxWait and let it
	// through to ask again (see ProbeEvery): its answer replaces the hold.
	probe bool
}

// orderGap is how far apart two requests must be sent for the server to be
// assumed to process them in the order they were sent. Requests sent closer
// together (a crowd released at once) race each other to the server.
const orderGap = 10 * time.Millisecond

// admit admits one request now, and returns its ticket.
func (f *flight) admit(now time.Time) (t ticket) {
	t.held = true
	t.ordered = f.inflight == 0 || now.Sub(f.lastSend) >= orderGap
	f.seq++
	t.seq, t.sent = f.seq, now
	f.lastSend = now
	f.inflight++
	return t
}

// done records that an admitted request was answered (or failed).
func (f *flight) done() { f.inflight-- }

// count is how many admitted requests are in flight.
func (f *flight) count() int { return f.inflight }

// since is how many requests were admitted after the one numbered seq.
func (f *flight) since(seq uint64) int { return int(min(f.seq-seq, 1<<30)) }
