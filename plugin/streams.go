package main

import "github.com/sluicehq/sluice/plugin/engine"

// The plugin's own context bookkeeping for the per-stream callbacks
// (dispatch_wasip1.go). The SDK keeps every stream in Go maps: an insert
// and a delete per stream, a lookup per callback, and the map of streams,
// emptied at each stream's end, draws a new hash seed for the next insert
// (runtime.rand). About 36 of the 144 calls a rejected request makes in the
// module were that bookkeeping. Here a stream of a root context that
// qualifies (ownsStreams) lives in streamTable instead: no Go map, nothing
// allocated per stream once the table has grown to the streams in flight.

// streamTable holds HTTP streams by context ID: open addressing with
// linear probing towards lower slots, deletion by shifting back (no
// tombstones). Envoy numbers a VM's contexts consecutively, so a context's
// home slot (its ID modulo the table's size) is mostly free and a lookup
// reads one slot. The probes go down: a stream ends mostly after the one
// before it and before the one after it (opened on another connection),
// so the slot below an ending stream's is free and nothing is to be
// shifted (removeHome), where the slot above is mostly taken.
type streamTable struct {
	slots []streamSlot
	n     int // streams in the table
}

// streamSlot is a slot of streamTable; id 0 marks it free (Envoy's context
// IDs start at 1, and 0 is no stream in the ABI).
type streamSlot struct {
	_  [0]func() // not comparable: no equality function in the module
	id uint32
	h  *httpContext
}

// minStreamSlots is the table's first size (a power of two).
const minStreamSlots = 64

// get returns the stream with context ID id, nil if the table has none.
func (t *streamTable) get(id uint32) *httpContext {
	if len(t.slots) == 0 || id == 0 {
		return nil
	}
	mask := uint32(len(t.slots) - 1)
	if s := &t.slots[id&mask]; s.id == id {
		return s.h // at home, as most are: no loop (a loop's turn is dear on wasm)
	}
	for i := id & mask; ; i = (i - 1) & mask {
		s := &t.slots[i]
		if s.id == id {
			return s.h
		}
		if s.id == 0 {
			return nil
		}
	}
}

// add puts h in the table as id; false when id is there already (or 0).
func (t *streamTable) add(id uint32, h *httpContext) bool {
	if id == 0 {
		return false
	}
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	mask := uint32(len(t.slots) - 1)
	if s := &t.slots[id&mask]; s.id == 0 {
		*s = streamSlot{id: id, h: h} // its home is free, as most are
		t.n++
		return true
	}
	for i := id & mask; ; i = (i - 1) & mask {
		s := &t.slots[i]
		if s.id == id {
			return false
		}
		if s.id == 0 {
			*s = streamSlot{id: id, h: h}
			t.n++
			return true
		}
	}
}

// addHome is add's most common case, small enough to be inlined: h goes in
// at id's home slot, which is free, without growing the table. False when
// that is not so (add then does the rest).
func (t *streamTable) addHome(id uint32, h *httpContext) bool {
	mask := uint32(len(t.slots) - 1)
	if id == 0 || 2*(t.n+1) > len(t.slots) || t.slots[id&mask].id != 0 {
		return false
	}
	t.slots[id&mask] = streamSlot{id: id, h: h}
	t.n++
	return true
}

// grow doubles the table (at most half full after it: probes stay short).
func (t *streamTable) grow() {
	old := t.slots
	t.slots = make([]streamSlot, max(2*len(old), minStreamSlots))
	t.n = 0
	for _, s := range old {
		if s.id != 0 {
			t.add(s.id, s.h)
		}
	}
}

// removeHome is remove's most common case, small enough to be inlined: the
// stream at id's home slot with none below it to shift back. Nil when that
// is not so (remove then does the rest).
func (t *streamTable) removeHome(id uint32) *httpContext {
	mask := uint32(len(t.slots) - 1)
	if len(t.slots) == 0 || id == 0 || t.slots[id&mask].id != id || t.slots[(id-1)&mask].id != 0 {
		return nil
	}
	s := &t.slots[id&mask]
	h := s.h
	*s = streamSlot{}
	t.n--
	return h
}

// remove takes the stream with context ID id out of the table and returns
// it, nil if the table has none. The streams below it that probed past its
// slot shift back, so every stream stays reachable from its home slot.
func (t *streamTable) remove(id uint32) *httpContext {
	if len(t.slots) == 0 || id == 0 {
		return nil
	}
	mask := uint32(len(t.slots) - 1)
	i := id & mask
	if s := &t.slots[i]; s.id == id && t.slots[(i-1)&mask].id == 0 {
		// At home with none below it to shift back, as most are.
		h := s.h
		*s = streamSlot{}
		t.n--
		return h
	}
	for t.slots[i].id != id {
		if t.slots[i].id == 0 {
			return nil
		}
		i = (i - 1) & mask
	}
	h := t.slots[i].h
	for j := (i - 1) & mask; t.slots[j].id != 0; j = (j - 1) & mask {
		// A stream at j whose home is cyclically in [j, i) stays: the
		// free slot at i is not on its probe path (home, home-1, ... j).
		home := t.slots[j].id & mask
		if (home-j)&mask < (i-j)&mask {
			continue
		}
		t.slots[i] = t.slots[j]
		i = j
	}
	t.slots[i] = streamSlot{}
	t.n--
	return h
}

// roots are this VM's plugin (root) contexts: a few at
// most (one per configuration of this vm_id, and a predecessor while it
// drains), so a scan finds one faster than a map.
var roots []*pluginContext

// rootOf returns the live plugin context with context ID id, nil if none.
func rootOf(id uint32) *pluginContext {
	if len(roots) > 0 && roots[0].id == id {
		return roots[0] // most VMs run one configuration
	}
	for _, p := range roots {
		if p.id == id {
			return p
		}
	}
	return nil
}

// ownsStreams says whether p's streams go through the plugin's own
// bookkeeping (streams) rather than the SDK's. Not with global rules: the
// SDK routes the answer to a DispatchHttpCall to its caller by its own maps
// of streams (the calling stream's root, and whether the stream still
// lives), so those streams must be in them. Nor for a context that did not
// start (no engine).
func (p *pluginContext) ownsStreams() bool {
	return p.engine != nil && p.rls == nil && !p.retired
}

// passesResponse reports that OnHttpResponseHeaders has nothing to do
// (the response is let through as it is), checked in the export before
// the call.
func (h *httpContext) passesResponse() bool {
	return !h.decided || h.verdict.Outcome == engine.Reject || h.pending != nil
}
