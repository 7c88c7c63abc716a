package engine

import (
	"strconv"
	"strings"
	"testing"
)

// TestSummaryLine holds the start-up log line to what it was when it was
// formatted with sprintf (Summary now appends its parts without boxing
// each value in an interface: less code in every Envoy).
func TestSummaryLine(t *testing.T) {
	many := make([]string, 70)
	for i := range many {
		n := strconv.Itoa(i)
		many[i] = `{"name":"r` + n + `","match":{"path_prefix":"/p` + n + `"},"limit":` + strconv.Itoa(i+1) + `,"window":"1s"}`
	}
	for i, c := range []struct{ cfg, want string }{
		{`{"rules":[{"name":"bench","limit":1000000,"window":"1s","burst":1000000}],"headers":"legacy"}`,
			"1 rule(s): bench=token_bucket 1000000/1s burst 1000000 keeps 99993 states; headers=legacy status=429 max_keys=100000 (12499 shared-data keys of 256 bytes and 1 overflow states of 32) on_error=allow xff_trusted_hops=0 exempt=0 range(s)"},
		{`{"rules":[{"name":"login","limit":3,"window":"15m","cost":{"on_status":[401,403]}},
		{"name":"d","limit":5,"window":"1s","max_delay":"250ms"},
		{"name":"x","limit":10,"window":"1m","cost":{"request_header":"x-cost"},"shadow":true},
		{"name":"y","limit":10,"window":"1m30s","algorithm":"token_bucket","cost":{"response_header":"x-used","max":50}},
		{"name":"z","limit":10,"window":"1m","algorithm":"sliding_window"},
		{"name":"buy","match":{"path_prefix":"/buy"},"algorithm":"concurrency","limit":20,"key":["path"]},
		{"name":"ad","algorithm":"adaptive_concurrency","max_limit":50,"min_limit":5}],
	 "max_keys":20000,"on_error":"deny","status":503,"client_ip":{"xff_trusted_hops":2},"exempt_cidrs":["10.0.0.0/8"]}`,
			"7 rule(s): login=token_bucket 3/15m0s burst 3 keeps 2857 states cost=after response on_status 401,403 max 3; d=token_bucket 5/1s burst 5 keeps 2857 states max_delay 250ms; x=token_bucket 10/1m0s burst 10 keeps 2857 states (shadow) cost=request_header x-cost max 10; y=token_bucket 10/1m30s burst 10 keeps 2857 states cost=after response header x-used max 50; z=sliding_window 10/1m0s burst 10 keeps 2857 states; buy=concurrency 20 in flight keeps 2857 states; ad=adaptive_concurrency 5..50 in flight keeps 1425 states; headers=both status=503 max_keys=20000 (2498 shared-data keys of 256 bytes and 8 overflow states of 32) on_error=deny xff_trusted_hops=2 exempt=1 range(s)"},
		{`{"rules":[` + strings.Join(many, ",") + `]}`,
			"70 rule(s): r0=token_bucket 1/1s burst 1 keeps 713 states; r1=token_bucket 2/1s burst 2 keeps 713 states; r2=token_bucket 3/1s burst 3 keeps 713 states; r3=token_bucket 4/1s burst 4 keeps 713 states; r4=token_bucket 5/1s burst 5 keeps 713 states; r5=token_bucket 6/1s burst 6 keeps 713 states; r6=token_bucket 7/1s burst 7 keeps 713 states; r7=token_bucket 8/1s burst 8 keeps 713 states; r8=token_bucket 9/1s burst 9 keeps 713 states; r9=token_bucket 10/1s burst 10 keeps 713 states; r10=token_bucket 11/1s burst 11 keeps 713 states; r11=token_bucket 12/1s burst 12 keeps 713 states; r12=token_bucket 13/1s burst 13 keeps 713 states; r13=token_bucket 14/1s burst 14 keeps 713 states; r14=token_bucket 15/1s burst 15 keeps 713 states; r15=token_bucket 16/1s burst 16 keeps 713 states; and 54 more rules; headers=both status=429 max_keys=100000 (6230 shared-data keys of 256 bytes and 70 overflow states of 32) on_error=allow xff_trusted_hops=0 exempt=0 range(s)"},
	} {
		cfg := mustConfig(t, c.cfg)
		if got := Summary(cfg, NewTable(newMemStore(), Regions(cfg))); got != c.want {
			t.Errorf("configuration %d:\n got %q\nwant %q", i, got, c.want)
		}
	}
}
