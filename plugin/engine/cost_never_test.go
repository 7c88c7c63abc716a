package engine

import (
	"testing"
	"time"
)

// A rule charged at admission whose cost.max is over what it holds starts
// (it used to be refused), and decides as the capacity says: a request
// declaring up to the capacity passes while it fits, one declaring more
// is refused every time and charged nothing (the next small request still
// passes), for token_bucket, fixed_window and sliding_window.
func TestCostOverCapacityNeverPasses(t *testing.T) {
	for _, alg := range []string{`"burst":5`, `"algorithm":"fixed_window"`, `"algorithm":"sliding_window"`} {
		t.Run(alg, func(t *testing.T) {
			e := New(mustConfig(t, `{"rules":[{"name":"r","limit":5,"window":"1h",`+alg+`,
				"cost":{"request_header":"x-cost","max":50}}]}`), newMemStore(), 1, wallClock)

			if n := e.cfg.Rules[0].NeverPasses(); n != 5 {
				t.Errorf("NeverPasses %d, want 5", n)
			}
			cost := func(n string, at time.Duration) *Verdict {
				v := e.Decide(req("/", "GET", "10.0.0.1:1", "x-cost", n), t0+int64(at))
				return &v
			}
			for i := range 3 {
				if v := cost("6", time.Duration(i)*time.Minute); v.Outcome != Reject || v.RetryAfter < time.Hour {
					t.Fatalf("a request of 6 on a rule of 5: %v, Retry-After %v; want refused, never sooner than the window", v.Outcome, v.RetryAfter)
				} else if i == 0 {
					t.Logf("a request of 6 on a rule of 5: refused, Retry-After %v", v.RetryAfter)
				}
			}
			if v := cost("5", 0); v.Outcome != Allow || v.Remaining != 0 {
				t.Errorf("a request of 5 after the refused ones: %v, remaining %d; want admitted with 0 left (nothing charged for the refused)", v.Outcome, v.Remaining)
			}
			if st := e.Stats.Rules[0]; st.Charged != 5 || st.Rejected != 3 {
				t.Errorf("charged %d, rejected %d; want 5 and 3", st.Charged, st.Rejected)
			}
		})
	}
}
