package engine

import (
	"encoding/binary"
	"time"
)

// CensusKey is the shared-data key of the census lease.
const CensusKey = "sluice.v1.census"

// Census counts the active client states of a table for the
// tracked-states metrics, in all and per rule. Reading every bucket at once
// would stall a worker for milliseconds, so each Step reads a slice of the
// table's keys and keeps per-key counts; the totals are exact once a full
// pass has completed, and at most one pass old.
//
// Only one worker needs to count: AcquireLease elects one through shared
// data (a lease that its holder renews and that another worker takes over
// when it expires).
type Census struct {
	counts []uint16
	rules  []int // active states per region
	next   int
	total  int
	passes int
	key    []byte           // the key being read
	val    [BucketSize]byte // its value, read without garbage
}

// Step reads up to n keys of t and returns the current total.
func (c *Census) Step(t *Table, now int64, n int) (int, error) {
	if len(c.counts) != t.Keys() || len(c.rules) != t.Regions() {
		c.counts, c.rules = make([]uint16, t.Keys()), make([]int, t.Regions())
		c.next, c.total, c.passes = 0, 0, 0
	}
	for k := 0; k < n; k++ {
		i := c.next
		var r int
		c.key, r, _ = t.appendKey(c.key[:0], i)
		val, found, err := c.read(t.store, unsafeString(c.key))
		if err != nil {
			return c.total, err
		}
		cnt := 0
		if found && (len(val) == BucketSize || len(val) == slotSize) {
			for j := 0; j+slotSize <= len(val); j += slotSize {
				s := val[j:]
				if getUint64(s[0:8]) != 0 && int64(getUint64(s[8:16])) > now {
					cnt++
				}
			}
		}
		c.total += cnt - int(c.counts[i])
		if r < len(c.rules) { // not the spill pool's
			c.rules[r] += cnt - int(c.counts[i])
		}
		c.counts[i] = uint16(cnt)
		if c.next++; c.next == len(c.counts) {
			c.next = 0
			c.passes++
		}
	}
	return c.total, nil
}

// read reads key's value into c.val when the store can.
func (c *Census) read(store Store, key string) (val []byte, found bool, err error) {
	if bs, ok := store.(BufferStore); ok {
		val, _, found, err = bs.GetInto(key, c.val[:])
	} else {
		val, _, found, err = store.Get(key)
	}
	return val, found, err
}

// Rule returns the active states of region (rule) r as last counted.
func (c *Census) Rule(r int) int {
	if r < len(c.rules) {
		return c.rules[r]
	}
	return 0
}

// Complete reports whether a full pass has been made.
func (c *Census) Complete() bool { return c.passes > 0 }

// AcquireLease makes owner the census worker until now+ttl if the lease is
// free, expired or already owner's. It reports whether owner holds it.
func AcquireLease(store Store, owner uint64, now int64, ttl time.Duration) bool {
	val, cas, found, err := store.Get(CensusKey)
	if err != nil {
		return false
	}
	if !found {
		cas = createCAS
	} else if len(val) == 16 {
		holder := binary.LittleEndian.Uint64(val[0:8])
		expiry := int64(binary.LittleEndian.Uint64(val[8:16]))
		if holder != owner && expiry > now {
			return false
		}
	}
	var b [16]byte
	binary.LittleEndian.PutUint64(b[0:8], owner)
	binary.LittleEndian.PutUint64(b[8:16], uint64(now+int64(ttl)))
	mismatch, err := store.Set(CensusKey, b[:], cas)
	return err == nil && !mismatch
}
