package sdk

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxHosts is how many hosts a Transport remembers. A new host that finds
// the table full cuts it to hostsKept (see hosts.evict), so that the next
// maxHosts-hostsKept new hosts are added without a look at the others.
const (
	maxHosts  = 1024
	hostsKept = maxHosts * 3 / 4
)

// hosts is a Transport's table of per-host limit views. Looking a host up
// takes no lock; adding one (and evicting) takes mu.
type hosts struct {
	m   sync.Map // host -> *host
	n   atomic.Int64
	ids atomic.Uint64
	mu  sync.Mutex // held to add hosts and evict them
}

func (hs *hosts) get(name string, now time.Time, rb *RetryBudget, adaptive bool) *host {
	name = strings.ToLower(name) // no allocation when already lower-case
	if h, ok := hs.m.Load(name); ok {
		h := h.(*host)
		h.touch(now)
		return h
	}
	h := &host{id: hs.ids.Add(1), adaptive: adaptive}
	h.all.init("", 0, 0, adaptive)
	if rb != nil {
		h.retries, h.budgeted = newRetryBudget(*rb), true
	}
	h.used.Store(now.UnixNano())
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if v, ok := hs.m.Load(name); ok { // added meanwhile
		return v.(*host)
	}
	if hs.n.Load() >= maxHosts {
		hs.evict(now)
	}
	hs.m.Store(name, h)
	hs.n.Add(1)
	return h
}

// evict cuts the table to hostsKept hosts or fewer: first the hosts with
// nothing left to enforce (their learned limits are cheap to learn again),
// then, if that is not enough, the least recently used. A request that
// holds an evicted host finishes with it; the next one to the host starts
// afresh. Cutting a quarter of the table at once makes its cost (a pass
// over the table and a sort) a small constant per host added.
func (hs *hosts) evict(now time.Time) {
	type entry struct {
		name any
		used int64
	}
	busy := make([]entry, 0, hs.n.Load())
	hs.m.Range(func(k, v any) bool {
		h := v.(*host)
		if h.idle(now) {
			hs.m.Delete(k)
			hs.n.Add(-1)
		} else {
			busy = append(busy, entry{k, h.used.Load()})
		}
		return true
	})
	extra := len(busy) - hostsKept
	if extra <= 0 {
		return
	}
	slices.SortFunc(busy, func(a, b entry) int { return cmp.Compare(a.used, b.used) })
	for _, e := range busy[:extra] {
		hs.m.Delete(e.name)
		hs.n.Add(-1)
	}
}
