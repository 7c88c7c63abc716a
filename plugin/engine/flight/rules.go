package flight

import (
	"time"

	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/shared/limit"
)

// Concurrency rules (algorithm "concurrency") hold a slot from admission
// until the stream ends. The shared state and its leases are in
// shared/limit (Slots); Rules keeps what one worker knows:
//
//   - holdings: how many slots this worker holds per (rule, key) and the
//     epoch they were last registered in. RenewDue renews them once per
//     epoch, which is what keeps them alive in the shared count; a worker
//     that vanishes stops renewing and its slots are dropped within
//     2 × limit.Epoch.
//   - hold: the observed mean time a slot is held, per rule, which
//     estimates Retry-After, Reset and how long a queue may grow before its
//     last ticket could not start within max_delay.
//
// The requests waiting in a rule's queue are kept here (wait.go) with what
// the engine decided of them so far (Waiter.Request).

// Key is one slot of a concurrency rule: the rule, the key's fingerprint,
// whether it is the rule's overflow slot of the bucket, and the class.
type Key struct {
	Rule     int
	FP       uint64
	Overflow bool
	Class    uint8
}

// Pending is a concurrency rule still to be acquired by a request.
type Pending struct {
	_     [0]func() // not comparable: no equality function in the module
	Rule  int
	FP    uint64
	Class uint8
}

type holding struct {
	_     [0]func() // not comparable: no equality function in the module
	n     int64
	epoch uint16
	key   Key
}

// slotsSeen is a rule's slots as this worker's last admission or release
// left them, and the key's slot (fp, overflow).
type slotsSeen struct {
	inFlight, queued int64
	fp               uint64
	overflow, known  bool
}

// Rules is the state of the in-flight rules on one worker: the slots its
// requests hold (re-registered every epoch), the observed hold time per
// rule, the adaptive rules' learnt limits and the classes' values.
type Rules struct {
	Adaptive
	Classes
	queue
	cfg   *config.Config
	table Table
	op    slotOp
	// holdings indexes held by key. The walks over all of them (renew,
	// HeldSlots) range over the list: ranging over a map links the
	// runtime's map iteration, about 7 KB of code in every Envoy. Kept by
	// value, a holding taken and given back per request leaves no garbage.
	holdings map[Key]int
	held     []holding
	hold     []int64 // observed mean slot hold time per rule (ns)
	renewed  uint16  // the epoch of the last renewal
	// lastSlots is each rule's slots as this worker last saw them (the
	// metrics: LastSlots).
	lastSlots []slotsSeen
}

// NewRules returns the in-flight rules' state for cfg over table (see
// NewAdaptive, NewClasses).
func NewRules(cfg *config.Config, table Table, perBucket int, stats *AdaptiveStats) Rules {
	return Rules{
		Adaptive:  NewAdaptive(cfg, table, stats),
		Classes:   NewClasses(cfg, table, perBucket),
		cfg:       cfg,
		table:     table,
		holdings:  map[Key]int{},
		hold:      make([]int64, len(cfg.Rules)),
		lastSlots: make([]slotsSeen, len(cfg.Rules)),
	}
}

// modify applies op to the slots of key fp of concurrency rule i (the
// class op.class of it for a rule with classes) at now: the state table's
// slot, or the key's class value.
func (r *Rules) modify(fp uint64, i int, onlyOverflow bool, now int64, op *slotOp) error {
	if !r.Has(i) {
		_, err := r.table.Modify(fp, i, onlyOverflow, now, op)
		return err
	}
	return r.Classes.modify(fp, i, onlyOverflow, now, op)
}

// HoldEstimate returns the mean time requests of concurrency rule i held
// their slot on this worker (0 until one has ended).
func (r *Rules) HoldEstimate(i int) time.Duration { return time.Duration(r.hold[i]) }

// WaitEstimate estimates how long a request with waiting tickets ahead of
// it waits for a slot of rule i under lim (the key's limit): slots free at
// about lim per hold time.
func (r *Rules) WaitEstimate(i int, lim int64, waiting int64) time.Duration {
	h := r.hold[i]
	if h <= 0 {
		return time.Second
	}
	return time.Duration((waiting + 1) * h / max(lim, 1))
}

// queueBound is how many tickets rule i's queue may hold under lim (the
// key's limit: an adaptive rule learns one per key): limit.MaxQueue, or
// fewer when the observed hold time says the last could not start within
// max_delay.
func (r *Rules) queueBound(i int, lim int64) int64 {
	rule := &r.cfg.Rules[i]
	if rule.Shadow || rule.MaxDelay <= 0 {
		return 0
	}
	q := int64(limit.MaxQueue)
	if h := r.hold[i]; h > 0 {
		q = min(q, int64(rule.MaxDelay)*lim/h)
	}
	return q
}

// Taken is what an acquisition (or a claim) of a slot decided.
type Taken struct {
	limit.ConcDecision
	// Lim is the Limit it ran on (for an adaptive rule, valid until the
	// next transition of Rules).
	Lim *limit.Limit
	// Key is the slot taken (its Overflow: the rule's overflow slot).
	Key Key
}

// Acquire asks for a slot of rule p.Rule for the key of p.FP at now. It
// carries what this worker holds in both slots the bucket may use, its
// own and the rule's overflow slot (the table picks one), so that the
// slots renew on the way; and the queue bound, none when noQueue (the
// worker already keeps as many requests waiting as it may).
func (r *Rules) Acquire(p Pending, noQueue bool, now int64) (Taken, error) {
	lim := r.SlotLimit(p.Rule, p.FP, now)
	op := &r.op
	*op = slotOp{kind: opAcquire, lim: lim, queue: r.queueBound(p.Rule, lim.Limit()), class: p.Class}
	if noQueue {
		op.queue = 0
	}
	if h := r.holding(Key{Rule: p.Rule, FP: p.FP, Class: p.Class}); h != nil {
		op.held, op.epoch = h.n, h.epoch
	}
	if h := r.holding(Key{Rule: p.Rule, FP: p.FP, Overflow: true, Class: p.Class}); h != nil {
		op.heldOv, op.epochOv = h.n, h.epoch
	}
	if err := r.modify(p.FP, p.Rule, false, now, op); err != nil {
		return Taken{Lim: lim}, err
	}
	d := op.out
	k := Key{Rule: p.Rule, FP: p.FP, Overflow: op.overflow, Class: p.Class}
	if h := r.holding(k); h != nil {
		h.epoch = d.Epoch // renewed on the way
	}
	r.lastSlots[p.Rule] = slotsSeen{d.InFlight, d.Waiting, p.FP, op.overflow, true}
	if !d.Admitted {
		r.OverLimit(p.Rule, p.FP)
	}
	return Taken{ConcDecision: d, Lim: lim, Key: k}, nil
}

// Take records the slot t granted at now (Acquire, or Claim after a wait
// of waited): this worker holds it and the request releases the SlotRef
// returned when its stream ends. rem is what the request leaves free:
// the limit less the slots in flight, or for a rule with classes what its
// class may still take.
func (r *Rules) Take(t *Taken, waited time.Duration, now int64) (s SlotRef, rem int64) {
	k := t.Key
	r.hold1(k, t.Epoch)
	s = SlotRef{Rule: k.Rule, FP: k.FP, Overflow: k.Overflow, Since: now, Class: k.Class, Waited: waited}
	if waited > 0 {
		s.Saturated = IsAdaptive(&r.cfg.Rules[k.Rule])
	} else {
		s.Saturated = r.AtLimit(k.Rule, k.FP, t.InFlight)
	}
	r.Takes(k.Rule, k.FP)
	rem = t.Lim.Limit() - t.InFlight
	if r.Has(k.Rule) {
		r.NoteUse(k.Rule, k.FP, t.InFlight, t.Lim, r.op.free)
		rem = r.op.free
	}
	r.lastSlots[k.Rule] = slotsSeen{t.InFlight, t.Waiting, k.FP, k.Overflow, true}
	return s, rem
}

// holding returns what this worker holds under k, nil if nothing (valid
// until a holding is added or dropped).
func (r *Rules) holding(k Key) *holding {
	if i, ok := r.holdings[k]; ok {
		return &r.held[i]
	}
	return nil
}

// hold1 counts one more slot held by this worker under k.
func (r *Rules) hold1(k Key, epoch uint16) {
	h := r.holding(k)
	if h == nil {
		r.holdings[k] = len(r.held)
		r.held = append(r.held, holding{key: k})
		h = &r.held[len(r.held)-1]
	}
	h.n++
	h.epoch = epoch
}

// drop forgets the holding under k (nothing held any more): the last one
// of the list takes its place.
//
// Not inlined: a copy at each call site costs more wasm code than
// the call (docs/design/memory.md, "Inlining").
//
//go:noinline
func (r *Rules) drop(k Key) {
	i, last := r.holdings[k], len(r.held)-1
	delete(r.holdings, k)
	if i != last {
		r.held[i] = r.held[last]
		r.holdings[r.held[i].key] = i
	}
	r.held = r.held[:last]
}

// Release gives back slot s of a request whose stream ended at now. An
// error: the slot could not be given back (shared data failed); it is
// dropped with its lease at the latest (2 epochs) once this worker stops
// renewing it, which it does now.
func (r *Rules) Release(s *SlotRef, now int64) (err error) {
	r.Releases(s)
	k := Key{Rule: s.Rule, FP: s.FP, Overflow: s.Overflow, Class: s.Class}
	h := r.holding(k)
	if h == nil {
		return nil
	}
	op := &r.op
	*op = slotOp{kind: opRelease, lim: r.ReleaseLimit(s.Rule, s.FP), held: 1, epoch: h.epoch, class: s.Class}
	if err = r.modify(s.FP, s.Rule, s.Overflow, now, op); err == nil {
		// The gauges show the slots as this worker last changed them:
		// a release too, or an idle rule would show its last burst.
		r.lastSlots[s.Rule] = slotsSeen{op.observed.InFlight(), op.observed.Queued(), s.FP, s.Overflow, true}
	}
	if h.n--; h.n <= 0 {
		r.drop(k)
	}
	if d := now - s.Since; d > 0 {
		if r.hold[s.Rule] == 0 {
			r.hold[s.Rule] = d
		} else {
			r.hold[s.Rule] += (d - r.hold[s.Rule]) / 8
		}
	}
	return err
}

// HeldSlots returns the number of concurrency slots this worker holds.
func (r *Rules) HeldSlots() int64 {
	var n int64
	for i := range r.held {
		n += r.held[i].n
	}
	return n
}
