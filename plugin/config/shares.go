package config

import (
	"github.com/sluicehq/sluice/plugin/internal/sprintf"
	"github.com/sluicehq/sluice/shared/limit"
)

// shareTable divides max_keys between the rules: a rule with its own
// max_keys takes that many states, the others share what is left equally
// (rounded down). Every rule keeps its states apart from the others' (a
// flood of new keys on one rule fills only its own share), so every share
// must hold at least one bucket and the rule's overflow state (MinMaxKeys;
// twice that for adaptive_concurrency, whose keys keep two states, slots
// and the learnt Gauge, in two regions), and the shares never add up to
// more than max_keys.
func shareTable(c *Config) error {
	left, rest, restMin := c.MaxKeys, 0, 0
	for i := range c.Rules {
		if r := &c.Rules[i]; r.MaxKeys == 0 {
			rest++
			restMin = max(restMin, minShare(r))
		}
	}
	for i := range c.Rules {
		r := &c.Rules[i]
		if r.MaxKeys == 0 {
			continue
		}
		field := sprintf.Sprintf("rules[%d].max_keys", i)
		if r.MaxKeys < minShare(r) {
			return errf(field, "%d is too small for adaptive_concurrency: each key keeps two states (its slots and its learnt limit), each region at least %d; use %d or more", r.MaxKeys, MinMaxKeys, minShare(r))
		}
		if r.MaxKeys > left-rest*restMin {
			return errf(field, "%d does not fit: max_keys %d leaves %d states for this rule after the rules before it took theirs and each rule without max_keys keeps %d", r.MaxKeys, c.MaxKeys, left-rest*restMin, restMin)
		}
		left -= r.MaxKeys
	}
	if rest > 0 && left/rest < restMin {
		return errf("max_keys", "%d is too small for %d rules: every rule keeps its own share of at least %d states (a bucket of the state table and its overflow state; twice that for adaptive_concurrency); raise max_keys to %d or more", c.MaxKeys, len(c.Rules), restMin, c.MaxKeys-left+rest*restMin)
	}
	if len(c.Rules) > PoolFrom {
		c.Pool = poolOf(left, rest, restMin)
		left -= c.Pool
	}
	for i := range c.Rules {
		r := &c.Rules[i]
		r.Share = r.MaxKeys
		if r.MaxKeys == 0 {
			r.Share = left / rest
		}
	}
	return nil
}

// PoolFrom is the number of rules above which the rules without their own
// max_keys share a spill pool: with many rules, an equal part of max_keys
// each would leave a busy route a few dozen states while quiet routes keep
// theirs unused. (Configurations of up to PoolFrom rules, all there were
// before, keep their shares exactly.)
const PoolFrom = 64

// poolOf is the spill pool of what the rules without their own max_keys
// share (left, among rest rules each keeping at least restMin): half of
// it, less if their own shares would then be under restMin; none when
// every rule has its own max_keys (no rule spills).
func poolOf(left, rest, restMin int) int {
	if rest == 0 {
		return 0
	}
	pool := left / 2
	if (left-pool)/rest < restMin {
		pool = left - rest*restMin
	}
	return max(pool, 0)
}

// minShare is the fewest states rule r's share may hold: MinMaxKeys per
// region of the state table it keeps.
func minShare(r *Rule) int {
	if r.Limit.Algorithm() == limit.AdaptiveConcurrency {
		return 2 * MinMaxKeys
	}
	return MinMaxKeys
}
