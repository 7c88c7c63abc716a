package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/plugin/internal/rls"
)

// occupiedStates counts the slots of the state table (sluice.v2.* keys of
// bucket or overflow size) that hold a client's state (fingerprint != 0).
func occupiedStates(s *memStore) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, e := range s.m {
		if !strings.HasPrefix(k, "sluice.v2.") || (len(e.val) != BucketSize && len(e.val) != slotSize) {
			continue
		}
		for j := 0; j+slotSize <= len(e.val); j += slotSize {
			if getUint64(e.val[j:]) != 0 {
				n++
			}
		}
	}
	return n
}

// TestAdaptiveShareIsAHardBound: docs/operations.md "Limits and
// sizing": "The shares add up to at most max_keys: that is the hard bound,
// whatever the traffic." An adaptive_concurrency rule's share is split
// between its slots and its Gauges (engine.Regions), but each half is
// rounded up to a whole bucket plus an overflow state, so a rule of share 9
// (the minimum the configuration accepts) keeps 18 states.
func TestAdaptiveShareIsAHardBound(t *testing.T) {
	for _, doc := range []string{
		`{"rules":[{"name":"buy","algorithm":"adaptive_concurrency","key":["header:x-k"],"max_keys":9},{"name":"other","limit":5,"window":"1m"}],"max_keys":18}`,
		`{"rules":[{"name":"buy","algorithm":"adaptive_concurrency","key":["header:x-k"]},{"name":"other","limit":5,"window":"1m"}],"max_keys":18}`,
	} {
		if _, err := config.Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), "max_keys") {
			t.Errorf("an adaptive rule's share under two regions' minimum: %v, want refused naming max_keys", err)
		}
	}
	cfg := mustConfig(t, `{"rules":[
		{"name":"buy","algorithm":"adaptive_concurrency","key":["header:x-k"],"max_keys":18},
		{"name":"other","limit":5,"window":"1m"}],"max_keys":27}`)
	store := newMemStore()
	e := New(cfg, store, 1, wallClock)
	if c := e.Table().Capacity(); c > cfg.MaxKeys {
		t.Errorf("table capacity %d states for max_keys %d (regions: %d)", c, cfg.MaxKeys, e.Table().Regions())
	}
	now := t0
	for i := 0; i < 500; i++ {
		now += int64(time.Millisecond)
		v := e.Decide(req("/buy", "POST", "10.0.0.1:1", "x-k", fmt.Sprint("v", i)), now)
		if v.Outcome == Allow {
			e.Sample(v.Slots, now, now+int64(10*time.Millisecond), SampleResponse)
			e.Release(v.Slots, now+int64(10*time.Millisecond))
		}
		e.Learn(now)
	}
	for i := 0; i < 50; i++ {
		e.Decide(req("/other", "GET", fmt.Sprintf("10.1.0.%d:1", i), ""), now)
	}
	if n := occupiedStates(store); n > cfg.MaxKeys {
		t.Errorf("after a flood: %d client states in shared data, max_keys %d", n, cfg.MaxKeys)
	}
}

// ruleService is a rate-limit service counting per rule and key, each rule
// with its own limit (the hits of the calls, fixed 1-minute windows).
type ruleService struct {
	now     *int64
	limits  map[string]uint32
	counts  map[string]uint32
	pending []func()
}

func (s *ruleService) Call(cluster string, body []byte, timeout time.Duration, done func(rls.Response, error)) error {
	body = append([]byte(nil), body...)
	k := hitsOf(body)
	s.pending = append(s.pending, func() {
		rule := entryValue(body, "sluice_rule")
		ws := *s.now - *s.now%int64(time.Minute)
		key := fmt.Sprintf("%s|%s|%d", rule, entryValue(body, "sluice_key"), ws)
		s.counts[key] += k
		lim := s.limits[rule]
		if c := s.counts[key]; c > lim {
			done(rls.Response{Code: rls.CodeOverLimit, Reset: time.Minute}, nil)
			return
		}
		done(rls.Response{Code: rls.CodeOK, Remaining: lim - s.counts[key]}, nil)
	})
	return nil
}

func (s *ruleService) deliver() {
	for len(s.pending) > 0 {
		p := s.pending
		s.pending = nil
		for _, f := range p {
			f()
		}
	}
}

// TestGlobalCostFloodKeepsOtherRulesCharges: two global rules charged
// after the response. A flood of distinct header values on rule "keys"
// (within its share: every value has a slot of its own) whose responses
// cost more than their leases fills the worker's map of charges owed to the
// service (global.MaxDebts 4,096, all rules together) before the next tick sends
// them; rule "login"'s client's charge is then dropped (Stats.ChargeErrors),
// the service never counts it and the client is admitted again although
// its response cost 1,000 on a limit of 10.
//
// docs/operations.md: "to every other rule: nothing"; docs/cost.md "A charge
// may take the balance below zero: the client is refused until refill has
// paid the debt back".
func TestGlobalCostFloodKeepsOtherRulesCharges(t *testing.T) {
	const doc = `{"rules":[
		{"name":"keys","scope":"global","match":{"path_prefix":"/k"},"key":["header:x-k"],"limit":10,"window":"1m",
		 "cost":{"response_header":"x-used","max":1000}},
		{"name":"login","scope":"global","match":{"path_prefix":"/login"},"limit":10,"window":"1m",
		 "cost":{"response_header":"x-used","max":1000}}],
		"global":{"cluster":"ratelimit","timeout":"50ms"}}`
	for _, flood := range []int{0, 5000} {
		t.Run(fmt.Sprint("flood=", flood), func(t *testing.T) {
			now := t0 + int64(time.Second)
			svc := &ruleService{now: &now, limits: map[string]uint32{"keys": 10, "login": 10}, counts: map[string]uint32{}}
			n := newEnvoy(t, doc, svc, &now)
			e := n.e
			// One tick period: the flood's responses and login's come
			// back before the tick sends what they owe.
			v := n.run(req("/login", "POST", "10.9.0.1:1"))
			if v.Outcome != Allow {
				t.Fatalf("login's first request: %v", v.Outcome)
			}
			var admitted []Verdict
			for i := 0; i < flood; i++ {
				v := n.run(req("/k", "GET", "10.0.0.2:1", "x-k", fmt.Sprint("flood-", i)))
				if v.Outcome == Allow {
					admitted = append(admitted, v)
				}
			}
			for i := range admitted {
				e.Settle(&admitted[i], resp("200", "x-used", "1000"), now)
			}
			t.Logf("after the flood's responses: %d debts, charged %d, charge errors %d", e.PendingCharges(), e.Stats.Rules[0].Charged, e.Stats.ChargeErrors)
			before := e.Stats.ChargeErrors
			e.Settle(&v, resp("200", "x-used", "1000"), now)
			dropped := e.Stats.ChargeErrors - before
			// The tick.
			now += int64(20 * time.Millisecond)
			e.Sweep(now)
			svc.deliver()
			e.Sweep(now)
			svc.deliver()
			now += int64(20 * time.Millisecond)
			v2 := n.run(req("/login", "POST", "10.9.0.1:1"))
			t.Logf("flood %d: %d flood requests admitted, debts %d, login charge errors %d, login's next request %v",
				flood, len(admitted), e.PendingCharges(), dropped, v2.Outcome)
			if dropped != 0 {
				t.Errorf("login's charge of 1000 dropped (%d charge errors) because of a flood on rule keys", dropped)
			}
			if v2.Outcome == Allow {
				t.Errorf("login's client admitted again after a response that cost 1000 on a limit of 10 per minute")
			}
		})
	}
}
