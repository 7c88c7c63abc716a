package wasmtest

import (
	"testing"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

const costConfig = `{"rules":[{"name":"llm","key":["header:x-api-key"],"limit":1000,"window":"1m",
	"cost":{"response_header":"x-tokens-used","max":100000}}]}`

// The compiled plugin on two workers: 400-token answers on a budget of
// 1,000 admit exactly 3 and the refusal's Retry-After covers the debt; a
// response Envoy made itself (response.code_details other than
// via_upstream) is not charged, whatever its headers say.
func TestCostChargedAfterResponse(t *testing.T) {
	vms := workers(t, newHost(t), 2, costConfig)
	call := func(i int, key string, resp wasmhost.Response, props wasmhost.Properties) *wasmhost.Result {
		r := wasmhost.HTTPRequest("POST", "api.example", "/v1/complete", [2]string{"x-api-key", key})
		r.Properties = wasmhost.Properties{"source.address": "10.0.0.1:4000"}
		for k, v := range props {
			r.Properties[k] = v
		}
		r.Response = &resp
		return vms[i%2].Request(r).Must(t)
	}
	tokens := wasmhost.Response{Status: 200, Headers: wasmhost.Headers{{"x-tokens-used", "400"}}}
	// Envoy's own 503 after the upstream reset the connection.
	reset := wasmhost.Response{Status: 503, Headers: wasmhost.Headers{{"x-tokens-used", "400"}}}
	resetProps := wasmhost.Properties{"response.code_details": "upstream_reset_before_response_started{connection_termination}"}
	for i := 0; i < 3; i++ {
		if r := call(i, "k1", reset, resetProps); r.Status != 503 || r.Headers.Value("x-ratelimit-remaining") != "1000" {
			t.Fatalf("Envoy's reply %d: %d remaining %q, want 503 and 1000 (not charged)", i, r.Status, r.Headers.Value("x-ratelimit-remaining"))
		}
	}
	admitted := 0
	var last *wasmhost.Result
	for i := 0; i < 5; i++ {
		last = call(i, "k1", tokens, nil)
		if last.Status != 200 {
			break
		}
		admitted++
	}
	if admitted != 3 || last.Status != 429 || last.Headers.Value("retry-after") != "13" {
		t.Fatalf("admitted %d, then %d Retry-After %q; want 3, then 429 and 13", admitted, last.Status, last.Headers.Value("retry-after"))
	}
	if r := call(0, "k2", tokens, nil); r.Status != 200 || r.Headers.Value("x-ratelimit-remaining") != "600" {
		t.Fatalf("another key: %d remaining %q, want 200 and 600", r.Status, r.Headers.Value("x-ratelimit-remaining"))
	}
}
