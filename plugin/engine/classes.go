package engine

import (
	"strconv"

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

// classRules is the engine's working state for rules with classes. A
// configuration may have thousands of rules: per rule it keeps only an
// index (cidx; -1: no classes), the rest per rule with classes.
type classRules struct {
	cidx     []int16
	cregions []classRegion
	ss       [config.MaxClasses]limit.Slots
	caps     [config.MaxClasses]int64
	cbuf     [16 + 16*config.MaxClasses]byte
	ckey     []byte
}

// noClasses is the region of a rule without classes (n 0).
var noClasses = &classRegion{}

func newClassRules(cfg *config.Config) classRules {
	c := classRules{cidx: make([]int16, len(cfg.Rules))}
	for i := range cfg.Rules {
		r := &cfg.Rules[i]
		c.cidx[i] = -1
		if len(r.Classes) == 0 {
			continue
		}
		p := "sluice.v2." + strconv.FormatUint(r.ID^classSalt, 16) + "."
		n := uint64(max(1, (r.Share-1)/SlotsPerBucket))
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
func (c *classRules) cregion(i int) *classRegion {
	if k := c.cidx[i]; k >= 0 {
		return &c.cregions[k]
	}
	return noClasses
}

// HasClasses reports whether rule i has priority classes.
func (e *Engine) HasClasses(i int) bool { return e.cidx[i] >= 0 }

// ClassRefused returns how many requests of class k of rule i this worker
// refused (at once, or after a wait in the queue).
func (e *Engine) ClassRefused(i, k int) uint64 { return e.cregion(i).refused[k] }

// classRefuse counts a refusal of class k of rule i.
func (e *Engine) classRefuse(i int, k uint8) {
	if c := e.cidx[i]; c >= 0 {
		e.cregions[c].refused[k]++
	}
}

// classOf returns the class of the request being decided under rule r.
func classOf(r *config.Rule, ri *requestInfo) uint8 {
	if len(r.Classes) == 0 {
		return 0
	}
	return uint8(r.ClassOf(&ri.t))
}

// concModify applies op to the slots of key fp of concurrency rule i (the
// class op.class of it for a rule with classes) at now: the state table's
// slot, or the key's class value.
func (e *Engine) concModify(fp uint64, i int, onlyOverflow bool, now int64, op *concOp) error {
	if e.cidx[i] < 0 {
		_, err := e.table.Modify(fp, i, onlyOverflow, now, op)
		return err
	}
	return e.classModify(fp, i, onlyOverflow, now, op)
}

// classModify is concModify for a rule with classes: a CAS loop over the
// key's class value.
func (e *Engine) classModify(fp uint64, i int, onlyOverflow bool, now int64, op *concOp) error {
	if fp == 0 || fp == overflowFP {
		fp = 2 // 0 marks a free value, overflowFP the overflow value
	}
	cr := e.cregion(i)
	size := 16 + 16*cr.n
	for attempt := 0; attempt < MaxCASRetries; attempt++ {
		key, mark, val, cas, err := e.classLocate(cr, fp, onlyOverflow, size, now)
		if err != nil {
			return err
		}
		ss := e.ss[:cr.n]
		live := getUint64(val) == mark && int64(getUint64(val[8:])) > now
		for k := range ss {
			ss[k] = limit.Slots{}
			if live {
				ss[k] = limit.DecodeSlots(limit.DecodeState(val[16+16*k:]))
			}
		}
		caps := e.caps[:cr.n]
		limit.ClassCaps(op.lim.Limit(), cr.reserves, caps)
		prev := e.ss
		write := op.modifyClasses(ss, caps, now, mark == overflowFP)
		noteClasses(cr, ss)
		if !write || prev == e.ss {
			return nil
		}
		expiry := now
		for k := range ss {
			limit.EncodeSlots(ss[k]).Encode(val[16+16*k:])
			expiry = max(expiry, ss[k].Expiry(now))
		}
		putUint64(val, mark)
		putUint64(val[8:], uint64(expiry))
		mismatch, err := e.table.setCounted(key, val, cas)
		if err != nil {
			return err
		}
		if !mismatch {
			return nil
		}
	}
	e.table.Stats.CASExhausted++
	return ErrContention
}

// classLocate reads the class value of key fp: its bucket's when the
// bucket holds it or nobody active, else the rule's overflow value (mark
// overflowFP).
func (e *Engine) classLocate(cr *classRegion, fp uint64, onlyOverflow bool, size int, now int64) (key string, mark uint64, val []byte, cas uint32, err error) {
	if !onlyOverflow {
		e.ckey = append(e.ckey[:0], cr.prefix...)
		e.ckey = strconv.AppendUint(e.ckey, jumpHash(fp, cr.buckets), 10)
		key = unsafeString(e.ckey)
		val, cas, err = e.classLoad(key, size)
		if err != nil {
			return "", 0, nil, 0, err
		}
		if m := getUint64(val); m == fp || m == 0 || int64(getUint64(val[8:])) <= now {
			return key, fp, val, cas, nil
		}
	}
	val, cas, err = e.classLoad(cr.overflowKey, size)
	return cr.overflowKey, overflowFP, val, cas, err
}

// classLoad reads a class value of size bytes into e.cbuf (a missing or
// damaged one reads as free).
func (e *Engine) classLoad(key string, size int) ([]byte, uint32, error) {
	t := e.table
	var (
		val   []byte
		cas   uint32
		found bool
		err   error
	)
	if bs, ok := t.store.(BufferStore); ok {
		val, cas, found, err = bs.GetInto(key, e.cbuf[:])
	} else {
		val, cas, found, err = t.store.Get(key)
	}
	if err != nil {
		t.Stats.StoreErrors++
		return nil, 0, err
	}
	if !found || len(val) != size {
		if found {
			t.Stats.Corrupt++
		}
		val, cas = e.cbuf[:size], createCAS
		clear(val)
	}
	return val, cas, nil
}

// noteClasses keeps what a rule's classes hold, for the metrics.
func noteClasses(cr *classRegion, ss []limit.Slots) {
	for k := range ss {
		cr.seen[k] = [2]int64{ss[k].InFlight(), ss[k].Queued()}
	}
}

// ClassSlots returns the requests in flight and queued of class k of rule
// i as this worker last saw them (LastSlots refreshes them); ok is false
// when this worker has not seen the rule's slots yet (an idle worker must
// not publish zeros over the figures of the others).
func (e *Engine) ClassSlots(i, k int) (inFlight, queued int64, ok bool) {
	s := e.cregion(i).seen[k]
	return s[0], s[1], e.lastSlots[i].known
}

// SlotsKnown reports whether this worker has seen the slots of concurrency
// rule i (an admission, a wait or a release of it): until then LastSlots
// has nothing to say, and an idle worker must not publish its zeros over
// the figures of the others.
func (e *Engine) SlotsKnown(i int) bool { return e.lastSlots[i].known }

// modifyClasses is Modify for a rule with classes: o.class's transition on
// the key's classes ss (caps at the rule's limit). It reports whether ss
// changed.
func (o *concOp) modifyClasses(ss []limit.Slots, caps []int64, now int64, overflow bool) bool {
	o.overflow = overflow
	c := int(o.class)
	switch o.kind {
	case opAcquire:
		held, epoch := o.held, o.epoch
		if overflow {
			held, epoch = o.heldOv, o.epochOv
		}
		d := limit.ClassAcquire(ss, caps, c, now, held, epoch, o.queue)
		o.out, o.free = d.ConcDecision, d.Free
	case opClaim:
		d := limit.ClassClaim(ss, caps, c, now, o.ticket, o.held, o.epoch)
		o.out, o.free = d.ConcDecision, d.Free
	case opLeave:
		o.left = limit.ClassLeave(ss, caps, c, now, o.ticket)
	case opExpire:
		limit.ClassExpire(ss, c, now, o.ticket)
	case opRelease:
		limit.ClassRelease(ss, caps, c, now, o.held, o.epoch)
	case opRenew:
		o.out.Epoch = limit.ClassRenew(ss, c, now, o.held, o.epoch)
	case opView:
		var l limit.Limit
		for k := range ss {
			ss[k] = l.View(limit.EncodeSlots(ss[k]), now)
		}
	}
	if o.kind == opRelease || o.kind == opView {
		// The rule's gauges show the whole key: every class's slots.
		var in, q int64
		for k := range ss {
			in += ss[k].InFlight()
			q += ss[k].Queued()
		}
		o.observed = limit.Slots{Cur: uint16(min(in, limit.MaxConcurrency)), Tail: uint16(q)}
	}
	return o.kind != opView
}

// remaining is what a request admitted by concurrency rule i under lim
// leaves free: the limit less the slots in flight, or for a rule with
// classes what the request's class may still take (e.op.free, just
// decided).
func (e *Engine) remaining(i int, lim *limit.Limit, inFlight int64) int64 {
	if e.cidx[i] >= 0 {
		return e.op.free
	}
	return lim.Limit() - inFlight
}

// noteUse counts, for an adaptive rule with classes, the share of the
// limit lim in flight (inFlight, all classes) at an admission of key fp:
// the Gauge estimates the upstream's capacity from what was really in
// flight (see limit.Gauge.Use). An admission that fills its class's cap
// (e.op.free, just decided) under the limit used the round's limit as far
// as the reserves let it: the round is saturated, as a queued or refused
// request makes it. The Gauge takes Use only from saturated rounds: in
// any other, a low share is little demand, not the reserves' doing.
func (e *Engine) noteUse(i int, fp uint64, inFlight int64, lim *limit.Limit) {
	if e.cidx[i] < 0 || !IsAdaptive(&e.cfg.Rules[i]) {
		return
	}
	if l := e.learners[learnKey{rule: i, fp: fp}]; l != nil {
		l.useSum += min(float64(inFlight)/float64(max(lim.Limit(), 1)), 1)
		l.useN++
		if e.op.free <= 0 {
			l.smp.Ready.Saturated = true
		}
	}
}
