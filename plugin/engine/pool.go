package engine

import (
	"strconv"
)

// The spill pool. With many rules (config.PoolFrom), an equal part of
// max_keys per rule would leave a busy route a few dozen client states
// while quiet routes keep theirs unused. So the rules without their own
// max_keys keep half of what they share as their own regions, as before,
// and the other half is a pool: a client whose bucket in its rule's region
// is full keeps its state in the pool, and goes to the rule's overflow
// state only when its pool bucket is full too.
//
// Flood isolation: each rule spills into a window of a quarter of the
// pool's buckets (where it starts depends on the rule's ID), so a flood of
// new clients on one rule fills its own region and at most a quarter of
// the pool; every other rule keeps its own region whole and most of the
// pool. A quiet rule takes nothing from the pool.
//
// A client of a rule that spills is looked for in the pool whenever it is
// not active in its own bucket (one more read for new clients and those
// living in the pool; none for the others), before it is given a free
// slot of its own bucket: so a state in the pool is never duplicated when
// a slot of the bucket frees. The pool's keys carry its bucket count: a
// configuration with another pool size (another max_keys) starts its pool
// clean, and the states of its clients there are not carried over (those
// in the rules' own regions are, as always).

// poolWindow is the share of the pool's buckets one rule spills into.
const poolWindow = 4

type pool struct {
	prefix  string
	buckets uint64
	window  uint64
	key     []byte
	buf     [BucketSize]byte
}

// EnablePool gives the table a spill pool of share client states, used by
// the regions marked Spill.
func (t *Table) EnablePool(share int) {
	n := uint64(share / SlotsPerBucket)
	if n == 0 {
		return
	}
	p := "sluice.v2.pool" + strconv.FormatUint(n, 10) + "."
	t.pool = &pool{prefix: p, buckets: n, window: max(1, n/poolWindow), key: make([]byte, 0, len(p)+20)}
}

// PoolBuckets returns the pool's buckets (0: none).
func (t *Table) PoolBuckets() int {
	if t.pool == nil {
		return 0
	}
	return int(t.pool.buckets)
}

// poolKey is the key of client fp's pool bucket for the region with ID id.
func (p *pool) bucketKey(id, fp uint64) string {
	start := jumpHash(id^0x5bd1e9955bd1e995, p.buckets)
	b := (start + jumpHash(fp, p.window)) % p.buckets
	p.key = strconv.AppendUint(append(p.key[:0], p.prefix...), b, 10)
	return unsafeString(p.key)
}

// spill looks for client fp of region rg in the pool: its active state
// there, or, if free is set (its own bucket has no free slot), a free slot
// of its pool bucket. ok false: neither.
func (t *Table) spill(rg *region, fp uint64, now int64, free bool) (sp spot, ok bool, err error) {
	p := t.pool
	key := p.bucketKey(rg.id, fp)
	val, cas, err := t.loadInto(key, BucketSize, &p.buf)
	if err != nil {
		return spot{}, false, err
	}
	i := findSlot(val, fp, now)
	if i < 0 {
		return spot{}, false, nil
	}
	mine := getUint64(val[i*slotSize:]) == fp && active(val, i, now)
	if !mine && !free {
		return spot{}, false, nil
	}
	return spot{key: key, val: val, cas: cas, i: i, kind: SlotOwn, fp: fp}, true, nil
}
