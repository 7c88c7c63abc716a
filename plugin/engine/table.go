package engine

import (
	"encoding/binary"
	"errors"
	"strconv"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/plugin/engine/flight"
	"github.com/sluicehq/sluice/plugin/internal/lease"
	"github.com/sluicehq/sluice/shared/limit"
)

// The state table keeps every client state in a fixed number of shared-data
// keys, so Envoy's memory is bounded whatever the number of clients (shared
// data has no delete: a key per client would grow forever under a flood of
// addresses).
//
// Every rule has a region of its own: its share of max_keys (config
// Rule.Share) as buckets under a key prefix derived from the rule's ID
// only, and one overflow state. A flood of new keys on one rule fills its
// own region and nobody else's, and the keys of a rule never depend on the
// other rules, so its states survive a configuration update that leaves it
// unchanged.
//
// A client's fingerprint (64-bit keyed hash of rule and client key) picks
// one bucket of its rule's region (jump consistent hash: when the share
// changes, because a rule was added or removed, only the clients of the
// buckets added or dropped move). A bucket is one shared-data value of
// SlotsPerBucket slots, each slotSize bytes:
//
//	fingerprint uint64 | expiry int64 (ns) | limit.State (16 bytes)
//
// expiry is when the state will be fully recovered; from then on the slot is
// indistinguishable from an empty one and may be reused by another client.
// An active client's slot is never taken, so a flood of new addresses cannot
// buy anyone a fresh budget. When every slot of a client's bucket is
// active, the client is decided on its rule's overflow state (one slot under
// its own key): all such clients of the rule are limited together, like one
// client. No rule can take another's room, so a full table is never a
// reason for on_error.
const (
	SlotsPerBucket = 8
	slotSize       = 8 + 8 + limit.StateSize
	// BucketSize is the size of one shared-data value.
	BucketSize = SlotsPerBucket * slotSize
	// MaxCASRetries bounds the compare-and-swap loop of one update.
	MaxCASRetries = flight.MaxCASRetries
	// createCAS is the CAS passed when creating a missing key. A set on a
	// missing key succeeds whatever the CAS, but if another worker created
	// the key in between, a non-zero CAS that the new key does not carry
	// makes our set fail (instead of overwriting its state) and we retry
	// with a get. Zero would be unconditional.
	createCAS = ^uint32(0)
	// overflowFP marks the state in a rule's overflow key.
	overflowFP = flight.OverflowFP
)

// Errors of the table.
var (
	// ErrContention: MaxCASRetries conflicting updates in a row.
	ErrContention = flight.ErrContention
	// ErrFull: a global rule's client found no free slot for its lease in
	// its bucket (the engine then uses the rule's overflow lease).
	ErrFull = errors.New("state table full")
)

// Slot kinds returned by Table.Update.
const (
	SlotOwn      = iota // the client's own slot
	SlotOverflow        // the rule's overflow state
)

// Region is a rule's part of the table.
type Region struct {
	_     [0]func() // not comparable: no equality function in the module
	ID    uint64    // the rule's ID (config.Rule.ID): its keys derive from it
	Share int       // client states it may keep, overflow state included
	// Life is the longest a state of the rule stays active: how long the
	// previous layout is still looked at after the share changed.
	Life time.Duration
	// Spill: the rule keeps clients whose bucket is full in the table's
	// spill pool, if it has one (pool.go).
	Spill bool
}

type region struct {
	_     [0]func() // not comparable: no equality function in the module
	id    uint64
	spill bool
	// seenWrites is 1 + the count of layout record writes (LayoutSignal,
	// mod 2^32) read before this table last read the record in locate
	// (0: none): while the count stays there, the view is the record's.
	seenWrites  uint32
	prefix      string
	buckets     uint64
	overflowKey string
	recordKey   string        // its layout record (layout.go)
	life        time.Duration // the longest a state of the rule stays active
	// prevBuckets is the region's bucket count before its share last
	// changed, until prevUntil (0: none); see layout.go. With newer set,
	// prevUntil is until when the newer layout reads this one (what a
	// renewal pushes), 0 for a third layout.
	prevBuckets uint64
	prevUntil   int64
	// newer is the bucket count of the layout recorded as current when
	// this table's is the previous one and still live (another
	// configuration of the same vm_id beside this one), 0 otherwise;
	// refreshed by RenewLayouts. Clients this table does not hold are
	// decided there (layout.go).
	newer uint64
}

// Table is the bounded client-state table of one worker. It is not safe for
// concurrent use (a proxy-wasm VM is single-threaded); workers share the
// store, not the Table.
type Table struct {
	store   Store
	signal  LayoutSignal // the store's, if it has one
	bufs    BufferStore  // the store's, if it reads into buffers (fetch)
	regions []region
	total   int    // buckets of all regions
	starts  []int  // where each region's entries start in Key's enumeration
	key     []byte // scratch for the key of a bucket
	// keyRegion is the region whose prefix key starts with (bucketKey).
	keyRegion *region
	fresh     [BucketSize]byte // the bucket being updated when the store did not hand back one of its own
	oldKey    []byte           // the same two for a bucket of the previous layout
	old       [BucketSize]byte
	record    [BucketSize]byte // a layout record read by a decision (renewLayout)
	Stats     TableStats
	// Overflow counts, per region, the decisions made on its overflow state.
	Overflow []uint64
	// pool is the spill pool (pool.go), nil without one.
	pool *pool
}

// TableStats counts what the table did, for metrics.
type TableStats struct {
	CASRetries   uint64 // conflicting sets retried
	CASExhausted uint64 // updates that gave up after MaxCASRetries
	Overflow     uint64 // decisions made on an overflow state
	Full         uint64 // decisions with no state at all: none since every rule has its overflow state
	Corrupt      uint64 // values of a wrong size, reset
	StoreErrors  uint64 // get/set errors other than a CAS mismatch
}

// NewTable returns a table of one region per rule. A region of share n
// holds (n-1)/SlotsPerBucket buckets (at least one) and its overflow state,
// never more than n states: the shares are a hard bound.
func NewTable(store Store, regions []Region) *Table {
	t := &Table{store: store, Overflow: make([]uint64, len(regions)),
		starts: make([]int, 0, len(regions)), regions: make([]region, 0, len(regions))}
	// Asserted once: an assertion to an interface looks the pair up in
	// the runtime's table, several calls in the module per read.
	t.signal, _ = store.(LayoutSignal)
	t.bufs, _ = store.(BufferStore)
	for _, r := range regions {
		n := uint64(max(1, (r.Share-1)/SlotsPerBucket))
		t.starts = append(t.starts, t.total+len(t.starts))
		p := "sluice.v2." + strconv.FormatUint(r.ID, 16) + "."
		t.regions = append(t.regions, region{id: r.ID, spill: r.Spill, prefix: p, buckets: n, overflowKey: p + "o", recordKey: p + "n", life: r.Life})
		t.total += int(n)
		if cap(t.key) < len(p)+20 {
			t.key, t.oldKey = make([]byte, 0, len(p)+20), make([]byte, 0, len(p)+20)
		}
	}
	return t
}

// Buckets returns the number of buckets of all regions (the shared-data
// keys the table may use, besides one overflow key per region).
func (t *Table) Buckets() int { return t.total }

// Regions returns the number of regions (rules).
func (t *Table) Regions() int { return len(t.regions) }

// RegionBuckets returns the number of buckets of region r.
func (t *Table) RegionBuckets(r int) int { return int(t.regions[r].buckets) }

// Capacity returns the number of client states the table can hold, overflow
// states included.
func (t *Table) Capacity() int { return t.total*SlotsPerBucket + len(t.regions) }

// RegionCapacity returns the number of client states region r can hold,
// its overflow state included.
func (t *Table) RegionCapacity(r int) int { return int(t.regions[r].buckets)*SlotsPerBucket + 1 }

// Key returns the shared-data key of entry i of the table's enumeration
// (for the census): every region's buckets, then its overflow key. It
// returns the region and whether the key is an overflow key.
func (t *Table) Key(i int) (key string, r int, overflow bool) {
	k, r, overflow := t.appendKey(nil, i)
	return string(k), r, overflow
}

// appendKey is Key appending the key to dst: the census reads a fifth of
// the table every second, and a string per key was most of a VM's
// garbage.
func (t *Table) appendKey(dst []byte, i int) ([]byte, int, bool) {
	// Region r's entries start at r plus the buckets before it: a binary
	// search, not a walk over a thousand regions per key.
	lo, hi := 0, len(t.regions)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if t.starts[mid]+int(t.regions[mid].buckets)+1 <= i {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if i < 0 {
		return dst, -1, false
	}
	if lo == len(t.regions) {
		// Past the regions: the spill pool's buckets, as region
		// len(regions) (their states are several rules').
		j := i - t.total - len(t.regions)
		if t.pool == nil || j >= int(t.pool.buckets) {
			return dst, -1, false
		}
		return strconv.AppendInt(append(dst, t.pool.prefix...), int64(j), 10), lo, false
	}
	rg, j := &t.regions[lo], i-t.starts[lo]
	if j < int(rg.buckets) {
		return strconv.AppendInt(append(dst, rg.prefix...), int64(j), 10), lo, false
	}
	return append(dst, rg.overflowKey...), lo, true
}

// Keys returns the number of entries of the enumeration of Key.
func (t *Table) Keys() int { return t.total + len(t.regions) + t.PoolBuckets() }

// Op is what Update does to a state.
type Op uint8

const (
	// Charge decides and, if admitted, stores the charged state.
	Charge Op = iota
	// Peek decides without storing anything.
	Peek
	// Admit decides whether a request charged after its response may pass
	// (limit.Admit) without storing anything.
	Admit
	// Debit charges n units unconditionally (limit.Debit): the cost of an
	// admitted request, known from its response.
	Debit
	// RefundHeld gives back one charge of a request that was to be
	// released at a time (limit.RefundHeld), if no reservation was made
	// after it (UpdateHeld).
	RefundHeld
)

// spot is where a client's state is: slot i of the value val of key, read
// under cas; kind says whether it is the rule's overflow state. A state
// found in the previous layout is copied into a free slot of the client's
// current bucket: from is then the slot it moves out of on a write
// (layout.go), val nil otherwise.
type spot struct {
	key  string
	val  []byte
	cas  uint32
	i    int
	kind int
	fp   uint64 // the fingerprint the slot is marked with
	from prevSlot
}

func (sp *spot) slot() []byte { return sp.val[sp.i*slotSize : (sp.i+1)*slotSize] }

// locate reads client fp's spot in rule's region into sp: its own slot,
// else a free one of its bucket, else the rule's overflow state. (Into the
// caller's spot: a spot is 160 bytes, which a return copies once more.)
//
// A client without an active state in its bucket gets a fresh one unless
// another layout holds it. This table's view of the layouts is up to a
// second old (RenewLayouts), and a worker of another configuration that
// started meanwhile may be creating the client's state in its own layout
// now (two states, twice the budget): the record is read first. One read
// for a client without an active state, none for the others, and none
// while no layout record was written since this table last read it
// (LayoutSignal, viewCurrent).
func (t *Table) locate(sp *spot, fp uint64, rule int, now int64) error {
	rg := &t.regions[rule]
	// bucketKey's work, without its call (every request reads a bucket).
	if t.keyRegion != rg {
		t.key, t.keyRegion = append(t.key[:0], rg.prefix...), rg
	}
	t.key = appendBucket(t.key[:len(rg.prefix)], jumpHash(fp, rg.buckets))
	key := unsafeString(t.key)
	// loadValue's read into buffers (the plugin's store), without its call.
	val, cas, found, err := []byte(nil), uint32(0), true, error(nil)
	if t.bufs == nil {
		val, cas, err = t.loadValue(key, BucketSize)
	} else if val, cas, found, err = t.bufs.GetInto(key, t.fresh[:]); err != nil || !found || len(val) != BucketSize {
		val, cas, err = t.loaded(val, cas, found, err, BucketSize, &t.fresh)
	}
	if err != nil {
		return err
	}
	*sp = spot{key: key, val: val, cas: cas, i: findSlot(val, fp, now), kind: SlotOwn, fp: fp}
	own := sp.i >= 0 && getUint64(val[sp.i*slotSize:]) == fp
	if own && active(val, sp.i, now) {
		return nil
	}
	// No active state: the layout record first (the doc comment), its
	// count's check without a call.
	if t.signal == nil {
		t.renewLayout(rg, now)
	} else if n, ok := t.signal.LayoutWrites(); !rg.viewCurrent(n, ok, now) {
		t.renewLayoutCounted(rg, n, ok, now)
	}
	if own && !rg.twoLayouts(now) {
		return nil
	}
	// Not in its bucket: left elsewhere by a change of layout? Not with
	// one layout and no slot marked as moving (elsewhere's first look,
	// without its call). (key and val stay valid: another bucket is read
	// into other buffers.)
	if findMoved(val, fp, now) >= 0 || rg.twoLayouts(now) {
		if ok, err := t.elsewhere(rg, sp, now); err != nil || ok {
			if err == errStaleView {
				// Renewed: the view names another layout now (at most once
				// more: the record is read only on a view naming a newer
				// layout, which it no longer does).
				return t.locate(sp, fp, rule, now)
			}
			return err
		}
	}
	if rg.spill && t.pool != nil {
		// In the pool, or to be put there (pool.go).
		if ps, ok, err := t.spill(rg, fp, now, sp.i < 0); err != nil || ok {
			*sp = ps
			return err
		}
	}
	if sp.i >= 0 {
		return nil
	}
	*sp, err = t.overflow(rule)
	return err
}

// overflow reads rule's overflow state.
func (t *Table) overflow(rule int) (spot, error) {
	key := t.regions[rule].overflowKey
	val, cas, err := t.loadValue(key, slotSize)
	if err != nil {
		return spot{}, err
	}
	return spot{key: key, val: val, cas: cas, kind: SlotOverflow, fp: overflowFP}, nil
}

func (t *Table) countOverflow(rule, kind int) {
	if kind == SlotOverflow {
		t.Stats.Overflow++
		t.Overflow[rule]++
	}
}

// Update applies op for client fingerprint fp of rule under lim at now,
// with a CAS loop so that concurrent workers never lose an update.
func (t *Table) Update(op Op, fp uint64, rule int, lim *limit.Limit, now int64, n int64, maxDelay time.Duration) (limit.Decision, int, error) {
	return t.update(op, fp, rule, lim, now, n, maxDelay, 0)
}

// UpdateHeld applies RefundHeld for a charge of n units of a request to be
// released at release (ns).
// It reports whether the charge was given back.
func (t *Table) UpdateHeld(fp uint64, rule int, lim *limit.Limit, now, n, release int64) (bool, error) {
	d, _, err := t.update(RefundHeld, fp, rule, lim, now, n, 0, release)
	return d.Allowed, err
}

func (t *Table) update(op Op, fp uint64, rule int, lim *limit.Limit, now int64, n int64, maxDelay time.Duration, release int64) (limit.Decision, int, error) {
	fp = max(fp, 1) // 0 marks an empty slot
	var sp spot
	for attempt := 0; attempt < MaxCASRetries; attempt++ {
		if err := t.locate(&sp, fp, rule, now); err != nil {
			return limit.Decision{}, 0, err
		}
		s := sp.slot()
		mine := getUint64(s[0:8]) == sp.fp
		var st limit.State
		if mine { // limit.DecodeState without its call (TestSlotStateAsLimits)
			st = limit.State{A: int64(getUint64(s[16:24])), B: int64(getUint64(s[24:32]))}
		}
		var d limit.Decision
		switch op {
		case RefundHeld:
			next := lim.RefundHeld(st, now, n, release)
			if !mine || next == st {
				return d, sp.kind, nil // none, or kept: a hole in the line
			}
			st, d.Allowed = next, true // Allowed: given back
		case Debit:
			st, d = lim.Debit(st, now, n)
		case Admit:
			d = lim.Admit(st, now)
			t.countOverflow(rule, sp.kind)
			return d, sp.kind, nil
		default:
			st, d = lim.AllowN(st, now, n, maxDelay)
			if op == Peek || !d.Allowed {
				t.countOverflow(rule, sp.kind)
				return d, sp.kind, nil
			}
		}
		putUint64(s[16:24], uint64(st.A)) // st.Encode(s[16:]), without its call
		putUint64(s[24:32], uint64(st.B))
		retry, err := false, error(nil)
		if expiry := lim.Expiry(st, now); sp.from.val == nil {
			// write's case (no move out of the previous layout): storeSlot's
			// work without its call (every admitted request writes).
			putUint64(s[0:8], sp.fp)
			putUint64(s[8:16], uint64(expiry))
			if retry, err = t.store.Set(sp.key, sp.val, sp.cas); err != nil {
				t.Stats.StoreErrors++
			} else if retry {
				t.Stats.CASRetries++
			}
		} else {
			retry, err = t.write(&sp, s, expiry)
		}
		if err != nil {
			return limit.Decision{}, sp.kind, err
		}
		if retry {
			continue
		}
		t.countOverflow(rule, sp.kind)
		return d, sp.kind, nil
	}
	t.Stats.CASExhausted++
	return limit.Decision{}, 0, ErrContention
}

// Modifier computes the new state of a slot for Table.Modify
// (flight.Modifier: the in-flight rules' transitions).
type Modifier = flight.Modifier

// Modify updates the state of client fp of rule with m under the same CAS
// loop as Update (the concurrency rules' transitions, which need more than
// charge/refund). onlyOverflow addresses the rule's overflow state
// directly: a client that was given the overflow state must give its
// slots back there even if a slot of its bucket has freed since. A state
// whose expiry has passed reads as the zero state.
func (t *Table) Modify(fp uint64, rule int, onlyOverflow bool, now int64, m Modifier) (int, error) {
	if fp == 0 {
		fp = 1
	}
	for attempt := 0; attempt < MaxCASRetries; attempt++ {
		var sp spot
		var err error
		if onlyOverflow {
			sp, err = t.overflow(rule)
		} else {
			err = t.locate(&sp, fp, rule, now)
		}
		if err != nil {
			return 0, err
		}
		s := sp.slot()
		var st limit.State
		if getUint64(s[0:8]) == sp.fp && int64(getUint64(s[8:16])) > now {
			st = limit.DecodeState(s[16:])
		}
		next, expiry, write := m.Modify(st, now, sp.kind == SlotOverflow)
		if !write || next == st {
			t.countOverflow(rule, sp.kind)
			return sp.kind, nil
		}
		next.Encode(s[16:])
		retry, err := t.write(&sp, s, expiry)
		if err != nil {
			return sp.kind, err
		}
		if retry {
			continue
		}
		t.countOverflow(rule, sp.kind)
		return sp.kind, nil
	}
	t.Stats.CASExhausted++
	return 0, ErrContention
}

// active reports whether slot i of bucket val holds a state that has not
// expired at now.
func active(val []byte, i int, now int64) bool {
	return int64(getUint64(val[i*slotSize+8:])) > now
}

// findSlot returns fp's own slot of the bucket val, else its first free
// slot, else -1.
//
// The eight slots are read without a loop: on wasm a loop's every turn
// costs a pass through the function's dispatch, and a fresh client's
// bucket is read to its end.
func findSlot(val []byte, fp uint64, now int64) int {
	b := (*[BucketSize]byte)(val) // one length check for the eight slots
	free := -1
	if own, fr := slotState(b, 0, fp, now); own {
		return 0
	} else if fr && free < 0 {
		free = 0
	}
	if own, fr := slotState(b, 1, fp, now); own {
		return 1
	} else if fr && free < 0 {
		free = 1
	}
	if own, fr := slotState(b, 2, fp, now); own {
		return 2
	} else if fr && free < 0 {
		free = 2
	}
	if own, fr := slotState(b, 3, fp, now); own {
		return 3
	} else if fr && free < 0 {
		free = 3
	}
	if own, fr := slotState(b, 4, fp, now); own {
		return 4
	} else if fr && free < 0 {
		free = 4
	}
	if own, fr := slotState(b, 5, fp, now); own {
		return 5
	} else if fr && free < 0 {
		free = 5
	}
	if own, fr := slotState(b, 6, fp, now); own {
		return 6
	} else if fr && free < 0 {
		free = 6
	}
	if own, fr := slotState(b, 7, fp, now); own {
		return 7
	} else if fr && free < 0 {
		free = 7
	}
	return free
}

// slotState reads slot i of bucket b: whether it is fp's, and whether it
// is free at now (empty, or expired).
// Small enough to be inlined: the words are loaded as getUint64 loads them
// (little-endian, as wasm's memory; the plugin runs only there, and the
// engine's tests on little-endian machines), without its slicing.
func slotState(b *[BucketSize]byte, i int, fp uint64, now int64) (own, free bool) {
	f := *(*uint64)(unsafe.Pointer(&b[i*slotSize]))
	return f == fp, f == 0 || *(*int64)(unsafe.Pointer(&b[i*slotSize+8])) <= now
}

func (t *Table) bucketKey(rg *region, fp uint64) string {
	if t.keyRegion != rg {
		// t.key starts with the prefix of the region it was built for
		// last: most tables read one region after another of the same.
		t.key, t.keyRegion = append(t.key[:0], rg.prefix...), rg
	}
	t.key = appendBucket(t.key[:len(rg.prefix)], jumpHash(fp, rg.buckets))
	return unsafeString(t.key)
}

// jumpHash is Lamping and Veach's jump consistent hash (flight.JumpHash).
func jumpHash(key, n uint64) uint64 { return flight.JumpHash(key, n) }

// putUint64 and getUint64 use encoding/binary's unrolled form, which the
// compiler turns into one 64-bit store or load (on wasm too); a byte loop
// stays a loop of eight.
func putUint64(b []byte, v uint64) { binary.LittleEndian.PutUint64(b, v) }

func getUint64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// Lease applies fn to the lease state of fingerprint fp (a global rule's
// client) in rule's region with a CAS loop, and returns the state fn left.
// A lease lives in a slot of its own (a lease is one client's hits at the
// service) until expiry, the end of its window: a slot whose expiry has
// passed reads as a zero state and may be reused. fp OverflowLease
// addresses the rule's overflow state instead, the lease of the rule's
// clients that found no slot (they share one descriptor at the service).
// fn returns false to leave the store unchanged. ErrFull: no free slot.
//
// A client whose fingerprint happens to be OverflowLease (one in 2^64)
// shares the overflow lease.
func (t *Table) Lease(fp uint64, rule int, now, expiry int64, fn func(*lease.State) bool) (lease.State, error) {
	if fp == 0 {
		fp = 2
	}
	for attempt := 0; attempt < MaxCASRetries; attempt++ {
		sp, err := t.leaseSpot(fp, rule, now)
		if err != nil {
			return lease.State{}, err
		}
		s := sp.slot()
		var st lease.State
		if getUint64(s[0:8]) == sp.fp && int64(getUint64(s[8:16])) > now {
			st = lease.Decode(s[16:])
		}
		if !fn(&st) {
			return st, nil
		}
		st.Encode(s[16:])
		retry, err := t.write(&sp, s, expiry)
		if err != nil {
			return lease.State{}, err
		}
		if retry {
			continue
		}
		return st, nil
	}
	t.Stats.CASExhausted++
	return lease.State{}, ErrContention
}

// leaseSpot reads the slot of lease fp: the rule's overflow state for
// OverflowLease, else fp's own or a free slot of its bucket (ErrFull if
// none).
func (t *Table) leaseSpot(fp uint64, rule int, now int64) (spot, error) {
	if fp == overflowFP {
		return t.overflow(rule)
	}
	key := t.bucketKey(&t.regions[rule], fp)
	val, cas, err := t.loadValue(key, BucketSize)
	if err != nil {
		return spot{}, err
	}
	sp := spot{key: key, val: val, cas: cas, i: findSlot(val, fp, now), kind: SlotOwn, fp: fp}
	rg := &t.regions[rule]
	if sp.i < 0 || getUint64(val[sp.i*slotSize:]) != fp || (!active(val, sp.i, now) && rg.twoLayouts(now)) {
		if ok, err := t.elsewhere(rg, &sp, now); err != nil || ok {
			return sp, err
		}
	}
	if sp.i < 0 {
		return spot{}, ErrFull
	}
	return sp, nil
}

// OverflowQuiet is how long a rule must go without a decision on its
// overflow state before the next one starts a new episode (and a new log
// line).
const OverflowQuiet = time.Minute

// StartOverflow records, process-wide, that rule r decided on its overflow
// state at now, and reports whether that starts an episode: the first such
// decision after OverflowQuiet without any. Exactly one worker sees true
// for an episode (the CAS on the rule's episode key decides), so a flood
// costs one log line, not one per request or per worker. Called from the
// tick, not the request path.
func (t *Table) StartOverflow(r int, now int64) bool {
	key := t.regions[r].prefix + "log"
	var b [8]byte
	putUint64(b[:], uint64(now+int64(OverflowQuiet)))
	val, cas, found, err := t.store.Get(key)
	if err != nil {
		return false
	}
	if !found {
		cas = createCAS
	}
	ongoing := found && len(val) == 8 && int64(getUint64(val)) > now
	mismatch, err := t.store.Set(key, b[:], cas)
	return !ongoing && err == nil && !mismatch
}
