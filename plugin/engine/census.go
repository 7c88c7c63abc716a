package engine

import (
	"encoding/binary"
	"time"
)

// CensusKey is the shared-data key of the census lease.
const CensusKey = "sluice.v1.census"

// Census counts the active client states of a table for the
// tracked-states metric. Reading every bucket at once would stall a worker
// for milliseconds, so each Step reads a slice of them and keeps per-bucket
// counts; the total is exact once a full pass has completed, and at most one
// pass old.
//
// Only one worker needs to count: AcquireLease elects one through shared
// data (a lease that its holder renews and that another worker takes over
// when it expires).
type Census struct {
	counts []uint16
	next   int
	total  int
	passes int
}

// Step reads up to n buckets of t and returns the current total.
func (c *Census) Step(t *Table, now int64, n int) (int, error) {
	if len(c.counts) != t.Buckets() {
		c.counts, c.next, c.total, c.passes = make([]uint16, t.Buckets()), 0, 0, 0
	}
	for k := 0; k < n; k++ {
		i := c.next
		val, _, found, err := t.store.Get(t.BucketKey(i))
		if err != nil {
			return c.total, err
		}
		cnt := 0
		if found && len(val) == BucketSize {
			for j := 0; j < bucketSlots; j++ {
				s := val[j*slotSize:]
				if getUint64(s[0:8]) != 0 && int64(getUint64(s[8:16])) > now {
					cnt++
				}
			}
		}
		c.total += cnt - int(c.counts[i])
		c.counts[i] = uint16(cnt)
		if c.next++; c.next == len(c.counts) {
			c.next = 0
			c.passes++
		}
	}
	return c.total, nil
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
