package global

import (
	"github.com/sluicehq/sluice/plugin/internal/lease"
)

// MaxDebts bounds the clients whose charges wait on one worker (while the
// service does not answer); beyond it a charge is dropped (and counted by
// the engine). Each global rule with a cost has its equal part of it: a
// flood of clients on one rule never drops another rule's charges.
const MaxDebts = 4096

// MaxBarred bounds the clients a worker keeps barred (Bar). A client
// barred beyond it takes the place of the one barred longest ago, which is
// admitted again on the overflow until its next debt's answer bars it
// again: within the overflow's own budget.
const MaxBarred = 64

// Key is a client of a global rule on this worker: the rule's index and
// the client's fingerprint.
type Key struct {
	Rule int
	FP   uint64
}

// Debt is what a global rule's client owes the service on this worker:
// hits charged after admission that its lease could not cover.
type Debt struct {
	_    [0]func() // not comparable: no equality function in the module
	key  Key
	desc string // the client's descriptor key at the service
	hits uint32
	at   int // its index in Debts.list
}

// Key is the client that owes.
func (d *Debt) Key() Key { return d.key }

// Desc is the client's descriptor key at the service.
func (d *Debt) Desc() string { return d.desc }

// Hits is what the client owes.
func (d *Debt) Hits() uint32 { return d.hits }

// Debts are the debts of a worker's clients, each rule's at most its part
// of MaxDebts. (Not generic over the engine's types: a generic type's
// instantiation names cost the wasm module kilobytes.)
type Debts struct {
	m map[Key]*Debt
	// list holds the debts for Each: ranging over the map would link the
	// runtime's map iteration, about 7 KB of code in every Envoy.
	list      []*Debt
	scratch   []*Debt // Each's copy of list, kept for the next Each
	of        []int   // debts per rule, made on first use
	rules     int
	costRules int
	// barred are the clients the service said are over their limit, that
	// this worker cannot mark exhausted in a lease of their own (they are
	// on their rule's overflow lease), each until its window ends: a
	// short list scanned on the overflow path only (a map of its own
	// costs the module 2 KB).
	barred []bar
	next   int // the entry of barred the next bar replaces when full
}

// NewDebts returns the debts of a configuration of rules rules, costRules
// of them global rules with a cost.
func NewDebts(rules, costRules int) Debts { return Debts{rules: rules, costRules: costRules} }

// Len is the number of clients that owe.
func (b *Debts) Len() int { return len(b.m) }

// Each calls f with each debt while f returns true; f may Drop it (or
// another, which is then not visited).
func (b *Debts) Each(f func(d *Debt) bool) {
	snap := append(b.scratch[:0], b.list...)
	b.scratch = nil // an Each within f copies into a buffer of its own
	for _, d := range snap {
		if b.m[d.key] == d && !f(d) {
			break
		}
	}
	clear(snap) // keeps no debt alive
	b.scratch = snap[:0]
}

// Owed returns what client k owes, as much as a call may carry beside a
// lease (hits_addend = lease + debt).
func (b *Debts) Owed(k Key) uint32 {
	d := b.m[k]
	if d == nil {
		return 0
	}
	return min(d.hits, 1<<32-1-lease.MaxK)
}

// Paid forgets hits of what client k owes: a sent call carried them.
func (b *Debts) Paid(k Key, hits uint32) {
	d := b.m[k]
	if d == nil || hits == 0 {
		return
	}
	d.hits -= min(d.hits, hits)
	if d.hits == 0 {
		b.Drop(k)
	}
}

// Keep adds hits to what client k (descriptor desc at the service) owes.
// It returns the debt, or nil: no hits, or k's rule has its part of
// MaxDebts (full: the hits are dropped).
func (b *Debts) Keep(k Key, desc string, hits uint32) (d *Debt, full bool) {
	if hits == 0 {
		return nil, false
	}
	if b.m == nil {
		b.m = map[Key]*Debt{}
	}
	d = b.m[k]
	if d == nil && b.full(k.Rule) {
		return nil, true
	}
	if d == nil {
		d = &Debt{key: k, desc: desc, at: len(b.list)}
		b.m[k] = d
		b.list = append(b.list, d)
		b.of[k.Rule]++
	}
	d.hits = uint32(min(uint64(d.hits)+uint64(hits), 1<<32-1))
	return d, false
}

// full reports whether rule has its part of MaxDebts.
func (b *Debts) full(rule int) bool {
	if b.of == nil {
		b.of = make([]int, b.rules)
	}
	return b.of[rule] >= MaxDebts/max(b.costRules, 1) || len(b.m) >= MaxDebts
}

// Drop forgets what client k owes (a call carried it all).
//
// Not inlined: a copy at each call site costs more wasm code than
// the call (docs/design/memory.md, "Inlining").
//
//go:noinline
func (b *Debts) Drop(k Key) {
	d, ok := b.m[k]
	if !ok {
		return
	}
	delete(b.m, k)
	b.of[k.Rule]--
	last := b.list[len(b.list)-1]
	b.list[d.at], last.at = last, d.at
	b.list[len(b.list)-1] = nil
	b.list = b.list[:len(b.list)-1]
}

// bar is a client barred until the end of its window.
type bar struct {
	key   Key
	until int64
}

// Bar records that client k is over its limit at the service until the
// end of its window (until): Barred then says so. It takes the entry of a
// bar that has ended, else a new one up to MaxBarred, else the oldest.
func (b *Debts) Bar(k Key, until, now int64) {
	for i := range b.barred {
		if x := &b.barred[i]; x.key == k || x.until <= now {
			x.key, x.until = k, until
			return
		}
	}
	if len(b.barred) < MaxBarred {
		b.barred = append(b.barred, bar{k, until})
		return
	}
	b.barred[b.next] = bar{k, until}
	b.next = (b.next + 1) % MaxBarred
}

// Barred reports whether client k is barred at now (Bar).
func (b *Debts) Barred(k Key, now int64) bool {
	for i := range b.barred {
		if x := &b.barred[i]; x.key == k {
			return x.until > now
		}
	}
	return false
}
