package wasmtest

// Costs, outcomes and "telling why" (docs/cost.md,
// docs/configuration.md#responses, docs/cost.md,
// "Telling operators and clients why", "Responses"), on the compiled plugin.

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

// chargeCall sends one request (method POST, path, client 10.0.0.1) with the
// given request headers and upstream response, and extra stream properties.
func chargeCall(t *testing.T, vm *wasmhost.VM, path string, reqH wasmhost.Headers, resp wasmhost.Response, props wasmhost.Properties) *wasmhost.Result {
	t.Helper()
	r := wasmhost.HTTPRequest("POST", "api.example", path, reqH...)
	r.Properties = wasmhost.Properties{"source.address": "10.0.0.1:4000"}
	for k, v := range props {
		r.Properties[k] = v
	}
	r.Response = &resp
	res := vm.Request(r).Must(t)
	healthy(t, vm)
	return res
}

func tokens(n string) wasmhost.Response {
	return wasmhost.Response{Status: 200, Headers: wasmhost.Headers{{"x-tokens-used", n}}}
}

func apiKey(k string) wasmhost.Headers { return wasmhost.Headers{{"x-api-key", k}} }

const llmConfig = `{"rules":[{"name":"llm","key":["header:x-api-key"],"limit":1000,"window":"1m",
	"cost":{"response_header":"x-tokens-used","max":500}}]}`

// A stream that ends before the upstream's response headers (client gone,
// upstream reset answered by Envoy, another filter's local reply, a
// timeout) is never charged (docs/cost.md "Never charged").
func TestChargeNotChargedWithoutUpstreamResponse(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, llmConfig)[0]
	// Client gone while the request is at the upstream.
	s, err := vm.NewStream(wasmhost.Properties{"source.address": "10.0.0.1:4000"})
	if err != nil {
		t.Fatal(err)
	}
	r := wasmhost.HTTPRequest("POST", "api.example", "/v1", [2]string{"x-api-key", "k"})
	if _, err := s.SendRequestHeaders(r.Headers, true); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, details := range []string{
		"upstream_reset_before_response_started{remote_reset}",
		"ext_authz_denied",
		"upstream_response_timeout",
		"no_healthy_upstream",
		"direct_response",
		"",
	} {
		props := wasmhost.Properties{}
		if details != "" {
			props["response.code_details"] = details
		}
		res := chargeCall(t, vm, "/v1", apiKey("k"), wasmhost.Response{Status: 503, Headers: wasmhost.Headers{{"x-tokens-used", "400"}}}, props)
		if details == "" {
			// via_upstream (the host's default): charged, the control.
			if got := res.Headers.Value("x-ratelimit-remaining"); got != "600" {
				t.Fatalf("via_upstream: remaining %q, want 600", got)
			}
			continue
		}
		if got := res.Headers.Value("x-ratelimit-remaining"); got != "1000" {
			t.Errorf("%s: remaining %q, want 1000 (not charged)", details, got)
		}
	}
}

// Hostile cost header values: a positive integer with white space around
// it is the cost; anything else costs 1; over max costs max
// (docs/cost.md). A repeated header: Envoy gives the first value.
func TestChargeHostileHeaderValues(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, llmConfig)[0]
	cases := []struct {
		val  string
		cost int
	}{
		{"5", 5}, {" 5 ", 5}, {"\t7\t", 7}, {"007", 7}, {"+5", 1}, {"-5", 1}, {"1e3", 1},
		{"0", 1}, {"", 1}, {"abc", 1}, {"5.0", 1}, {"0x10", 1}, {"1 2", 1}, {"５", 1},
		{"600", 500}, {"99999999999999999999999999999999", 500}, {"4294967296", 500},
		{"18446744073709551617", 500}, {"-0", 1}, {"00000000000000000000000000000000000000009", 9},
	}
	for i, c := range cases {
		k := fmt.Sprintf("k%d", i)
		res := chargeCall(t, vm, "/v1", apiKey(k), tokens(c.val), nil)
		if want := strconv.Itoa(1000 - c.cost); res.Status != 200 || res.Headers.Value("x-ratelimit-remaining") != want {
			t.Errorf("x-tokens-used %q: %d remaining %q, want 200 and %s (cost %d)", c.val, res.Status, res.Headers.Value("x-ratelimit-remaining"), want, c.cost)
		}
	}
	// Repeated: first value (Envoy's get_header_map_value).
	res := chargeCall(t, vm, "/v1", apiKey("rep"), wasmhost.Response{Status: 200, Headers: wasmhost.Headers{{"x-tokens-used", "3"}, {"x-tokens-used", "9"}}}, nil)
	if got := res.Headers.Value("x-ratelimit-remaining"); got != "997" {
		t.Errorf("repeated header: remaining %q, want 997", got)
	}
}

// checkRefusal: Retry-After and RateLimit t are equal, whole seconds
// rounded up, at least 1; the body is problem+json naming the rules and
// repeating retry-after.
func checkRefusal(t *testing.T, r *wasmhost.Result, wantRA string, violated ...string) {
	t.Helper()
	if r.Status != 429 {
		t.Fatalf("status %d, want 429", r.Status)
	}
	ra := r.Headers.Value("retry-after")
	n, err := strconv.Atoi(ra)
	if err != nil || n < 1 {
		t.Errorf("retry-after %q: not whole seconds >= 1", ra)
	}
	if wantRA != "" && ra != wantRA {
		t.Errorf("retry-after %q, want %s", ra, wantRA)
	}
	if rl := r.Headers.Value("ratelimit"); !strings.HasSuffix(rl, ";t="+ra) || !strings.Contains(rl, ";r=0;") {
		t.Errorf("ratelimit %q, retry-after %q: want r=0 and t = Retry-After", rl, ra)
	}
	if r.Headers.Value("x-ratelimit-remaining") != "0" {
		t.Errorf("x-ratelimit-remaining %q on a refusal", r.Headers.Value("x-ratelimit-remaining"))
	}
	if ct := r.Headers.Value("content-type"); ct != "application/problem+json" {
		t.Errorf("content-type %q", ct)
	}
	var doc map[string]any
	if err := json.Unmarshal(r.Body, &doc); err != nil {
		t.Fatalf("body %q is not JSON: %v", r.Body, err)
	}
	if doc["type"] != "https://iana.org/assignments/http-problem-types#quota-exceeded" || doc["status"] != float64(429) {
		t.Errorf("body %s", r.Body)
	}
	if fmt.Sprint(doc["retry-after"]) != ra {
		t.Errorf("body retry-after %v, header %q", doc["retry-after"], ra)
	}
	if violated != nil {
		var got []string
		for _, v := range doc["violated-policies"].([]any) {
			got = append(got, v.(string))
		}
		if strings.Join(got, ",") != strings.Join(violated, ",") {
			t.Errorf("violated-policies %v, want %v", got, violated)
		}
	}
}

// A balance driven below zero: the refusal's Retry-After (= t) is the time
// until the debt is paid and one unit is back, rounded up, at least 1, for
// every algorithm and sub-second windows (docs/cost.md).
func TestChargeDebtRetryAfter(t *testing.T) {
	for _, c := range []struct {
		name, rule string
		charge     string
		wantRA     string
	}{
		// 1000/1m: 60ms a unit; 1000+200 charged: debt 200 then one unit = 201*60ms = 12.06s -> 13.
		{"token_bucket", `"limit":1000,"window":"1m"`, "1200", "13"},
		// 10 per 100ms, charged 11: 10ms until a unit is back -> 1 (at least 1).
		{"sub-second", `"limit":10,"window":"100ms"`, "11", "1"},
		{"sub-second fixed", `"algorithm":"fixed_window","limit":10,"window":"100ms"`, "11", "1"},
		{"sliding", `"algorithm":"sliding_window","limit":10,"window":"1s"`, "30", ""},
		{"fixed big debt", `"algorithm":"fixed_window","limit":10,"window":"1m"`, "35", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHost(t)
			vm := workers(t, h, 1, `{"rules":[{"name":"c",`+c.rule+`,"cost":{"response_header":"x-tokens-used","max":100000}}]}`)[0]
			r := chargeCall(t, vm, "/v1", nil, tokens(c.charge), nil)
			if r.Status != 200 || r.Headers.Value("x-ratelimit-remaining") != "0" {
				t.Fatalf("charged: %d remaining %q, want 200 and 0 (in debt)", r.Status, r.Headers.Value("x-ratelimit-remaining"))
			}
			r = chargeCall(t, vm, "/v1", nil, tokens("1"), nil)
			checkRefusal(t, r, c.wantRA, "c")
			if d, n := filterState(t, r); d != "rejected" || n != "c" {
				t.Errorf("filter state %q %q", d, n)
			}
			// Retry-After is honest: after it, admitted; a second before it, not
			// (when more than 1s).
			ra, _ := strconv.Atoi(r.Headers.Value("retry-after"))
			if ra > 1 {
				h.AdvanceClock(time.Duration(ra-1)*time.Second - time.Millisecond)
				if r := chargeCall(t, vm, "/v1", nil, tokens("0"), nil); r.Status != 429 {
					t.Errorf("a second before Retry-After: %d, want 429", r.Status)
				}
				h.AdvanceClock(time.Millisecond)
			}
			h.AdvanceClock(time.Second)
			if r := chargeCall(t, vm, "/v1", nil, wasmhost.Response{Status: 200}, nil); r.Status != 200 {
				t.Errorf("after Retry-After: %d, want 200", r.Status)
			}
		})
	}
}

// on_status with statuses the upstream never sends: never charged, every
// response reports the balance at admission; charged metric 0.
func TestChargeOnStatusNeverSent(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[{"name":"login","limit":3,"window":"15m","cost":{"on_status":[401,403]}}]}`)[0]
	for i := 0; i < 20; i++ {
		r := chargeCall(t, vm, "/login", nil, wasmhost.Response{Status: 200 + i%5}, nil)
		if r.Status != 200+i%5 || r.Headers.Value("x-ratelimit-remaining") != "3" || r.Headers.Value("ratelimit") != `"login";r=3;t=0` {
			t.Fatalf("request %d: %d remaining %q ratelimit %q", i, r.Status, r.Headers.Value("x-ratelimit-remaining"), r.Headers.Value("ratelimit"))
		}
	}
	h.AdvanceClock(2 * time.Second)
	if got := h.Metrics().Counter("sluice.rule.login.charged"); got != 0 {
		t.Errorf("charged %d, want 0", got)
	}
	if got := h.Metrics().Counter("sluice.rule.login.allowed"); got != 20 {
		t.Errorf("allowed %d, want 20", got)
	}
	// 401 x3 then refused, with Retry-After 300.
	for i := 0; i < 3; i++ {
		if r := chargeCall(t, vm, "/login", nil, wasmhost.Response{Status: 401}, nil); r.Status != 401 || r.Headers.Value("x-ratelimit-remaining") != strconv.Itoa(2-i) {
			t.Fatalf("401 #%d: remaining %q", i, r.Headers.Value("x-ratelimit-remaining"))
		}
	}
	checkRefusal(t, chargeCall(t, vm, "/login", nil, wasmhost.Response{Status: 200}, nil), "300", "login")
}

// Several rules with costs on one request: each charges its own, and the
// response reports the most constrained after the charges.
func TestChargeSeveralRules(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[
		{"name":"a","limit":100,"window":"1h","cost":{"response_header":"x-a"}},
		{"name":"b","limit":50,"window":"1h","cost":{"response_header":"x-b"}},
		{"name":"c","limit":10,"window":"1h","cost":{"on_status":[200]}},
		{"name":"d","limit":20,"window":"1h","cost":{"request_header":"x-cost"}},
		{"name":"e","limit":1000,"window":"1h"}]}`)[0]
	resp := wasmhost.Response{Status: 200, Headers: wasmhost.Headers{{"x-a", "95"}, {"x-b", "5"}}}
	r := chargeCall(t, vm, "/x", wasmhost.Headers{{"x-cost", "3"}}, resp, nil)
	// a: 5 left, b: 45, c: 9, d: 17, e: 999 -> a is the most constrained.
	if got := r.Headers.Value("ratelimit"); !strings.HasPrefix(got, `"a";r=5;`) {
		t.Errorf("ratelimit %q, want a with r=5", got)
	}
	h.AdvanceClock(2 * time.Second)
	m := h.Metrics()
	// charged: rules with a cost only (docs/cost.md "Metrics").
	for name, want := range map[string]uint64{"a": 95, "b": 5, "c": 1, "d": 3} {
		if got := m.Counter("sluice.rule." + name + ".charged"); got != want {
			t.Errorf("rule %s charged %d, want %d", name, got, want)
		}
	}
	// b reported when it becomes the lowest: a charged 0 (header "0" costs 1).
	resp = wasmhost.Response{Status: 404, Headers: wasmhost.Headers{{"x-a", "1"}, {"x-b", "44"}}}
	r = chargeCall(t, vm, "/x", wasmhost.Headers{{"x-cost", "1"}}, resp, nil)
	if got := r.Headers.Value("ratelimit"); !strings.HasPrefix(got, `"b";r=1;`) {
		t.Errorf("second: ratelimit %q, want b with r=1 (a 4, b 1, c 9, d 16)", got)
	}
}

// A shadow rule with a cost: counts and reports, never rejects.
func TestChargeShadow(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[
		{"name":"watch","limit":10,"window":"1h","shadow":true,"cost":{"response_header":"x-tokens-used"}},
		{"name":"real","limit":100,"window":"1h"}]}`)[0]
	r := chargeCall(t, vm, "/x", nil, tokens("15"), nil)
	if r.Status != 200 {
		t.Fatalf("%d", r.Status)
	}
	if d, n := filterState(t, r); d != "allowed" || n != "" {
		t.Errorf("first: filter state %q %q", d, n)
	}
	if got := r.Headers.Value("ratelimit"); !strings.HasPrefix(got, `"real";r=99;`) {
		t.Errorf("first: ratelimit %q (a shadow rule is not reported as the limit)", got)
	}
	for i := 0; i < 3; i++ {
		r = chargeCall(t, vm, "/x", nil, tokens("15"), nil)
		if r.Status != 200 {
			t.Fatalf("shadow rule in debt rejected: %d", r.Status)
		}
		if d, n := filterState(t, r); d != "shadow_rejected" || n != "watch" {
			t.Errorf("in debt: filter state %q %q", d, n)
		}
		if got := r.Headers.Value("x-ratelimit-shadow"); !strings.HasPrefix(got, `"watch";retry-after=`) {
			t.Errorf("in debt: x-ratelimit-shadow %q", got)
		}
		if got := r.Headers.Value("ratelimit"); !strings.HasPrefix(got, `"real";r=`+strconv.Itoa(98-i)+`;`) {
			t.Errorf("in debt: ratelimit %q", got)
		}
	}
	h.AdvanceClock(2 * time.Second)
	m := h.Metrics()
	if got := m.Counter("sluice.rule.watch.shadow_rejected"); got != 3 {
		t.Errorf("shadow_rejected %d, want 3", got)
	}
	t.Logf("watch charged %d allowed %d", m.Counter("sluice.rule.watch.charged"), m.Counter("sluice.rule.watch.allowed"))
}

// request_header: over max costs max; missing, empty, zero, negative,
// garbled cost 1 (docs/configuration.md "request_header").
func TestChargeRequestHeader(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[{"name":"exp","key":["header:x-k"],"limit":100,"window":"1h","cost":{"request_header":"x-cost","max":50}}]}`)[0]
	for i, c := range []struct {
		hs   wasmhost.Headers
		cost int
	}{
		{wasmhost.Headers{{"x-cost", "500"}}, 50},
		{nil, 1},
		{wasmhost.Headers{{"x-cost", ""}}, 1},
		{wasmhost.Headers{{"x-cost", "0"}}, 1},
		{wasmhost.Headers{{"x-cost", "-7"}}, 1},
		{wasmhost.Headers{{"x-cost", "7"}}, 7},
		{wasmhost.Headers{{"x-cost", " 8 "}}, 8},
		{wasmhost.Headers{{"x-cost", "9x"}}, 1},
	} {
		hs := append(wasmhost.Headers{{"x-k", fmt.Sprint(i)}}, c.hs...)
		r := chargeCall(t, vm, "/e", hs, wasmhost.Response{Status: 200}, nil)
		if want := strconv.Itoa(100 - c.cost); r.Headers.Value("x-ratelimit-remaining") != want {
			t.Errorf("%v: remaining %q, want %s", c.hs, r.Headers.Value("x-ratelimit-remaining"), want)
		}
	}
	// Two at 50 pass, the third is refused, and its Retry-After is the time
	// for 50 units (36s each: 30 min), not for one.
	hs := wasmhost.Headers{{"x-k", "full"}, {"x-cost", "50"}}
	chargeCall(t, vm, "/e", hs, wasmhost.Response{}, nil)
	chargeCall(t, vm, "/e", hs, wasmhost.Response{}, nil)
	checkRefusal(t, chargeCall(t, vm, "/e", hs, wasmhost.Response{}, nil), "1800", "exp")
}

// violated-policies names every rule that would refuse the request, and
// Retry-After is the longest wait among them (docs/configuration.md): a
// rule after the refusing one that charges the request's cost
// at admission refuses it when the cost does not fit, even if one unit
// would.
func TestChargeViolatedLaterRequestHeaderRule(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[
		{"name":"first","limit":1,"window":"1s"},
		{"name":"exports","limit":10,"window":"1h","cost":{"request_header":"x-cost"}}]}`)[0]
	hs := wasmhost.Headers{{"x-cost", "8"}}
	if r := chargeCall(t, vm, "/e", hs, wasmhost.Response{}, nil); r.Status != 200 {
		t.Fatalf("first: %d", r.Status)
	}
	// "first" refuses (1s); "exports" has 2 left and would refuse a cost of
	// 8 for 6 units x 6 min = 36 min.
	r := chargeCall(t, vm, "/e", hs, wasmhost.Response{}, nil)
	checkRefusal(t, r, "2160", "first", "exports")
	// The client that waits Retry-After is refused by the next rule in line.
	ra, _ := strconv.Atoi(r.Headers.Value("retry-after"))
	h.AdvanceClock(time.Duration(ra) * time.Second)
	if r := chargeCall(t, vm, "/e", hs, wasmhost.Response{}, nil); r.Status != 200 {
		t.Errorf("after Retry-After %ds: %d (%s), want 200", ra, r.Status, r.Headers.Value("ratelimit"))
	}
}

// Same with a rule charged after the response that is in debt, after the
// refusing rule: it is listed and its wait wins.
func TestChargeViolatedLaterDebtRule(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[
		{"name":"first","limit":1,"window":"1s"},
		{"name":"llm","limit":10,"window":"1m","cost":{"response_header":"x-tokens-used","max":100}}]}`)[0]
	chargeCall(t, vm, "/e", nil, tokens("20"), nil) // llm: -10; 11 units to wait at 6s: 66s
	r := chargeCall(t, vm, "/e", nil, tokens("1"), nil)
	checkRefusal(t, r, "66", "first", "llm")
	if d, n := filterState(t, r); d != "rejected" || n != "first" {
		t.Errorf("filter state %q %q, want rejected first", d, n)
	}
}

// A rule charged after the response, with a throttling rule that delays the
// request: the delayed request is charged after its response; a held
// request whose client leaves is not charged. Filter state "delayed".
func TestChargeDelayedRequest(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[
		{"name":"pace","limit":1,"window":"1s","burst":1,"max_delay":"5s"},
		{"name":"llm","limit":100,"window":"1h","cost":{"response_header":"x-tokens-used"}}]}`)[0]
	chargeCall(t, vm, "/e", nil, tokens("10"), nil) // llm 90
	// Held, then the client leaves: not charged.
	s, _ := vm.NewStream(wasmhost.Properties{"source.address": "10.0.0.1:4000"})
	rq := wasmhost.HTTPRequest("POST", "api.example", "/e")
	if _, err := s.SendRequestHeaders(rq.Headers, true); err != nil {
		t.Fatal(err)
	}
	if s.State() != wasmhost.StreamPaused {
		t.Fatalf("not held: %v", s.State())
	}
	s.Close()
	h.AdvanceClock(10 * time.Second)
	// Held then released: charged after its response.
	if r := chargeCall(t, vm, "/e", nil, wasmhost.Response{}, nil); r.Status != 200 { // takes pace's token (llm 89)
		t.Fatalf("%d %v", r.Status, r.State)
	}
	s, _ = vm.NewStream(wasmhost.Properties{"source.address": "10.0.0.1:4000"})
	if _, err := s.SendRequestHeaders(rq.Headers, true); err != nil {
		t.Fatal(err)
	}
	if s.State() != wasmhost.StreamPaused {
		t.Fatalf("not held: %v", s.State())
	}
	h.AdvanceClock(1100 * time.Millisecond)
	if s.State() != wasmhost.StreamUpstream {
		t.Fatalf("not released: %v", s.State())
	}
	if _, err := s.SendResponse(tokens("9")); err != nil {
		t.Fatal(err)
	}
	res := s.Result()
	healthy(t, vm)
	if d, n := filterState(t, res); d != "delayed" || n != "pace" {
		t.Errorf("filter state %q %q, want delayed pace", d, n)
	}
	h.AdvanceClock(2 * time.Second)
	if got := h.Metrics().Counter("sluice.rule.llm.charged"); got != 10+1+9 {
		t.Errorf("llm charged %d, want 20 (the abandoned held request is not charged)", got)
	}
}

// A concurrency queue with a rule charged after the response: a waiter
// admitted later is charged after its response; one that times out is not.
func TestChargeAfterConcurrencyQueue(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[
		{"name":"slots","algorithm":"concurrency","limit":1,"max_delay":"1s","key":["path"]},
		{"name":"llm","limit":100,"window":"1h","cost":{"response_header":"x-tokens-used"}}]}`)[0]
	first := open(t, vm, "/q", "10.0.0.1:4000")
	second := open(t, vm, "/q", "10.0.0.1:4000")
	if second.State() != wasmhost.StreamPaused {
		t.Fatalf("second: %v, want queued", second.State())
	}
	if _, err := first.SendResponse(tokens("10")); err != nil {
		t.Fatal(err)
	}
	h.AdvanceClock(200 * time.Millisecond)
	if second.State() != wasmhost.StreamUpstream {
		t.Fatalf("second not admitted: %v", second.State())
	}
	if _, err := second.SendResponse(tokens("20")); err != nil {
		t.Fatal(err)
	}
	res := second.Result()
	healthy(t, vm)
	if got := res.Headers.Value("ratelimit"); !strings.Contains(got, `"llm";r=70;`) && !strings.Contains(got, `"slots"`) {
		t.Errorf("second: ratelimit %q", got)
	}
	// Third waits and times out: 429, not charged.
	third := open(t, vm, "/q", "10.0.0.1:4000")
	fourth := open(t, vm, "/q", "10.0.0.1:4000")
	h.AdvanceClock(1500 * time.Millisecond)
	if r := fourth.Result(); r.Status != 429 {
		t.Fatalf("fourth: %d %v", r.Status, fourth.State())
	}
	third.SendResponse(tokens("5"))
	h.AdvanceClock(2 * time.Second)
	if got := h.Metrics().Counter("sluice.rule.llm.charged"); got != 35 {
		t.Errorf("llm charged %d, want 35", got)
	}
	if got := h.Metrics().Counter("sluice.rule.llm.allowed"); got != 3 {
		t.Errorf("llm allowed %d, want 3 (admitted requests)", got)
	}
}

// Headers on admitted responses describe the most constrained rule with the
// balance after this request's charge; t is the time to full recovery.
func TestChargeAdmittedHeaders(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[
		{"name":"plain","limit":5,"window":"1m"},
		{"name":"llm","limit":100,"window":"100s","cost":{"response_header":"x-tokens-used"}}]}`)[0]
	r := chargeCall(t, vm, "/x", nil, tokens("1"), nil)
	// plain: 4 left, reset 12s; llm: 99 left after the charge.
	want := map[string]string{"x-ratelimit-limit": "5", "x-ratelimit-remaining": "4", "x-ratelimit-reset": "12",
		"ratelimit-policy": `"plain";q=5;w=60`, "ratelimit": `"plain";r=4;t=12`}
	expectHeaders(t, r, 200, want, "retry-after")
	r = chargeCall(t, vm, "/x", nil, tokens("97"), nil)
	// plain: 3 (reset 24s); llm: 2 after the charge, full in 98s.
	want = map[string]string{"x-ratelimit-limit": "100", "x-ratelimit-remaining": "2", "x-ratelimit-reset": "98",
		"ratelimit-policy": `"llm";q=100;w=100`, "ratelimit": `"llm";r=2;t=98`}
	expectHeaders(t, r, 200, want, "retry-after")
	// llm charged into debt: reported with 0.
	r = chargeCall(t, vm, "/x", nil, tokens("50"), nil)
	want = map[string]string{"x-ratelimit-limit": "100", "x-ratelimit-remaining": "0", "x-ratelimit-reset": "148",
		"ratelimit-policy": `"llm";q=100;w=100`, "ratelimit": `"llm";r=0;t=148`}
	expectHeaders(t, r, 200, want, "retry-after")
	// Refused by llm (debt 48: 49s), plain not charged.
	checkRefusal(t, chargeCall(t, vm, "/x", nil, tokens("1"), nil), "49", "llm")
	h.AdvanceClock(49 * time.Second)
	r = chargeCall(t, vm, "/x", nil, wasmhost.Response{Status: 500}, nil)
	if r.Status != 500 {
		t.Fatalf("after 49s: %d", r.Status)
	}
}

// The charged and allowed metrics of rate rules that admitted a request
// which then waited in a concurrency queue: the request was admitted and
// charged (docs/cost.md "Metrics": charged is the units charged; allowed
// counts requests "as for every rule").
func TestChargeMetricsAfterConcurrencyQueue(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[
		{"name":"exports","limit":100,"window":"1h","cost":{"request_header":"x-cost"}},
		{"name":"plain","limit":100,"window":"1h"},
		{"name":"slots","algorithm":"concurrency","limit":1,"max_delay":"1s","key":["path"]}]}`)[0]
	openCost := func() *wasmhost.Stream {
		s, _ := vm.NewStream(wasmhost.Properties{"source.address": "10.0.0.1:4000"})
		rq := wasmhost.HTTPRequest("POST", "api.example", "/q", [2]string{"x-cost", "10"})
		if _, err := s.SendRequestHeaders(rq.Headers, true); err != nil {
			t.Fatal(err)
		}
		return s
	}
	first := openCost()
	second := openCost()
	if second.State() != wasmhost.StreamPaused {
		t.Fatalf("second: %v, want queued", second.State())
	}
	respond(t, first)
	h.AdvanceClock(200 * time.Millisecond)
	if second.State() != wasmhost.StreamUpstream {
		t.Fatalf("second not admitted: %v", second.State())
	}
	r := respond(t, second)
	if d, n := filterState(t, r); d != "delayed" || n != "slots" {
		t.Errorf("filter state %q %q", d, n)
	}
	// The budget really was charged 20.
	third := openCost()
	if res := respond(t, third); res.Headers.Value("ratelimit") == "" {
		t.Logf("third: %v", res.Headers)
	}
	h.AdvanceClock(2 * time.Second)
	m := h.Metrics()
	if got := m.Counter("sluice.rule.exports.charged"); got != 30 {
		t.Errorf("exports charged %d, want 30 (3 requests of 10)", got)
	}
	if got := m.Counter("sluice.rule.exports.allowed") + m.Counter("sluice.rule.exports.delayed"); got != 3 {
		t.Errorf("exports allowed+delayed %d, want 3", got)
	}
	if got := m.Counter("sluice.rule.plain.allowed") + m.Counter("sluice.rule.plain.delayed"); got != 3 {
		t.Errorf("plain allowed+delayed %d, want 3", got)
	}
}

// Extreme charges (max 4294967295) on every algorithm: no VM failure, the
// refusal still says Retry-After = t, whole seconds, and the problem body
// repeats it.
func TestChargeExtremeDebt(t *testing.T) {
	for _, alg := range []string{"token_bucket", "fixed_window", "sliding_window"} {
		t.Run(alg, func(t *testing.T) {
			h := newHost(t)
			vm := workers(t, h, 2, `{"rules":[{"name":"c","algorithm":"`+alg+`","limit":1,"window":"24h","cost":{"response_header":"x-tokens-used","max":4294967295}}],"status":503}`)
			for i := 0; i < 3; i++ {
				r := chargeCall(t, vmAt(vm, i), "/v1", nil, tokens("4294967295"), nil)
				if i == 0 && r.Status != 200 {
					t.Fatalf("first: %d", r.Status)
				}
				if i > 0 {
					if r.Status != 503 {
						t.Fatalf("refusal status %d, want the configured 503", r.Status)
					}
					ra := r.Headers.Value("retry-after")
					if rl := r.Headers.Value("ratelimit"); !strings.HasSuffix(rl, ";t="+ra) {
						t.Errorf("ratelimit %q retry-after %q", rl, ra)
					}
					var doc struct {
						Status     int   `json:"status"`
						RetryAfter int64 `json:"retry-after"`
					}
					if err := json.Unmarshal(r.Body, &doc); err != nil || doc.Status != 503 || strconv.FormatInt(doc.RetryAfter, 10) != ra {
						t.Errorf("body %s (%v), retry-after %q", r.Body, err, ra)
					}
					t.Logf("%s: retry-after %s reset %s", alg, ra, r.Headers.Value("x-ratelimit-reset"))
				}
			}
		})
	}
}

func vmAt(v []*wasmhost.VM, i int) *wasmhost.VM { return v[i%len(v)] }

// request_header cost with max_delay: throttled as if it were that many
// requests at once (docs/cost.md).
func TestChargeRequestHeaderThrottled(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[{"name":"exp","limit":10,"window":"1s","max_delay":"2s","cost":{"request_header":"x-cost"}}]}`)[0]
	hs := wasmhost.Headers{{"x-cost", "10"}}
	if r := chargeCall(t, vm, "/e", hs, wasmhost.Response{}, nil); r.Status != 200 {
		t.Fatalf("first: %d", r.Status)
	}
	r := chargeCall(t, vm, "/e", hs, wasmhost.Response{}, nil)
	if !r.Paused {
		t.Fatalf("second: %d %v, want held", r.Status, r.State)
	}
	h.AdvanceClock(1010 * time.Millisecond)
	res := r.Stream.Finish()
	healthy(t, vm)
	if res.Status != 200 {
		t.Fatalf("second after the hold: %d", res.Status)
	}
	if d, n := filterState(t, res); d != "delayed" || n != "exp" {
		t.Errorf("filter state %q %q", d, n)
	}
	// Third: due 0.99s from now, held; fourth: 1.99s, held too.
	var held []*wasmhost.Result
	for _, name := range []string{"third", "fourth"} {
		r = chargeCall(t, vm, "/e", hs, wasmhost.Response{}, nil)
		if !r.Paused {
			t.Fatalf("%s: %d, want held", name, r.Status)
		}
		held = append(held, r)
	}
	// Fifth: 2.99s > max_delay: rejected; Retry-After is the wait until it
	// would pass without a hold (as throttle_test.go has it): 3.
	r = chargeCall(t, vm, "/e", hs, wasmhost.Response{}, nil)
	checkRefusal(t, r, "3", "exp")
	// The held requests' clients leave: their reservations are given
	// back, and the next request is held 0.99s again, not rejected.
	for _, r := range held {
		r.Stream.Close()
	}
	if r = chargeCall(t, vm, "/e", hs, wasmhost.Response{}, nil); !r.Paused {
		t.Fatalf("after the held requests left: %d, want held", r.Status)
	}
	if at := releaseTimes(t, h, []*wasmhost.Result{r}, 2*time.Second)[0]; at == 0 || at > 1*time.Second {
		t.Errorf("after the held requests left, the next was released after %v, want 0.99s", at)
	}
}

// TestRejectionBodyReused: the plugin sends the last rejection's body and
// headers again while the rules that refused and the whole seconds they
// say are the same; any change builds them anew (another rule, another
// second, a gRPC call's pushback and the plain request after it).
func TestRejectionBodyReused(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[
		{"name":"a","match":{"path_prefix":"/a"},"limit":1,"window":"1h","burst":1},
		{"name":"b","match":{"path_prefix":"/b"},"limit":2,"window":"1m","burst":2},
		{"name":"all","limit":1000,"window":"1h"}],"headers":"both"}`)[0]
	refused := func(path, ra, limit, reset, rule string) *wasmhost.Result {
		t.Helper()
		r := get(vm, path, "10.0.0.1:1")
		checkRefusal(t, r, ra, rule)
		if got := r.Headers.Value("x-ratelimit-limit"); got != limit {
			t.Errorf("%s: x-ratelimit-limit %q, want %s", path, got, limit)
		}
		if got := r.Headers.Value("x-ratelimit-reset"); got != reset {
			t.Errorf("%s: x-ratelimit-reset %q, want %s", path, got, reset)
		}
		if got := r.Headers.Value("ratelimit-policy"); !strings.HasPrefix(got, `"`+rule+`";`) {
			t.Errorf("%s: ratelimit-policy %q, want rule %s", path, got, rule)
		}
		if _, ok := r.Headers.Get("grpc-retry-pushback-ms"); ok {
			t.Errorf("%s: grpc-retry-pushback-ms on a plain request", path)
		}
		return r
	}
	get(vm, "/a", "10.0.0.1:1").Must(t)
	get(vm, "/b", "10.0.0.1:1").Must(t)
	get(vm, "/b", "10.0.0.1:1").Must(t)
	refused("/a", "3600", "1", "3600", "a")
	refused("/a", "3600", "1", "3600", "a")
	refused("/b", "30", "2", "60", "b")
	h.AdvanceClock(1500 * time.Millisecond)
	refused("/b", "29", "2", "59", "b")
	refused("/a", "3599", "1", "3599", "a")
	g := wasmhost.HTTPRequest("POST", "shop.example", "/a/pkg.Svc/Call", [2]string{"content-type", "application/grpc"})
	g.Properties = wasmhost.Properties{"source.address": "10.0.0.1:1"}
	g.Body = []byte{0, 0, 0, 0, 0}
	if r := vm.Request(g); r.Status != 429 || r.Headers.Value("grpc-retry-pushback-ms") == "" {
		t.Errorf("gRPC call: %d, pushback %q", r.Status, r.Headers.Value("grpc-retry-pushback-ms"))
	}
	refused("/a", "3599", "1", "3599", "a")
	healthy(t, vm)
}
