package engine

import (
	"encoding/binary"
	"errors"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/plugin/internal/lease"
	"github.com/sluicehq/sluice/shared/limit"
)

// The state table keeps every client state in a fixed number of shared-data
// keys, so Envoy's memory is bounded whatever the number of clients (shared
// data has no delete: a key per client would grow forever under a flood of
// addresses).
//
// A client's fingerprint (64-bit keyed hash of rule and client key) picks
// one bucket; a bucket is one shared-data value of SlotsPerBucket regular
// slots plus one overflow slot, each slotSize bytes:
//
//	fingerprint uint64 | expiry int64 (ns) | limit.State (16 bytes)
//
// expiry is when the state will be fully recovered; from then on the slot is
// indistinguishable from an empty one and may be reused by another client.
// An active client's slot is never taken, so a flood of new addresses cannot
// buy anyone a fresh budget. When all regular slots of a bucket are active,
// new clients of a rule share that rule's overflow slot (they are limited
// together, like one client); if even that is held by another rule, the
// request is decided by on_error and counted.
const (
	SlotsPerBucket = 8
	slotSize       = 8 + 8 + limit.StateSize
	bucketSlots    = SlotsPerBucket + 1
	// BucketSize is the size of one shared-data value.
	BucketSize = bucketSlots * slotSize
	// MaxCASRetries bounds the compare-and-swap loop of one update.
	MaxCASRetries = 32
	// createCAS is the CAS passed when creating a missing key. A set on a
	// missing key succeeds whatever the CAS, but if another worker created
	// the key in between, a non-zero CAS that the new key does not carry
	// makes our set fail (instead of overwriting its state) and we retry
	// with a get. Zero would be unconditional.
	createCAS = ^uint32(0)
)

// Errors of the table.
var (
	// ErrContention: MaxCASRetries conflicting updates in a row.
	ErrContention = errors.New("shared data contention: CAS retries exhausted")
	// ErrFull: the client's bucket has no free slot and its overflow slot
	// belongs to another rule.
	ErrFull = errors.New("state table full")
)

// Slot kinds returned by Table.Update.
const (
	SlotOwn      = iota // the client's own slot
	SlotOverflow        // the rule's shared overflow slot of the bucket
)

// Table is the bounded client-state table of one worker. It is not safe for
// concurrent use (a proxy-wasm VM is single-threaded); workers share the
// store, not the Table.
type Table struct {
	store   Store
	buckets uint64
	prefix  string
	key     []byte           // scratch for the key of a bucket
	fresh   [BucketSize]byte // the bucket being updated when the store did not hand back one of its own
	Stats   TableStats
}

// TableStats counts what the table did, for metrics.
type TableStats struct {
	CASRetries   uint64 // conflicting sets retried
	CASExhausted uint64 // updates that gave up after MaxCASRetries
	Overflow     uint64 // decisions made on an overflow slot
	Full         uint64 // decisions with no slot at all
	Corrupt      uint64 // values of a wrong size, reset
	StoreErrors  uint64 // get/set errors other than a CAS mismatch
}

// NewTable returns a table of at most maxKeys client states in all, regular
// and overflow slots together (max_keys is a hard bound), and at least one
// bucket in store. The key prefix includes the table's shape, so a
// table of another size never misreads this one.
func NewTable(store Store, maxKeys int) *Table {
	if maxKeys < 1 {
		maxKeys = 1
	}
	n := uint64(maxKeys / bucketSlots)
	if n < 1 {
		n = 1
	}
	p := "sluice.v1." + strconv.FormatUint(n, 10) + "."
	return &Table{store: store, buckets: n, prefix: p, key: make([]byte, 0, len(p)+20)}
}

// Buckets returns the number of shared-data keys the table may use.
func (t *Table) Buckets() int { return int(t.buckets) }

// Capacity returns the number of client states the table can hold, overflow
// slots included.
func (t *Table) Capacity() int { return int(t.buckets) * bucketSlots }

// BucketKey returns the shared-data key of bucket i.
func (t *Table) BucketKey(i int) string { return t.prefix + strconv.Itoa(i) }

// Op is what Update does to a state.
type Op uint8

const (
	// Charge decides and, if admitted, stores the charged state.
	Charge Op = iota
	// Peek decides without storing anything.
	Peek
	// Refund gives back one charge (the decision returned is meaningless).
	Refund
	// Admit decides whether a request charged after its response may pass
	// (limit.Admit) without storing anything.
	Admit
	// Debit charges n units unconditionally (limit.Debit): the cost of an
	// admitted request, known from its response.
	Debit
)

// Update applies op for client fingerprint fp under lim at now, with a CAS
// loop so that concurrent workers never lose an update. overflowFP is the
// fingerprint of the rule's overflow slot.
func (t *Table) Update(op Op, fp, overflowFP uint64, lim *limit.Limit, now int64, n int64, maxDelay time.Duration) (limit.Decision, int, error) {
	if fp == 0 {
		fp = 1 // 0 marks an empty slot
	}
	key := t.bucketKey(fp)
	for attempt := 0; attempt < MaxCASRetries; attempt++ {
		val, cas, err := t.loadBucket(key)
		if err != nil {
			return limit.Decision{}, 0, err
		}
		i, kind := findSlot(val, fp, overflowFP, now)
		if i < 0 {
			t.Stats.Full++
			return limit.Decision{}, 0, ErrFull
		}
		s := val[i*slotSize : (i+1)*slotSize]
		var st limit.State
		slotFP := fp
		if kind == SlotOverflow {
			slotFP = overflowFP
		}
		if getUint64(s[0:8]) == slotFP {
			st = limit.DecodeState(s[16:])
		}
		var d limit.Decision
		switch op {
		case Refund:
			if getUint64(s[0:8]) != slotFP {
				return d, kind, nil // nothing to give back
			}
			st = lim.Refund(st, now, n)
		case Debit:
			st, d = lim.Debit(st, now, n)
		case Admit:
			d = lim.Admit(st, now)
			if kind == SlotOverflow {
				t.Stats.Overflow++
			}
			return d, kind, nil
		default:
			st, d = lim.AllowN(st, now, n, maxDelay)
			if op == Peek || !d.Allowed {
				if kind == SlotOverflow {
					t.Stats.Overflow++
				}
				return d, kind, nil
			}
		}
		st.Encode(s[16:])
		retry, err := t.storeSlot(key, val, cas, s, slotFP, now+int64(lim.Reset(st, now)))
		if err != nil {
			return limit.Decision{}, kind, err
		}
		if retry {
			continue
		}
		if kind == SlotOverflow {
			t.Stats.Overflow++
		}
		return d, kind, nil
	}
	t.Stats.CASExhausted++
	return limit.Decision{}, 0, ErrContention
}

// Modifier computes the new state of a slot for Table.Modify. It may be
// called several times for one Modify (once per CAS attempt), each time
// with the state as it is then, and whether it is the rule's overflow slot;
// it reports write false to leave the slot
// as it is.
type Modifier interface {
	Modify(st limit.State, now int64, overflow bool) (next limit.State, expiry int64, write bool)
}

// Modify updates the state of client fp with m under the same CAS loop as
// Update (the concurrency rules' transitions, which need more than
// charge/refund). onlyOverflow addresses the rule's overflow slot of fp's
// bucket directly: a client that was given the overflow slot must give its
// slots back there even if a regular slot has freed since. A state whose
// expiry has passed reads as the zero state.
func (t *Table) Modify(fp, overflowFP uint64, onlyOverflow bool, now int64, m Modifier) (int, error) {
	if fp == 0 {
		fp = 1
	}
	key := t.bucketKey(fp)
	for attempt := 0; attempt < MaxCASRetries; attempt++ {
		val, cas, err := t.loadBucket(key)
		if err != nil {
			return 0, err
		}
		i, kind := SlotsPerBucket, SlotOverflow
		if onlyOverflow {
			s := val[i*slotSize:]
			if f := getUint64(s[0:8]); f != overflowFP && f != 0 && int64(getUint64(s[8:16])) > now {
				return kind, nil // taken over by another rule: nothing of ours is left
			}
		} else if i, kind = findSlot(val, fp, overflowFP, now); i < 0 {
			t.Stats.Full++
			return 0, ErrFull
		}
		s := val[i*slotSize : (i+1)*slotSize]
		slotFP := fp
		if kind == SlotOverflow {
			slotFP = overflowFP
		}
		var st limit.State
		if getUint64(s[0:8]) == slotFP && int64(getUint64(s[8:16])) > now {
			st = limit.DecodeState(s[16:])
		}
		next, expiry, write := m.Modify(st, now, kind == SlotOverflow)
		if !write || next == st {
			if kind == SlotOverflow {
				t.Stats.Overflow++
			}
			return kind, nil
		}
		next.Encode(s[16:])
		retry, err := t.storeSlot(key, val, cas, s, slotFP, expiry)
		if err != nil {
			return kind, err
		}
		if retry {
			continue
		}
		if kind == SlotOverflow {
			t.Stats.Overflow++
		}
		return kind, nil
	}
	t.Stats.CASExhausted++
	return 0, ErrContention
}

// findSlot returns the slot for fp: its own, else the first free regular
// slot, else the overflow slot if it is free or already overflowFP's.
func findSlot(val []byte, fp, overflowFP uint64, now int64) (int, int) {
	free := -1
	for i := 0; i < SlotsPerBucket; i++ {
		s := val[i*slotSize:]
		f := getUint64(s[0:8])
		if f == fp {
			return i, SlotOwn
		}
		if free < 0 && (f == 0 || int64(getUint64(s[8:16])) <= now) {
			free = i
		}
	}
	if free >= 0 {
		return free, SlotOwn
	}
	s := val[SlotsPerBucket*slotSize:]
	if f := getUint64(s[0:8]); f == overflowFP || f == 0 || int64(getUint64(s[8:16])) <= now {
		return SlotsPerBucket, SlotOverflow
	}
	return -1, 0
}

// loadBucket reads the bucket at key for a CAS update: its value and CAS,
// or, for a missing bucket, a zeroed one with createCAS (see Update). A
// value of the wrong size (not ours, or damaged) is started over, zeroed,
// under the CAS it was read with.
//
// With a BufferStore the value is read into t.fresh: no garbage per read.
// That aliasing is the one a missing bucket always had: every caller
// (Update, Modify, Lease) decodes, edits and Sets val within one CAS
// attempt, reloads on the next, and gives no view of it to anyone (their
// callbacks get decoded states), and a Table is never re-entered (t.key is
// scratch too).
func (t *Table) loadBucket(key string) ([]byte, uint32, error) {
	var (
		val   []byte
		cas   uint32
		found bool
		err   error
	)
	if bs, ok := t.store.(BufferStore); ok {
		val, cas, found, err = bs.GetInto(key, t.fresh[:])
	} else {
		val, cas, found, err = t.store.Get(key)
	}
	if err != nil {
		t.Stats.StoreErrors++
		return nil, 0, err
	}
	switch {
	case !found:
		val, cas = t.fresh[:], createCAS
		clear(val)
	case len(val) != BucketSize:
		t.Stats.Corrupt++
		val = t.fresh[:]
		clear(val)
	}
	return val, cas, nil
}

// storeSlot marks slot s of bucket val as fp's until expiry (the caller
// has encoded the state into s[16:]) and writes the bucket back under cas.
// retry reports that another worker changed the bucket first: read it
// again. The three CAS loops (Update, Modify, Lease) share it.
func (t *Table) storeSlot(key string, val []byte, cas uint32, s []byte, fp uint64, expiry int64) (retry bool, err error) {
	putUint64(s[0:8], fp)
	putUint64(s[8:16], uint64(expiry))
	mismatch, err := t.store.Set(key, val, cas)
	if err != nil {
		t.Stats.StoreErrors++
		return false, err
	}
	if mismatch {
		t.Stats.CASRetries++
	}
	return mismatch, nil
}

func (t *Table) bucketKey(fp uint64) string {
	t.key = append(t.key[:0], t.prefix...)
	t.key = strconv.AppendUint(t.key, (fp>>1)%t.buckets, 10)
	return unsafeString(t.key)
}

// putUint64 and getUint64 use encoding/binary's unrolled form, which the
// compiler turns into one 64-bit store or load (on wasm too); a byte loop
// stays a loop of eight.
func putUint64(b []byte, v uint64) { binary.LittleEndian.PutUint64(b, v) }

func getUint64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// Lease applies fn to the lease state of fingerprint fp (a global rule's
// client) with a CAS loop, and returns the state fn left. A lease lives in
// a regular slot of its own (never an overflow slot: a lease is one
// client's hits, it cannot be shared) until expiry, the end of its window:
// a slot whose expiry has passed reads as a zero state and may be reused.
// fn returns false to leave the store unchanged. ErrFull: no free slot.
func (t *Table) Lease(fp uint64, now, expiry int64, fn func(*lease.State) bool) (lease.State, error) {
	if fp == 0 {
		fp = 1
	}
	key := t.bucketKey(fp)
	for attempt := 0; attempt < MaxCASRetries; attempt++ {
		val, cas, err := t.loadBucket(key)
		if err != nil {
			return lease.State{}, err
		}
		i := leaseSlot(val, fp, now)
		if i < 0 {
			t.Stats.Full++
			return lease.State{}, ErrFull
		}
		s := val[i*slotSize : (i+1)*slotSize]
		var st lease.State
		if getUint64(s[0:8]) == fp && int64(getUint64(s[8:16])) > now {
			st = lease.Decode(s[16:])
		}
		if !fn(&st) {
			return st, nil
		}
		st.Encode(s[16:])
		retry, err := t.storeSlot(key, val, cas, s, fp, expiry)
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

// leaseSlot returns fp's own regular slot, else the first free one, else -1.
func leaseSlot(val []byte, fp uint64, now int64) int {
	free := -1
	for i := 0; i < SlotsPerBucket; i++ {
		s := val[i*slotSize:]
		f := getUint64(s[0:8])
		if f == fp {
			return i
		}
		if free < 0 && (f == 0 || int64(getUint64(s[8:16])) <= now) {
			free = i
		}
	}
	return free
}
