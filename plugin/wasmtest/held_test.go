package wasmtest

// A global rule charged after the response (docs/cost.md "Global rules"),
// on the compiled plugin: a response whose charge its deposit and lease
// did not cover waits until the rate-limit service has answered the call
// that carries the debt.

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

const heldConfig = `{"rules":[{"name":"tokens","scope":"global","key":["header:x-client"],"limit":1000,"window":"1h",
	"cost":{"response_header":"x-tokens-used","max":100}}],
	"global":{"cluster":"ratelimit","timeout":"500ms"}}`

// rlsOK is the service's answer OK (RateLimitResponse overall_code = 1).
var rlsOK = &wasmhost.Response{Status: 200,
	Headers: wasmhost.Headers{{"content-type", "application/grpc"}, {"grpc-status", "0"}},
	Body:    []byte{0, 0, 0, 0, 2, 0x08, 0x01}}

// onlyCall returns the one call to the service pending on vm.
func onlyCall(t *testing.T, vm *wasmhost.VM) wasmhost.HTTPCall {
	t.Helper()
	calls := vm.HTTPCalls()
	if len(calls) != 1 || calls[0].Cluster != "ratelimit" || !strings.HasSuffix(calls[0].Headers.Value(":path"), "ShouldRateLimit") {
		t.Fatalf("calls pending: %+v, want one to the service", calls)
	}
	return calls[0]
}

// heldRequest sends a request of client x, answers its lease call if it
// makes one, and delivers an upstream response of cost tokens: it returns
// the stream and the action after the response headers.
func heldRequest(t *testing.T, vm *wasmhost.VM, cost string) (*wasmhost.Stream, wasmhost.Action) {
	t.Helper()
	s, err := vm.NewStream(wasmhost.Properties{"source.address": "10.0.0.1:4000"})
	if err != nil {
		t.Fatal(err)
	}
	r := wasmhost.HTTPRequest("POST", "api.example", "/v1", [2]string{"x-client", "x"})
	if _, err := s.SendRequestHeaders(r.Headers, true); err != nil {
		t.Fatal(err)
	}
	if s.State() == wasmhost.StreamPaused {
		if err := vm.RespondHTTPCall(onlyCall(t, vm).Token, rlsOK); err != nil {
			t.Fatal(err)
		}
	}
	if s.State() != wasmhost.StreamUpstream {
		t.Fatalf("request not forwarded: %v", s.State())
	}
	act, err := s.SendResponse(wasmhost.Response{Status: 200, Headers: wasmhost.Headers{{"x-tokens-used", cost}}, Body: []byte("answer")})
	if err != nil {
		t.Fatal(err)
	}
	return s, act
}

func TestHeldUntilTheDebtIsCounted(t *testing.T) {
	h := newHost(t, wasmhost.WithClusters("ratelimit"))
	vm := workers(t, h, 1, heldConfig)[0]

	// The first response of the rule: its deposit was 1, the cost 10; the
	// lease (one hit) cannot cover 9: a debt call, and the response waits.
	s, act := heldRequest(t, vm, "10")
	if act != wasmhost.Pause || s.State() != wasmhost.StreamResponsePaused {
		t.Fatalf("response with a debt: action %v, state %v; want it held", act, s.State())
	}
	debt := onlyCall(t, vm)
	if debt.Timeout.String() != "500ms" {
		t.Errorf("debt call timeout %v, want global.timeout", debt.Timeout)
	}
	if err := vm.RespondHTTPCall(debt.Token, rlsOK); err != nil {
		t.Fatal(err)
	}
	res := s.Result()
	if res.Status != 200 || string(res.Body) != "answer" || s.State() != wasmhost.StreamClosed {
		t.Fatalf("after the debt's answer: status %d body %q state %v; want the response delivered", res.Status, res.Body, s.State())
	}

	// Learnt: the deposit is 10, the cost 10: no debt, nothing held.
	s, act = heldRequest(t, vm, "10")
	if act != wasmhost.Continue || s.State() != wasmhost.StreamClosed || len(vm.HTTPCalls()) != 0 {
		t.Fatalf("response without a debt: action %v, state %v, calls %d; want it through at once", act, s.State(), len(vm.HTTPCalls()))
	}

	// A debt whose call fails: the response goes on all the same.
	s, act = heldRequest(t, vm, "100")
	if act != wasmhost.Pause {
		t.Fatalf("response with a debt of 90: action %v, want it held", act)
	}
	if err := vm.RespondHTTPCall(onlyCall(t, vm).Token, nil); err != nil {
		t.Fatal(err)
	}
	if res := s.Result(); res.Status != 200 || s.State() != wasmhost.StreamClosed {
		t.Fatalf("after the debt's call failed: status %d state %v; want the response delivered", res.Status, s.State())
	}
	healthy(t, vm)
}
