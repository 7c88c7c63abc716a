package engine

import (
	"errors"
	"strconv"
	"time"
	"unsafe"
)

// A rule's share of the table changes when another rule without its own
// max_keys is added or removed, or max_keys changes: its region gets more
// or fewer buckets. The jump hash keeps most clients in their bucket; the
// others (those of the buckets added or dropped) would start clean. So that
// they keep their state too, every region records its bucket count in
// shared data (key <prefix>n: current, previous, and until when the
// previous layout may still hold active states): for the lifetime of a
// state after a change, a client not found in its bucket is looked for in
// its bucket of the previous layout. That costs a read only for clients not
// in their bucket (new ones, and the moved), only during that time, and no
// memory: the previous layout's keys exist already (shared data has no
// delete).
//
// A state found there moves into the client's current bucket on its first
// write, so an active client keeps it however long it stays active. The
// move is two writes on two keys, each a CAS, and loses no update: first
// the old slot is marked as moving (its fingerprint becomes movedFP(fp)),
// which freezes it (no writer updates a marked slot in place, and it is not
// free until its expiry), then the state, with the write's own change, is
// stored in a free slot of the current bucket under that bucket's CAS,
// read while the client was not there. Whoever writes the client next,
// on any worker, finds the new slot first; one that read the current
// bucket before it existed fails its CAS and reads again. A write that
// finds a marked slot (a move under way, or one whose second write failed)
// completes the move from the frozen state. If the current bucket is full,
// an unmarked state is updated where it is, and a marked one cannot be:
// the client is then decided on the rule's overflow state, as a client
// whose bucket is full. A marked slot is left until its expiry, not
// cleared: a reader that saw the current bucket before the move finds the
// frozen state there rather than nothing (a fresh budget); until then the
// census may count the client twice.
//
// The workers of the previous configuration keep deciding requests while
// Envoy drains its connections. Such a worker finds a moved client marked
// in its own current bucket: it reads the layout record, which names the
// newer layout, and decides the client where that layout keeps it (elsewhere,
// forward), completing the move if needed, so both configurations share one
// state.
//
// A worker's view of the record is renewed once a second (RenewLayouts),
// but a worker of another configuration can start at any moment and make
// its layout current. So a worker reads the record again before it gives
// a client a fresh state (locate: a client without an active state in its
// bucket) and once it has frozen a state to move it into its own layout
// (markMoving), and before it takes back a frozen state in a newer layout
// (newer): with a stale view, the two configurations created or kept the
// client's state each in its own layout, two budgets (about one seed in
// 4,000 of TestLayoutsUnderRandomInterleavings). Before a fresh state the
// read is skipped while the store's count of record writes has not moved
// since this table's last read (LayoutSignal, viewCurrent). What
// is left is a worker of the other configuration adopting its layout and
// deciding the client between this worker's read of the record (or of the
// count) and its write.

// AdoptLayouts records each region's bucket count in shared data at now,
// learning its previous one when the count changed. Every worker calls it
// when it builds its table: the first worker with a new layout records the
// change, the others read it.
func (t *Table) AdoptLayouts(now int64) {
	for r := range t.regions {
		t.adoptLayout(&t.regions[r], now)
	}
}

func (t *Table) adoptLayout(rg *region, now int64) {
	key := rg.recordKey
	for attempt := 0; attempt < 4; attempt++ {
		val, cas, found, err := t.store.Get(key)
		if err != nil {
			return
		}
		if !found {
			cas = createCAS
		} else if len(val) == 24 {
			cur, prev, until := getUint64(val[0:8]), getUint64(val[8:16]), int64(getUint64(val[16:24]))
			if cur == rg.buckets {
				rg.prevBuckets, rg.prevUntil = prev, until
				return
			}
			rg.prevBuckets, rg.prevUntil = cur, now+int64(rg.life)
		}
		var b [24]byte
		putUint64(b[0:8], rg.buckets)
		putUint64(b[8:16], rg.prevBuckets)
		putUint64(b[16:24], uint64(rg.prevUntil))
		mismatch, err := t.store.Set(key, b[:], cas)
		if err == nil && !mismatch {
			t.layoutWritten()
		}
		if err != nil || !mismatch {
			return
		}
		// Another worker recorded a layout meanwhile: read it.
	}
}

// RenewLayouts keeps two layouts of a region that are live at once
// reading each other, for as long as both are: Envoy runs two
// configurations of one vm_id side by side while it drains the connections
// of a replaced one, and for good when two listeners (or filter chains, or
// per-route configurations) carry configurations that differ but share
// rules (a rule's share of max_keys depends on the other rules, so the same
// rule has another bucket count in each). Without this, the newer layout
// read the previous one only for a state's life after it was adopted:
// after that a client that came in through the other configuration (a new
// client there, or one whose state had expired) had a state in each
// layout, and twice the budget. Every worker calls it about once a second:
// a worker whose layout is the record's previous one (it is still alive)
// pushes the record's "until" to a state's life ahead; a worker whose
// layout is the current one re-reads until when the previous is read. When
// the previous layout's last worker is gone, its states are read for one
// more life, as after any change. A third live layout (the record holds
// two) decides the clients it does not hold in the current one; a client
// it holds an active state of keeps it, and the current layout's tables,
// which do not read this layout, give that client a second state until
// the first expires.
func (t *Table) RenewLayouts(now int64) {
	for r := range t.regions {
		t.renewLayout(&t.regions[r], now)
	}
}

// A decision about to give a client a fresh state renews rg's view first
// (Table.locate), unless the store's count of layout record writes
// (LayoutSignal) is what it was when this table last read rg's record
// there (viewCurrent): no record was written since, so the view is the
// record's (the writes a table makes itself count too), unless the read
// would renew the record (a table of the previous layout, a quarter of a
// life since the last renewal), as it does when it is not skipped. The
// count is read before the record: a write between the two is counted
// after the count read, and the next decision reads the record again.
// What is left is what the record read leaves (the top of this file): a
// worker of another configuration that writes the record, counts it and
// decides the client between this read of the count and this worker's
// write.

// viewCurrent reports that rg's view is the record's by the count n of
// record writes (ok: the count is served), so that the record is not
// read. Small enough to be inlined: every fresh state asks it.
func (rg *region) viewCurrent(n uint64, ok bool, now int64) bool {
	return ok && uint32(n)+1 == rg.seenWrites && !(rg.newer != 0 && rg.prevUntil != 0 && rg.renewalDue(rg.prevUntil, now))
}

// renewLayoutCounted renews rg's view when viewCurrent does not hold,
// remembering the count n it read before.
func (t *Table) renewLayoutCounted(rg *region, n uint64, ok bool, now int64) {
	rg.seenWrites = 0
	if t.renewLayout(rg, now) && ok {
		rg.seenWrites = uint32(n) + 1
	}
}

// renewalDue reports whether a record of the previous layout that lasts
// until until is to be renewed at now: once a quarter of its life has
// passed.
func (rg *region) renewalDue(until, now int64) bool { return until-now < int64(rg.life)*3/4 }

// layoutWritten counts a write of a layout record (LayoutSignal).
func (t *Table) layoutWritten() {
	if t.signal != nil {
		t.signal.LayoutWritten()
	}
}

// renewLayout is RenewLayouts for region rg. Decisions call it too, where
// a stale view would give a client two states (see the top of this file).
// It reports whether the view is the record's (read, or none recorded).
func (t *Table) renewLayout(rg *region, now int64) bool {
	key := rg.recordKey
	val, cas, err := t.loadInto(key, 24, &t.record) // no garbage: decisions call it
	if err != nil {
		return false
	}
	if cas == createCAS {
		return true
	}
	cur, prev, until := getUint64(val[0:8]), getUint64(val[8:16]), int64(getUint64(val[16:24]))
	rg.newer = 0
	switch {
	case cur == rg.buckets:
		rg.prevBuckets, rg.prevUntil = prev, until
	case prev == rg.buckets:
		// Clients this table does not hold are decided in the newer
		// layout; pulling states out of it into this one (the
		// previous layout as this table adopted it) would only move
		// them back and forth.
		rg.newer, rg.prevBuckets, rg.prevUntil = cur, 0, until
		if !rg.renewalDue(until, now) {
			return true
		}
		// Renewed when a quarter of the life has passed: a write a
		// few times per life, not every second for long lives. A
		// CAS mismatch (another worker renewed, or a new layout was
		// adopted) is left to the next call.
		var b [24]byte
		copy(b[:], val)
		putUint64(b[16:24], uint64(now+int64(rg.life)))
		if mismatch, err := t.store.Set(key, b[:], cas); err == nil && !mismatch {
			t.layoutWritten()
		}
	case cur != 0:
		// A third live layout: the record holds two (one of two
		// long-lived listeners reloaded with another share, its old
		// workers draining). Clients this table does not hold are
		// decided in the current layout, as by the previous one's
		// tables; those it holds stay here until they expire (the
		// current layout does not read this one).
		rg.newer, rg.prevBuckets, rg.prevUntil = cur, 0, 0
	}
	return true
}

// errStaleView: the table's view of the layouts was out of date; it is
// renewed, and the client is to be looked for again (locate).
var errStaleView = errors.New("sluice: layout view renewed")

// movedFP marks the slot of client fp in its bucket of the previous layout
// once its state is moving to its current bucket.
func movedFP(fp uint64) uint64 { return fp ^ 0x9e3779b97f4a7c15 }

// prevSlot is a client's slot in its bucket of the previous layout that
// its state moves out of (a spot's from): slot i of val, read under cas.
type prevSlot struct {
	key    string
	val    []byte
	cas    uint32
	i      int
	marked bool // already marked as moving
	// stale: the destination slot is the client's own, expired (see
	// clearStale).
	stale bool
	// rg is the region of a move out of its previous layout, at the time
	// of the decision (see markMoving).
	rg *region
	at int64
}

// elsewhere looks for client sp.fp's state outside its current bucket,
// where a change of layout left it, for sp, the client's spot in that
// bucket (sp.i its free slot, -1 if none). A slot of the bucket marked as
// the client's moving out (moved) means its state was moved out: if the
// layout record names a newer layout (this worker runs the configuration
// before it, whose connections Envoy drains), the client is decided where
// that layout keeps it (forward). Otherwise it is looked for in its bucket of the
// previous layout (previous), and a marked slot with no state found there
// is the client's (a move that found its destination full, before the
// layout changed back): it is taken back as it is. It reports whether sp
// now holds the state; false with sp.i -1 when the client is to be decided
// on the rule's overflow state.
func (t *Table) elsewhere(rg *region, sp *spot, now int64) (bool, error) {
	moved := findMoved(sp.val, sp.fp, now)
	if moved >= 0 {
		if ok, newer, err := t.forward(rg, sp, moved, now); err != nil || newer {
			return ok, err
		}
	}
	dest := sp.i
	if moved >= 0 {
		dest = moved // no other slot of the bucket for one client
	}
	if rg.prevBuckets != 0 && now < rg.prevUntil { // previous's first check, without its call
		if ok, err := t.previous(rg, sp, dest, now); err != nil || ok {
			return ok, err
		}
	}
	if moved >= 0 {
		sp.i = moved
		putUint64(sp.slot()[0:8], sp.fp)
		return true, nil
	}
	if rg.newer != 0 {
		return t.newer(rg, sp, now)
	}
	return false, nil
}

// twoLayouts reports whether a client of rg may have its state in another
// layout than this table's: the previous one is still read, or this
// table's layout is the previous of a live newer one. A client's own slot
// that expired is then not the end of the search: the client may have been
// active through the other configuration meanwhile.
func (rg *region) twoLayouts(now int64) bool {
	return rg.newer != 0 || (rg.prevBuckets != 0 && now < rg.prevUntil)
}

// newer decides client sp.fp, which this table (of the previous layout,
// live beside a newer one: rg.newer) does not hold, where the newer layout
// keeps it: its slot there, active or not, else its state frozen there by
// an unfinished move, else a free one, so that both configurations decide
// it on one state. With no room there it reports
// false and the client is decided here, as before.
func (t *Table) newer(rg *region, sp *spot, now int64) (bool, error) {
	newer := rg.newer
	b := jumpHash(sp.fp, newer)
	if b == jumpHash(sp.fp, rg.buckets) {
		return false, nil
	}
	mine := sp.i >= 0 && getUint64(sp.slot()[0:8]) == sp.fp // an expired slot here
	key, val, cas, err := t.readOld(rg, b)
	if err != nil {
		return false, err
	}
	i := findSlot(val, sp.fp, now)
	if m := findMoved(val, sp.fp, now); m >= 0 && !mine && (i < 0 || getUint64(val[i*slotSize:]) != sp.fp) {
		// Frozen there by a move into this layout that never completed
		// (this layout was current then, and its bucket had no room): the
		// client's state, taken back as it is, as elsewhere does. Or by
		// a move under way, of a worker whose configuration started
		// since this table renewed its view: this layout is current
		// again, and the state is on its way here. The record says
		// which: in the second case the client is looked for again with
		// the view renewed (errStaleView), and joins that move.
		if t.renewLayout(rg, now); rg.newer != newer {
			return false, errStaleView
		}
		i = m
		putUint64(val[m*slotSize:], sp.fp)
	}
	if i < 0 {
		return false, nil
	}
	*sp = spot{key: key, val: val, cas: cas, i: i, kind: SlotOwn, fp: sp.fp}
	return true, nil
}

// previous looks for client sp.fp's active state in its bucket of rg's
// previous layout, while that layout may hold some. Found, sp becomes slot
// dest of its current bucket (if >= 0) with the state copied in, to move
// it there on a write (sp.from); with no such slot, the old slot itself,
// unless it is marked (frozen): then sp.i is -1 (the overflow state). A
// slot holding the state is preferred to one marked as moving it. It
// reports whether sp now holds the state.
func (t *Table) previous(rg *region, sp *spot, dest int, now int64) (bool, error) {
	fp := sp.fp
	if rg.prevBuckets == 0 || now >= rg.prevUntil {
		return false, nil
	}
	b := jumpHash(fp, rg.prevBuckets)
	if b == jumpHash(fp, rg.buckets) {
		return false, nil
	}
	key, val, cas, err := t.readOld(rg, b)
	if err != nil {
		return false, err
	}
	j, marked := findSlotOrMoved(val, fp, now)
	switch {
	case j < 0:
		return false, nil
	case marked && sp.i >= 0 && getUint64(sp.slot()[0:8]) == fp:
		// The client's state moved out of there into its own slot here,
		// which has expired since (two layouts live: see locate): the
		// frozen state is older than that slot, not a newer one.
		return false, nil
	case dest >= 0:
		stale := getUint64(sp.val[dest*slotSize:]) == fp
		sp.i = dest
		sp.from = prevSlot{key: key, val: val, cas: cas, i: j, marked: marked, stale: stale, rg: rg, at: now}
		copy(sp.slot(), val[j*slotSize:(j+1)*slotSize])
		putUint64(sp.slot()[0:8], fp)
	case marked:
		sp.i = -1
		return false, nil
	default:
		*sp = spot{key: key, val: val, cas: cas, i: j, kind: SlotOwn, fp: fp}
	}
	return true, nil
}

// forward decides client sp.fp, marked as moving out of slot moved of its
// current bucket (sp), where the newer layout that rg's layout record
// names, if any (newer), keeps it: its own slot there, else a free one the
// frozen state moves into on a write, else (full) the overflow state
// (false, sp.i -1).
func (t *Table) forward(rg *region, sp *spot, moved int, now int64) (ok, newer bool, err error) {
	rec, _, found, err := t.store.Get(rg.recordKey)
	if err != nil || !found || len(rec) != 24 {
		return false, false, err
	}
	cur, prev, until := getUint64(rec[0:8]), getUint64(rec[8:16]), int64(getUint64(rec[16:24]))
	if cur == rg.buckets {
		// This layout is current again (another worker of its
		// configuration started since this table last renewed, see
		// RenewLayouts): the client's state may be in the other layout,
		// where previous looks only if it knows of it. With the view of
		// a table of the older layout (newer set, no previous), the
		// frozen slot here was taken back as it is, beside the client's
		// state in the other layout: two budgets.
		rg.newer, rg.prevBuckets, rg.prevUntil = 0, prev, until
	}
	if prev != rg.buckets || cur == rg.buckets || cur == 0 {
		return false, false, nil
	}
	b := jumpHash(sp.fp, cur)
	if b == jumpHash(sp.fp, rg.buckets) {
		return false, false, nil
	}
	key, val, cas, err := t.readOld(rg, b)
	if err != nil {
		return false, true, err
	}
	fp, from := sp.fp, prevSlot{key: sp.key, val: sp.val, cas: sp.cas, i: moved, marked: true}
	*sp = spot{key: key, val: val, cas: cas, i: findSlot(val, fp, now), kind: SlotOwn, fp: fp}
	switch {
	case sp.i < 0:
		return false, true, nil
	case getUint64(val[sp.i*slotSize:]) != fp:
		sp.from = from
		copy(sp.slot(), from.val[moved*slotSize:(moved+1)*slotSize])
		putUint64(sp.slot()[0:8], fp)
	}
	return true, true, nil
}

// readOld reads bucket b of rg in another layout than the current one,
// into the table's second buffer (t.old, its key in t.oldKey).
func (t *Table) readOld(rg *region, b uint64) (string, []byte, uint32, error) {
	t.oldKey = append(t.oldKey[:0], rg.prefix...)
	t.oldKey = strconv.AppendUint(t.oldKey, b, 10)
	key := unsafeString(t.oldKey)
	val, cas, err := t.loadInto(key, BucketSize, &t.old)
	return key, val, cas, err
}

// findSlotOrMoved returns client fp's active slot of the bucket val, else
// its active slot marked as moving out (marked), else -1.
func findSlotOrMoved(val []byte, fp uint64, now int64) (int, bool) {
	for j := 0; j < SlotsPerBucket; j++ {
		if s := val[j*slotSize:]; getUint64(s[0:8]) == fp && int64(getUint64(s[8:16])) > now {
			return j, false
		}
	}
	j := findMoved(val, fp, now)
	return j, j >= 0
}

// findMoved returns client fp's active slot of the bucket val marked as
// moving out, else -1.
//
// Without a loop, as findSlot: every fresh client's bucket is read here to
// its end.
func findMoved(val []byte, fp uint64, now int64) int {
	b, m := (*[BucketSize]byte)(val), movedFP(fp)
	switch {
	case movedAt(b, 0, m, now):
		return 0
	case movedAt(b, 1, m, now):
		return 1
	case movedAt(b, 2, m, now):
		return 2
	case movedAt(b, 3, m, now):
		return 3
	case movedAt(b, 4, m, now):
		return 4
	case movedAt(b, 5, m, now):
		return 5
	case movedAt(b, 6, m, now):
		return 6
	case movedAt(b, 7, m, now):
		return 7
	}
	return -1
}

// movedAt reports whether slot i of bucket b is marked m (movedFP) and
// active at now (loaded as slotState loads).
func movedAt(b *[BucketSize]byte, i int, m uint64, now int64) bool {
	return *(*uint64)(unsafe.Pointer(&b[i*slotSize])) == m && *(*int64)(unsafe.Pointer(&b[i*slotSize+8])) > now
}

// clearStale frees slot sp.i of the client's current bucket, its own
// expired slot that its state is about to move into, before the old slot is
// marked: between the mark and the store into the current bucket (which a
// CAS mismatch can put off), a reader that found the client's own expired
// slot there beside its marked state could not tell that state from one
// that moved into this slot earlier and outlived it (previous), and would
// take the expired slot, a fresh budget. Cleared, the slot is what it was
// already (free: expired) and the move goes as into any free slot. It
// always reports retry: the bucket is read again.
func (t *Table) clearStale(sp *spot) (retry bool, err error) {
	clear(sp.slot())
	if _, err := t.setCounted(sp.key, sp.val, sp.cas); err != nil {
		return false, err
	}
	return true, nil
}

// markMoving marks the old slot of sp's client as moving (movedFP) under
// the CAS it was read with; retry: it changed meanwhile, read again.
//
// A move out of the previous layout is into this table's, which must
// still be the record's current one once the state is frozen: a worker of
// the other configuration that started since this table renewed its view
// made its own layout current again, and it takes a frozen state whose
// move it cannot see back where it is (elsewhere). So the record is read
// after the mark; if it names another layout, the view is renewed and the
// client looked for again (retry): it is decided where that layout keeps
// it, the frozen state taken back there (newer) or already taken back.
func (t *Table) markMoving(sp *spot) (retry bool, err error) {
	f := &sp.from
	putUint64(f.val[f.i*slotSize:], movedFP(sp.fp))
	mismatch, err := t.setCounted(f.key, f.val, f.cas)
	if err != nil || mismatch {
		return mismatch, err
	}
	f.marked = true
	if f.rg != nil {
		if t.renewLayout(f.rg, f.at); f.rg.newer != 0 {
			return true, nil
		}
	}
	return false, nil
}

// stateLife is the longest a state of a rule with this window, limit,
// burst and max_delay stays active after it was written: a full refill
// (burst x window / limit) or two windows (a sliding window), whichever is
// longer, plus max_delay (a held request reserves up to that far ahead); a
// minute for the rules without a window (concurrency slots live 2 epochs).
func stateLife(window time.Duration, limit, burst int64, maxDelay time.Duration) time.Duration {
	if window <= 0 || limit <= 0 {
		return time.Minute
	}
	return max(2*window, window/time.Duration(limit)*time.Duration(burst)) + max(maxDelay, 0)
}
