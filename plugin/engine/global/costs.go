package global

import "encoding/binary"

// Store is the shared data the deposits are published in (the engine's
// Store).
type Store interface {
	Get(key string) (value []byte, cas uint32, found bool, err error)
	Set(key string, value []byte, cas uint32) (mismatch bool, err error)
}

// costShift is the fixed point of the charges' moving average (1/16).
const costShift = 4

// Costs is, per global rule charged after the response, the moving
// average of its charges on this worker: what its requests take from the
// lease at admission (their deposit). A worker that has settled none yet
// takes what its Envoy's other workers published in shared data (CostKey),
// so that a request on a worker that has not seen a response does not
// deposit 1 where its Envoy knows better.
type Costs struct {
	rules int
	store Store
	// avg is, per rule, the moving average (fixed point, costShift; 0:
	// none yet); pub the deposit last published in shared data. Both are
	// made on first use: most configurations have no such rule.
	avg []int64
	pub []int64
}

// NewCosts returns the cost averages of a configuration of rules rules,
// published in store.
func NewCosts(rules int, store Store) Costs { return Costs{rules: rules, store: store} }

// CostKey is the shared-data key of global rule name's expected cost.
func CostKey(name string) string { return "sluice.v1.cost." + name }

func (c *Costs) init() {
	if c.avg == nil {
		c.avg = make([]int64, c.rules)
		c.pub = make([]int64, c.rules)
	}
}

// Expected is what rule i (named name) has been costing (the moving average
// of its charges, rounded up), 1 before any is known.
func (c *Costs) Expected(i int, name string) int64 {
	c.init()
	if c.avg[i] == 0 {
		if v, _, found, err := c.store.Get(CostKey(name)); err == nil && found && len(v) == 8 {
			c.avg[i] = max(int64(binary.LittleEndian.Uint64(v)), 0)
		}
		if c.avg[i] == 0 {
			return 1
		}
	}
	return (c.avg[i] + 1<<costShift - 1) >> costShift
}

// Known reports whether rule i's cost is known on this worker: learnt
// from a response, or read from shared data by Expected.
func (c *Costs) Known(i int) bool { return c.avg != nil && c.avg[i] != 0 }

// Learn adds a charge of n to rule i's moving average (weight 1/4: a
// change of what responses cost shows within a few requests), and
// publishes it to the Envoy's other workers when the deposit it gives
// changed (one shared-data write per change, none while costs are
// steady).
func (c *Costs) Learn(i int, name string, n int64) {
	c.init()
	x := max(n, 0) << costShift
	if c.avg[i] == 0 {
		c.avg[i] = max(x, 1)
	} else {
		c.avg[i] = max(c.avg[i]+(x-c.avg[i])/4, 1)
	}
	dep := (c.avg[i] + 1<<costShift - 1) >> costShift
	if dep == c.pub[i] {
		return
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(c.avg[i]))
	if _, err := c.store.Set(CostKey(name), b[:], 0); err == nil {
		c.pub[i] = dep
	}
}
