package main

import "github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"

// engine.LayoutSignal over an Envoy counter: the count of layout record
// writes, which every VM of the process shares (Envoy keeps one stat per
// name, whatever VM or configuration defines it) and reads with one host
// call that returns no data. A decision about to give a client a fresh
// state reads it instead of the layout record (a shared-data get, which
// also calls into the module for a buffer): about 10 k instructions less
// per fresh state in Envoy (docs/design/request-cost.md).

// layoutWrites is this VM's handle of the counter, defined on first use;
// ok is false when it cannot serve (see defineLayoutWrites), and the
// record is read before every fresh state then.
var layoutWrites struct {
	id      counter
	defined bool
	ok      bool
}

// layoutCounter returns the counter, defining it on first use.
func layoutCounter() (counter, bool) {
	if !layoutWrites.defined {
		layoutWrites.defined = true
		layoutWrites.id, layoutWrites.ok = defineLayoutWrites()
		if !layoutWrites.ok {
			proxywasm.LogInfo("sluice: sluice.table.layout_writes does not count (a stats matcher rejects it?): " +
				"this worker reads the layout record before every new client's state")
		}
	}
	return layoutWrites.id, layoutWrites.ok
}

// defineLayoutWrites defines the counter and checks that it counts: a
// stats matcher of Envoy's (stats_config) that rejects the name hands out a
// counter that ignores increments and reads 0, whose count would never
// change. One increment must show (others only add to it).
func defineLayoutWrites() (counter, bool) {
	c, ok := defineLayoutWritesCounter()
	if !ok {
		return 0, false
	}
	before, ok := c.read()
	if !ok || !c.add() {
		return 0, false
	}
	after, ok := c.read()
	return c, ok && after > before
}

// LayoutWrites implements engine.LayoutSignal.
func (*sharedData) LayoutWrites() (uint64, bool) {
	// layoutCounter only to define it: every fresh client reads the count.
	c, ok := layoutWrites.id, layoutWrites.ok
	if !layoutWrites.defined {
		c, ok = layoutCounter()
	}
	if !ok {
		return 0, false
	}
	return c.read()
}

// LayoutWritten implements engine.LayoutSignal.
func (*sharedData) LayoutWritten() {
	if c, ok := layoutCounter(); ok {
		c.add()
	}
}
