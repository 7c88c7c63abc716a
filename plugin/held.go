package main

// throttleTickMS is the tick period when requests may be held: a held
// request is released at most this late.
const throttleTickMS = 5

// maxHeld bounds the requests one worker holds at once; beyond it, requests
// that would be delayed are rejected with Retry-After instead, so a flood
// cannot pile up paused streams.
const maxHeld = 4096

// heldQueue is the per-worker list of paused requests, in release order.
// Releases are mostly in arrival order (each rule's reservations are
// monotonic), so insertion from the back is nearly always O(1).
type heldQueue struct {
	items []heldRequest
}

type heldRequest struct {
	_       [0]func() // not comparable: no equality function in the module
	id      uint32
	release int64
}

func (q *heldQueue) len() int { return len(q.items) }

// push adds a request to be released at release; false when full.
func (q *heldQueue) push(id uint32, release int64) bool {
	if len(q.items) >= maxHeld {
		return false
	}
	i := len(q.items)
	q.items = append(q.items, heldRequest{})
	for i > 0 && q.items[i-1].release > release {
		q.items[i] = q.items[i-1]
		i--
	}
	q.items[i] = heldRequest{id: id, release: release}
	return true
}

// remove forgets a request whose stream went away; it reports whether the
// request was still held (not yet released).
func (q *heldQueue) remove(id uint32) bool {
	for i, it := range q.items {
		if it.id == id {
			q.items = append(q.items[:i], q.items[i+1:]...)
			return true
		}
	}
	return false
}

// release calls resume, in order, for every request due at now.
func (q *heldQueue) release(now int64, resume func(id uint32)) {
	n := 0
	for n < len(q.items) && q.items[n].release <= now {
		n++
	}
	if n == 0 {
		return
	}
	due := make([]heldRequest, n)
	copy(due, q.items[:n])
	q.items = append(q.items[:0], q.items[n:]...)
	for _, it := range due {
		resume(it.id)
	}
}
