// Package lease is the arithmetic of global rules: how many hits of a
// client's fleet-wide budget one Envoy takes from the rate-limit service in
// one call, and how it serves requests from them.
//
// The service (envoyproxy/ratelimit on Redis) counts hits in fixed windows
// aligned on the wall clock. An Envoy asks for k hits at once (hits_addend);
// when the service answers OK, those k hits are already counted in Redis, so
// the Envoy may admit k requests without asking again: tokens are taken from
// the shared budget before they are used, and the fleet never admits more
// than the limit in a window. The cost of leasing is the opposite error:
// tokens leased but not used before the window ends are lost
// (under-admission). Size keeps that loss small:
//
//   - the first call of a window asks only for the requests waiting for it
//     (usually one): it learns what is left and starts the drain-rate clock;
//   - a lease is at most a fair part of what the service last said was left,
//     remaining / (2 × share), where share estimates how many Envoys draw on
//     the same client's budget (learnt from how fast the service's remaining
//     count falls between this Envoy's calls); a client near its limit is
//     thus served one hit per call;
//   - a lease is at most what this Envoy will use before the window ends at
//     the rate its previous lease drained;
//   - while the budget is plentiful (at the pace the fleet has drawn on it
//     since the window started, it would use at most half of the limit by
//     the window's end) the share assumed is at most PlentifulShare, so a
//     client far under its limit gets a lease covering the rest of the
//     window at its rate after its second call, not after many; under
//     demand near or over the limit the pace is high and the full share
//     applies.
//
// Prefetch says when an Envoy should ask for its next lease in the
// background, before the current one is empty, so that requests rarely
// wait for a call.
//
// The service increments its counter by k even when that crosses the limit
// (it then answers OVER_LIMIT), so asking for more than is left would waste
// the tail of the window: after an OVER_LIMIT for k > 1 the next call asks
// for a single hit, and only an OVER_LIMIT for a single hit marks the
// client exhausted until the window ends (no further calls in the window).
//
// Everything here is a pure function of the state, the limit, the window
// and the time, which is passed explicitly (nanoseconds since the Unix
// epoch, the clock the service aligns its windows on).
package lease

import (
	"encoding/binary"
	"time"
)

// StateSize is the size of an encoded State.
const StateSize = 16

// Limits of the fields.
const (
	MaxK     = 1<<24 - 1 // largest lease (LastK has 24 bits)
	MaxShare = 255
	// maxGrantAt: GrantAt has 27 bits (a day is 86,400,000 ms).
	maxGrantAt = 1<<27 - 1
	// DefaultShare is the share assumed until calls teach the real one. It
	// is large on purpose: before it knows better, an Envoy must not lease
	// a big part of the budget (in a fleet of many Envoys all of them would
	// at once); a small fleet learns its share within a few calls. With 32,
	// simulated fleets of 1 to 100 Envoys under demand of 2-4x the limit
	// admit at least 98% of it (TestFleetNeverExceeds).
	DefaultShare = 32
	// PlentifulShare caps the share assumed while the budget is plentiful
	// (see Size): unused leases cost nothing when the fleet will not need
	// them, and the drain-rate bound still keeps a slow client's lease
	// small.
	PlentifulShare = 4
	// plentifulAfter: the pace is judged only from answers at least
	// 1/plentifulAfter of the window after its start (2 s of a minute).
	plentifulAfter = 30
)

// State is one client's lease at one Envoy under one global rule, valid in
// one window (the table slot that holds it expires at the window's end, so
// a state from an earlier window is never read as current).
type State struct {
	// Tokens are hits leased from the service and not used yet.
	Tokens uint32
	// Remaining is what the service said was left after this Envoy's last
	// grant in the window (valid if Known).
	Remaining uint32
	// GrantAt is when the last grant arrived, in milliseconds since the
	// window's start; LastK its size. They give the drain rate.
	GrantAt uint32
	LastK   uint32
	// Share estimates how many Envoys draw on this budget (1..MaxShare; 0:
	// unknown).
	Share uint8
	// Known: Remaining holds an answer from this window.
	Known bool
	// Exhausted: the service refused a single hit (a request's deposit);
	// reject until the window ends without asking.
	Exhausted bool
	// Shrink: the last call was refused for more than a request's deposit;
	// ask for one deposit next.
	Shrink bool
}

// Encode writes s into b (StateSize bytes): Tokens, Remaining, then
// GrantAt (27 bits) with the three flags, then LastK (24 bits) with Share.
func (s *State) Encode(b []byte) {
	_ = b[StateSize-1]
	binary.LittleEndian.PutUint32(b[0:], s.Tokens)
	binary.LittleEndian.PutUint32(b[4:], s.Remaining)
	w := min(s.GrantAt, maxGrantAt)
	if s.Known {
		w |= 1 << 27
	}
	if s.Exhausted {
		w |= 1 << 28
	}
	if s.Shrink {
		w |= 1 << 29
	}
	binary.LittleEndian.PutUint32(b[8:], w)
	binary.LittleEndian.PutUint32(b[12:], min(s.LastK, MaxK)|uint32(s.Share)<<24)
}

// Decode reads a State written by Encode.
func Decode(b []byte) State {
	_ = b[StateSize-1]
	w := binary.LittleEndian.Uint32(b[8:])
	k := binary.LittleEndian.Uint32(b[12:])
	return State{
		Tokens:    binary.LittleEndian.Uint32(b[0:]),
		Remaining: binary.LittleEndian.Uint32(b[4:]),
		GrantAt:   w & maxGrantAt,
		LastK:     k & MaxK,
		Share:     uint8(k >> 24),
		Known:     w&(1<<27) != 0,
		Exhausted: w&(1<<28) != 0,
		Shrink:    w&(1<<29) != 0,
	}
}

// WindowStart returns the start of the fixed window of length w holding
// now, aligned on the Unix epoch as the service aligns it.
func WindowStart(now int64, w time.Duration) int64 {
	return now - now%int64(w)
}

// WindowEnd returns the end of the window holding now.
func WindowEnd(now int64, w time.Duration) int64 {
	return WindowStart(now, w) + int64(w)
}

// Take admits one request from the lease if it can. It returns the new
// state and whether the request was admitted; when it was not, exhausted
// says the service has nothing left this window (reject), otherwise a call
// is needed.
func Take(s State) (State, bool, bool) { return TakeN(s, 1) }

// TakeN admits one request that deposits n hits (the hits it is expected
// to cost: see Deposits) if the lease holds them all: a lease that cannot
// cover a request's deposit does not admit it, a call does (or refuses it).
// It returns what Take does.
func TakeN(s State, n uint32) (State, bool, bool) {
	n = max(n, 1)
	if s.Tokens >= n {
		s.Tokens -= n
		return s, true, false
	}
	return s, false, s.Exhausted
}

// Size returns how many hits to ask for in the next call of the window
// holding now, for a rule of limit per window w. need is the number of
// requests already waiting for this call (at least 1).
func Size(s State, limit uint32, w time.Duration, now int64, need uint32) uint32 {
	return SizeN(s, limit, w, now, need, 1)
}

// SizeN is Size for requests that deposit unit hits each: need is the
// deposits of the requests waiting (at least unit), and no call asks for
// less than unit (a smaller grant could not admit the request; after a
// refusal the call asks for unit, and a refusal of unit exhausts the
// client: see Answer.Min).
func SizeN(s State, limit uint32, w time.Duration, now int64, need, unit uint32) uint32 {
	unit = max(unit, 1)
	need = max(need, unit)
	if s.Shrink {
		return unit
	}
	if !s.Known {
		// The first call of a window asks only for what is waiting: nothing
		// is known yet of the client's rate at this Envoy or of what is left,
		// and a fleet of many Envoys that each took a fixed part of the
		// limit on a client's first request would lease its whole budget to
		// Envoys that may never see the client again.
		return min(need, limit, MaxK)
	}
	share := uint32(s.Share)
	if share == 0 {
		share = DefaultShare
	}
	if share > PlentifulShare && plentiful(s, limit, w) {
		share = PlentifulShare
	}
	// What is left now: the service's last answer, less what the fleet has
	// probably drawn since, share times what this Envoy drew (its last
	// lease less what it still holds). Without this, an Envoy whose last
	// call is old would size its lease on a stale count and overshoot the
	// tail.
	drawn := s.LastK - min(s.Tokens, s.LastK)
	rem := s.Remaining
	rem -= min(rem, uint32(min(uint64(share)*uint64(drawn), 1<<32-1)))
	// A fair part of what is left: near the limit this is one hit per call.
	k := rem / (2 * share)
	if s.LastK > 0 { // s.Known: the first call of the window returned above
		// At the rate the last lease drained, what this Envoy uses until the
		// window ends.
		startMS := WindowStart(now, w) / int64(time.Millisecond)
		elapsed := max(now/int64(time.Millisecond)-startMS-int64(s.GrantAt), 1)
		left := max((WindowEnd(now, w)-now)/int64(time.Millisecond), 1)
		want := (int64(s.LastK)*left + elapsed - 1) / elapsed
		if want < int64(k) {
			k = uint32(max(want, 1))
		}
	}
	k = max(k, need)
	if k > rem {
		// Never ask for more than is probably left (an OVER_LIMIT for k
		// wastes what was left); waiters beyond it learn the answer of the
		// next call. A request's deposit is asked for whole: if the
		// service has less, it refuses and the client is exhausted.
		k = max(rem, unit)
	}
	return min(k, MaxK)
}

// plentiful says whether, at the pace the fleet had drawn on the budget
// when the service last answered (what was drawn before this Envoy's last
// lease, over the time from the window's start to then), it would draw at
// most half of the limit by the window's end.
func plentiful(s State, limit uint32, w time.Duration) bool {
	since := float64(s.GrantAt) * float64(time.Millisecond)
	if !s.Known || since < float64(w)/plentifulAfter {
		// Too early in the window for the pace to mean anything: a few
		// draws in the first milliseconds say little of the next minute.
		return false
	}
	// One draw more than seen, so that no draws at all is not read as a
	// pace of zero.
	used := float64(limit-min(s.Remaining, limit)) - float64(s.LastK) + 1
	return used*float64(w) <= float64(limit)/2*since
}

// Prefetch says whether an Envoy whose lease is s after admitting a request
// at now should send its next call now, in the background, while the lease
// keeps admitting: when the lease holds no more than what this Envoy uses,
// at the rate its last lease drained, during lead (the time a call takes to
// come back, with margin). A lease that never drained, a first lease of the
// window and a client the service refused are not prefetched.
func Prefetch(s State, w time.Duration, now int64, lead time.Duration) bool {
	return PrefetchN(s, w, now, lead, 1)
}

// PrefetchN is Prefetch for requests that deposit unit hits each: the
// low-water mark is at least one deposit.
func PrefetchN(s State, w time.Duration, now int64, lead time.Duration, unit uint32) bool {
	if !s.Known || s.Exhausted || s.Shrink || s.LastK == 0 {
		return false
	}
	used := s.LastK - min(s.Tokens, s.LastK)
	if used == 0 {
		return false
	}
	grantAt := WindowStart(now, w) + int64(s.GrantAt)*int64(time.Millisecond)
	elapsed := max(now-grantAt, int64(time.Millisecond))
	// Tokens used during lead at the observed rate, rounded up, at least 1.
	low := (int64(used)*int64(lead) + elapsed - 1) / elapsed
	return int64(s.Tokens) <= max(low, int64(max(unit, 1)))
}

// Answer is what the service said to a call for K hits.
type Answer struct {
	K  uint32
	OK bool // OK: the K hits are counted and ours
	// Remaining after the call (limit_remaining).
	Remaining uint32
	// Min is the smallest call that admits a request (its deposit; 0 means
	// 1): a refusal of at most Min hits exhausts the client, a refusal of
	// more makes the next call ask for Min (Shrink).
	Min uint32
}

// Grant merges the answer to a call made at callAt into s at now (both in
// the same window; an answer arriving in a later window is not granted by
// the caller). It returns the new state and the hits granted, which the
// caller hands to the waiting requests first and adds to Tokens for the
// rest.
func Grant(s State, a Answer, w time.Duration, now int64) (State, uint32) {
	if !a.OK {
		if a.K <= max(a.Min, 1) {
			s.Exhausted = true
			s.Shrink = false
		} else {
			s.Shrink = true
		}
		s.Known, s.Remaining = true, 0
		return s, 0
	}
	// The share: how much the budget fell while this Envoy used its last
	// lease, over what this Envoy used.
	if s.Known && s.LastK > 0 && s.Remaining >= a.Remaining+a.K {
		others := s.Remaining - a.Remaining - a.K
		est := 1 + (others+s.LastK/2)/s.LastK
		old := uint32(s.Share)
		if old == 0 {
			old = est
		}
		s.Share = uint8(min((old+est+1)/2, MaxShare))
	} else if s.Share == 0 {
		// One answer says nothing of the share yet: start from the default
		// and average the estimates in (a single estimate after a lease of
		// one hit is too noisy to trust alone).
		s.Share = DefaultShare
	}
	s.Known, s.Shrink, s.Exhausted = true, false, false
	s.Remaining = a.Remaining
	s.LastK = min(a.K, MaxK)
	s.GrantAt = uint32((now - WindowStart(now, w)) / int64(time.Millisecond))
	return s, a.K
}
