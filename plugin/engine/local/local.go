// Package local holds the local rate rules' working state of one worker:
// what the rules charged the request being decided (refunded if a later
// rule refuses it), the key being built and its fingerprint (under the
// process-wide seed), whether the worker may hold one more request, and
// the reservations given back while later ones were held behind them. Every subsystem that refunds (a
// queue's waiter, a global rule's refusal, a held request that leaves)
// gives a local charge back through RefundHeld.
package local

import (
	"encoding/binary"
	"slices"
	"time"

	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/shared/limit"
)

// Charge is a rule that admitted the request being decided, with the
// client's fingerprint under it (for a refund if a later rule rejects).
type Charge struct {
	Rule int
	FP   uint64
	N    int64 // units charged (a request_header cost)
	// Release is, for a local rule, when the request was to go out as far
	// as the rule was concerned: charged at plus the rule's delay (see
	// limit.RefundHeld).
	Release int64
	// Win is, for a global rule, the start of the window whose lease gave
	// the hit: the service counted it in that window, so only that
	// window's lease may get it back.
	Win int64
}

// Table is what the local rules need of the engine's state table for a
// refund: a held reservation given back (limit.RefundHeld), back false
// when requests were held behind it since.
type Table interface {
	UpdateHeld(fp uint64, rule int, lim *limit.Limit, now, n, release int64) (back bool, err error)
}

// MaxKept bounds the reservations kept: past it, a reservation that cannot
// be given back is spent.
const MaxKept = 64

// Rules is what a decision keeps between rules, and the reservations kept.
type Rules struct {
	cfg     *config.Config
	table   Table
	charged []Charge
	key     []byte
	// seed keys the fingerprint hash (KeepKey): every worker hashes with
	// the same one.
	seed uint64
	// memo is the hash's state after the last long key's first bytes
	// (KeepKey).
	memo keyMemo
	// holdsFull: the worker holds as many requests as it can (MaxDelay).
	holdsFull bool
	// kept are the reservations given back (Unhold, a waiter's or a
	// refused request's refund) while later ones were held behind them
	// (limit.RefundHeld): they are given back once those are, or
	// forgotten at their release time.
	kept []Charge
}

// New returns the local rules' state for cfg over table, fingerprints
// keyed by seed.
func New(cfg *config.Config, table Table, seed uint64) Rules {
	return Rules{
		cfg:     cfg,
		table:   table,
		seed:    seed,
		charged: make([]Charge, 0, len(cfg.Rules)),
		key:     make([]byte, 0, 256),
	}
}

// Begin starts a decision: nothing charged yet.
func (l *Rules) Begin() { l.charged = l.charged[:0] }

// Add records charge c of the request being decided.
func (l *Rules) Add(c Charge) { l.charged = append(l.charged, c) }

// Charged returns the charges of the request being decided (valid until
// the next decision).
func (l *Rules) Charged() []Charge { return l.charged }

// Reuse makes buf, emptied, the buffer of the next decisions' charges (a
// decision's charges handed back once their request is decided).
func (l *Rules) Reuse(buf []Charge) { l.charged = buf[:0] }

// KeyBuf returns the buffer a rule's key is built in, empty; KeepKey gives
// it back (it may have grown). The key is valid until the next KeyBuf.
func (l *Rules) KeyBuf() []byte { return l.key[:0] }

// KeepKey keeps b, the key just built for rule id, as the buffer of the
// next one, and returns the client's fingerprint under the rule.
func (l *Rules) KeepKey(b []byte, id uint64) (fp uint64) {
	l.key = b
	return l.memo.hash(l.seed, id, b)
}

// memoLen is how much of a key keyMemo keeps the hash of: a client IP key
// is 'i', the 16-byte address and a 0, and every IPv4 address (::ffff:
// a.b.c.d) starts with the same 12 bytes.
const memoLen = 13

// keyMemo keeps the fingerprint hash's state after the first memoLen bytes
// of the last key of at least that length, with the rule id and those
// bytes (as two overlapping words): a key of the same rule starting the
// same way is hashed from there. The hash takes a byte at a time, and on
// wasm a loop's every turn is dear (the function's dispatch), so a client
// IP key hashes 5 bytes instead of 26.
type keyMemo struct {
	_     [0]func() // not comparable: no equality function in the module
	ok    bool
	id    uint64
	w0    uint64 // the key's bytes 0-7
	w1    uint64 // and memoLen-8 to memoLen-1
	state uint64 // hashData's state after them (hashSeeded, then the bytes)
}

// hash is hash64(seed, id, b), from the kept state when it applies.
func (m *keyMemo) hash(seed, id uint64, b []byte) uint64 {
	if len(b) < memoLen {
		return hash64(seed, id, b)
	}
	w0, w1 := binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[memoLen-8:])
	if !m.ok || id != m.id || w0 != m.w0 || w1 != m.w1 {
		*m = keyMemo{ok: true, id: id, w0: w0, w1: w1, state: hashBytes(hashSeeded(seed, id), b[:memoLen])}
	}
	return hashFinish(hashBytes(m.state, b[memoLen:]))
}

// SetHoldsFull says whether the worker holds as many requests as it can
// (the plugin sets it before each decision): a rate rule that would hold a
// request (max_delay) refuses it instead.
func (l *Rules) SetHoldsFull(full bool) { l.holdsFull = full }

// MaxDelay is how long rule r may hold the request being decided.
func (l *Rules) MaxDelay(r *config.Rule) time.Duration {
	if r.Shadow || l.holdsFull {
		return 0
	}
	return r.MaxDelay
}

// Key returns the key built last.
func (l *Rules) Key() []byte { return l.key }

// RefundHeld gives back local charge c of a request that will not be
// served, unless requests were held behind it since (limit.RefundHeld):
// then it is kept until they are given back too (the clients of a line of
// held requests leave in any order), or its release time passes.
func (l *Rules) RefundHeld(c Charge, now int64) {
	r := &l.cfg.Rules[c.Rule]
	back, err := l.table.UpdateHeld(c.FP, c.Rule, &r.Limit, now, c.N, c.Release)
	if err != nil {
		return
	}
	if !back {
		if len(l.kept) == MaxKept { // forget those whose time has passed
			l.kept = slices.DeleteFunc(l.kept, func(o Charge) bool { return o.Release <= now })
		}
		if c.Release > now && len(l.kept) < MaxKept {
			l.kept = append(l.kept, c)
		}
		return
	}
	// The line behind c's client is one shorter: the reservations kept
	// before it may now be the latest.
	for again := true; again; {
		again = false
		k := 0
		for _, o := range l.kept {
			switch {
			case o.Release <= now:
				continue // its time has passed: spent
			case !again && o.Rule == c.Rule && o.FP == c.FP:
				if ok, err := l.table.UpdateHeld(o.FP, o.Rule, &r.Limit, now, o.N, o.Release); err == nil && ok {
					again = true
					continue
				}
			}
			l.kept[k] = o
			k++
		}
		clear(l.kept[k:])
		l.kept = l.kept[:k]
	}
}

// hash64 is a seeded 64-bit hash (FNV-1a over the seed, id and data, with
// a final avalanche so that nearby keys spread over all buckets).
func hash64(seed, id uint64, data []byte) uint64 {
	return hashFinish(hashBytes(hashSeeded(seed, id), data))
}

const fnvPrime = 1099511628211

// hashSeeded is hash64's state after the seed and id: the same for every
// key of one rule.
func hashSeeded(seed, id uint64) uint64 {
	h := uint64(14695981039346656037) ^ seed
	for i := 0; i < 8; i++ {
		h = (h ^ (id >> (8 * i) & 0xff)) * fnvPrime
	}
	return h
}

// hashBytes goes on from hash64's state h over data, four bytes a turn
// (on wasm a loop's every turn is dear).
func hashBytes(h uint64, data []byte) uint64 {
	for len(data) >= 4 {
		h = (h ^ uint64(data[0])) * fnvPrime
		h = (h ^ uint64(data[1])) * fnvPrime
		h = (h ^ uint64(data[2])) * fnvPrime
		h = (h ^ uint64(data[3])) * fnvPrime
		data = data[4:]
	}
	for _, c := range data {
		h = (h ^ uint64(c)) * fnvPrime
	}
	return h
}

// hashFinish is hash64's final avalanche of state h.
func hashFinish(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}
