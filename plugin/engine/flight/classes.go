package flight

import (
	"encoding/binary"
	"strconv"
	"unsafe"

	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/shared/limit"
)

// Priority classes (rule field `classes`) divide the slots of one key of a
// concurrency rule. The caps of the classes bind them together (class k and
// the classes below it hold at most Cap k), so a key's classes must change
// together, atomically across workers: they live in one shared-data value
// per key, one limit.Slots per class, updated with one compare-and-swap
// (limit.ClassAcquire and friends decide). Everything else is as for a key
// without classes: this worker's holdings are renewed every epoch (one per
// class), released on the same paths, and the waiting requests poll their
// ticket in their class's queue.
//
// The values are bounded like the state table's: a rule with classes keeps
// them in its own region of buckets (one key each, the rule's share divided
// by SlotsPerBucket, one bucket for a rule-wide key), each value marked
// with the fingerprint of the key it holds and when it expires; a key whose
// bucket is held by another active key is decided on the rule's overflow
// value, with every other such key, as one key. So a flood of keys cannot
// grow shared data, and the usual case, `"key": []`, is one value.
//
// Value: fingerprint uint64 | expiry int64 (ns) | one limit.State per class.

// classSalt makes the ID of a rule's class region out of the rule's.
const classSalt = 0x636c617373000000

// classRegion is where the class values of one rule live, with what this
// worker last saw of its classes and counted of them.
type classRegion struct {
	prefix      string
	buckets     uint64
	overflowKey string
	n           int // classes, the default one included
	reserves    []float64
	// seen is the in flight and queued of each class as this worker last
	// saw them (the metrics); refused counts the class's refusals.
	seen    [config.MaxClasses][2]int64
	refused [config.MaxClasses]uint64
}

// Classes is the working state of the rules with classes on one worker. A
// configuration may have thousands of rules: per rule it keeps only an
// index (cidx; -1: no classes), the rest per rule with classes.
type Classes struct {
	table    Table
	cidx     []int16
	cregions []classRegion
	ss       [config.MaxClasses]limit.Slots
	caps     [config.MaxClasses]int64
	cbuf     [16 + 16*config.MaxClasses]byte
	ckey     []byte
}

// noClasses is the region of a rule without classes (n 0).
var noClasses = &classRegion{}

// NewClasses returns the state of cfg's rules with classes, whose values
// are in table; a rule's values are spread over one bucket per perBucket
// keys of its share.
func NewClasses(cfg *config.Config, table Table, perBucket int) Classes {
	c := Classes{table: table, cidx: make([]int16, len(cfg.Rules))}
	for i := range cfg.Rules {
		r := &cfg.Rules[i]
		c.cidx[i] = -1
		if len(r.Classes) == 0 {
			continue
		}
		p := "sluice.v2." + strconv.FormatUint(r.ID^classSalt, 16) + "."
		n := uint64(max(1, (r.Share-1)/perBucket))
		if len(r.Key) == 0 {
			n = 1 // one key: its bucket never moves when the shares change
		}
		c.cidx[i] = int16(len(c.cregions))
		c.cregions = append(c.cregions, classRegion{prefix: p, buckets: n, overflowKey: p + "o", n: len(r.Classes) + 1, reserves: r.Reserves()})
	}
	if len(c.cregions) > 0 {
		c.ckey = make([]byte, 0, 64)
	}
	return c
}

// cregion returns rule i's class region (noClasses for a rule without).
func (c *Classes) cregion(i int) *classRegion {
	if k := c.cidx[i]; k >= 0 {
		return &c.cregions[k]
	}
	return noClasses
}

// Has reports whether rule i has priority classes.
func (c *Classes) Has(i int) bool { return c.cidx[i] >= 0 }

// Refused returns how many requests of class k of rule i this worker
// refused (at once, or after a wait in the queue).
func (c *Classes) Refused(i, k int) uint64 { return c.cregion(i).refused[k] }

// Refuse counts a refusal of class k of rule i.
func (c *Classes) Refuse(i int, k uint8) {
	if x := c.cidx[i]; x >= 0 {
		c.cregions[x].refused[k]++
	}
}

// modify applies op to the class values of key fp of rule i at now (the
// key's value, or the rule's overflow value when onlyOverflow or when the
// key's bucket is another's): a CAS loop over the value.
func (c *Classes) modify(fp uint64, i int, onlyOverflow bool, now int64, op *slotOp) error {
	if fp == 0 || fp == overflowFP {
		fp = 2 // 0 marks a free value, overflowFP the overflow value
	}
	cr := c.cregion(i)
	size := 16 + 16*cr.n
	for attempt := 0; attempt < MaxCASRetries; attempt++ {
		key, mark, val, cas, err := c.locate(cr, fp, onlyOverflow, size, now)
		if err != nil {
			return err
		}
		ss := c.ss[:cr.n]
		live := binary.LittleEndian.Uint64(val) == mark && int64(binary.LittleEndian.Uint64(val[8:])) > now
		for k := range ss {
			ss[k] = limit.Slots{}
			if live {
				ss[k] = limit.DecodeSlots(limit.DecodeState(val[16+16*k:]))
			}
		}
		caps := c.caps[:cr.n]
		limit.ClassCaps(op.lim.Limit(), cr.reserves, caps)
		prev := c.ss
		write := op.modifyClasses(ss, caps, now, mark == overflowFP)
		noteClasses(cr, ss)
		if !write || prev == c.ss {
			return nil
		}
		expiry := now
		for k := range ss {
			limit.EncodeSlots(ss[k]).Encode(val[16+16*k:])
			expiry = max(expiry, ss[k].Expiry(now))
		}
		binary.LittleEndian.PutUint64(val, mark)
		binary.LittleEndian.PutUint64(val[8:], uint64(expiry))
		mismatch, err := c.table.StoreValue(key, val, cas)
		if err != nil {
			return err
		}
		if !mismatch {
			return nil
		}
	}
	c.table.Contended()
	return ErrContention
}

// locate reads the class value of key fp: its bucket's when the
// bucket holds it or nobody active, else the rule's overflow value (mark
// overflowFP).
func (c *Classes) locate(cr *classRegion, fp uint64, onlyOverflow bool, size int, now int64) (key string, mark uint64, val []byte, cas uint32, err error) {
	if !onlyOverflow {
		c.ckey = append(c.ckey[:0], cr.prefix...)
		c.ckey = strconv.AppendUint(c.ckey, JumpHash(fp, cr.buckets), 10)
		key = unsafeString(c.ckey)
		val, cas, err = c.table.LoadValue(key, size, c.cbuf[:])
		if err != nil {
			return "", 0, nil, 0, err
		}
		if m := binary.LittleEndian.Uint64(val); m == fp || m == 0 || int64(binary.LittleEndian.Uint64(val[8:])) <= now {
			return key, fp, val, cas, nil
		}
	}
	val, cas, err = c.table.LoadValue(cr.overflowKey, size, c.cbuf[:])
	return cr.overflowKey, overflowFP, val, cas, err
}

// noteClasses keeps what a rule's classes hold, for the metrics.
func noteClasses(cr *classRegion, ss []limit.Slots) {
	for k := range ss {
		cr.seen[k] = [2]int64{ss[k].InFlight(), ss[k].Queued()}
	}
}

// Seen returns the requests in flight and queued of class k of rule i as
// this worker last saw them.
func (c *Classes) Seen(i, k int) (inFlight, queued int64) {
	s := c.cregion(i).seen[k]
	return s[0], s[1]
}

func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
