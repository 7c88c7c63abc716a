package engine

import (
	"strconv"
	"time"
)

// A rule's share of the table changes when another rule without its own
// max_keys is added or removed, or max_keys changes: its region gets more
// or fewer buckets. The jump hash keeps most clients in their bucket; the
// others (those of the buckets added or dropped) would start clean. So that
// they keep their state too, every region records its bucket count in
// shared data (key <prefix>n: current, previous, and until when the
// previous layout may still hold active states): for the lifetime of a
// state after a change, a client not found in its bucket is looked for in
// its bucket of the previous layout, and its state is used where it is.
// That costs a read only for clients not in their bucket (new ones, and
// the moved), only during that time, and no memory: the previous layout's
// keys exist already (shared data has no delete).

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
	key := rg.prefix + "n"
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
		if mismatch, err := t.store.Set(key, b[:], cas); err != nil || !mismatch {
			return
		}
		// Another worker recorded a layout meanwhile: read it.
	}
}

// previous finds client fp's active state in its bucket of rg's previous
// layout, while that layout may hold some.
func (t *Table) previous(rg *region, fp uint64, now int64) (spot, bool, error) {
	if rg.prevBuckets == 0 || now >= rg.prevUntil {
		return spot{}, false, nil
	}
	b := jumpHash(fp, rg.prevBuckets)
	if b == jumpHash(fp, rg.buckets) {
		return spot{}, false, nil
	}
	t.oldKey = append(t.oldKey[:0], rg.prefix...)
	t.oldKey = strconv.AppendUint(t.oldKey, b, 10)
	key := unsafeString(t.oldKey)
	val, cas, err := t.loadInto(key, BucketSize, &t.old)
	if err != nil {
		return spot{}, false, err
	}
	for i := 0; i < SlotsPerBucket; i++ {
		s := val[i*slotSize:]
		if getUint64(s[0:8]) == fp && int64(getUint64(s[8:16])) > now {
			return spot{key: key, val: val, cas: cas, i: i, kind: SlotOwn, fp: fp}, true, nil
		}
	}
	return spot{}, false, nil
}

// stateLife is the longest a state of a rule with this window, limit and
// burst stays active: a full refill (burst x window / limit) or two
// windows (a sliding window), whichever is longer; a minute for the rules
// without a window (concurrency slots live 2 epochs).
func stateLife(window time.Duration, limit, burst int64) time.Duration {
	if window <= 0 || limit <= 0 {
		return time.Minute
	}
	return max(2*window, window/time.Duration(limit)*time.Duration(burst))
}
