package wasmtest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

// TestKeyedHeaderSentTwice: Envoy's proxy_get_header_map_value returns only
// the first of several fields of one name (wasmhost does the same), while
// an upstream may read the last one, or all of them. A client that sends
// `x-api-key: <random>` then `x-api-key: <real key>` must not get a fresh
// budget per request: a keyed header that occurs more than once keys the
// request as if it were absent, by its client IP.
func TestKeyedHeaderSentTwice(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 2, `{"rules":[
		{"name":"per-key","match":{"path_prefix":"/api"},"key":["header:X-Api-Key"],"limit":2,"window":"1h"},
		{"name":"per-key-path","match":{"path_prefix":"/kp"},"key":["header:x-api-key","path"],"limit":2,"window":"1h"}]}`)
	key := func(k string) [2]string { return [2]string{"x-api-key", k} }

	// A random first value, the real key second: the client's IP budget (2),
	// not one per random value.
	rs := repeat(6, func(i int) *wasmhost.Result {
		return get(vms[i%2], "/api", "10.0.0.1:1", key(fmt.Sprintf("rand-%d", i)), key("real"))
	})
	if n := admitted(rs); n != 2 {
		t.Errorf("x-api-key sent twice (random, then real), 6 requests: %d admitted, want 2 (the client IP's budget)", n)
	}
	// That budget is the header-less budget of the same address.
	if r := get(vms[0], "/api", "10.0.0.1:1"); r.Status != 429 {
		t.Errorf("header-less request from the same address: %d, want 429 (one budget with the repeated-header requests)", r.Status)
	}
	// The real key alone still has its own budget, untouched.
	if n := admitted(repeat(3, func(i int) *wasmhost.Result { return get(vms[i%2], "/api", "10.0.0.1:1", key("real")) })); n != 2 {
		t.Errorf("real key alone: %d admitted, want 2", n)
	}
	// Names are case-insensitive: X-API-KEY and x-api-key are one header,
	// so these are two fields of it.
	rs = repeat(4, func(i int) *wasmhost.Result {
		return get(vms[i%2], "/api", "10.0.0.2:1", [2]string{"X-API-KEY", fmt.Sprintf("r%d", i)}, [2]string{"x-Api-Key", "real2"})
	})
	if n := admitted(rs); n != 2 {
		t.Errorf("X-API-KEY then x-Api-Key: %d of 4 admitted, want 2", n)
	}
	// Three fields, the same value every time: still repeated, still the IP.
	if r := get(vms[0], "/api", "10.0.0.2:1", key("real3"), key("real3"), key("real3")); r.Status != 429 {
		t.Errorf("same value three times from a spent address: %d, want 429", r.Status)
	}
	// An empty value is no key: keyed by the client IP, as documented.
	if n := admitted(repeat(3, func(i int) *wasmhost.Result { return get(vms[i%2], "/api", "10.0.0.3:1", key("")) })); n != 2 {
		t.Errorf("empty x-api-key: %d of 3 admitted, want 2 (the client IP's budget)", n)
	}
	// A rule keyed by the header and the path: the header's part falls
	// back to the IP, the path part stays.
	rs = repeat(4, func(i int) *wasmhost.Result {
		return get(vms[i%2], "/kp/a", "10.0.0.4:1", key(fmt.Sprintf("rand-%d", i)), key("real"))
	})
	if n := admitted(rs); n != 2 {
		t.Errorf("header+path key, header sent twice: %d of 4 admitted, want 2", n)
	}
	if r := get(vms[0], "/kp/b", "10.0.0.4:1", key("x"), key("real")); r.Status != 200 {
		t.Errorf("header+path key, another path: %d, want 200", r.Status)
	}
	// Header maps larger than the plugin's first buffer (2 KiB), and one
	// larger than it keeps (64 KiB): the same answers.
	for _, size := range []int{5000, 100000} {
		filler := [2]string{"x-filler", strings.Repeat("f", size)}
		ip := fmt.Sprintf("10.0.1.%d:1", size/1000)
		rs = repeat(3, func(i int) *wasmhost.Result {
			return get(vms[i%2], "/api", ip, filler, key(fmt.Sprintf("rand-%d", i)), key("real"))
		})
		if n := admitted(rs); n != 2 {
			t.Errorf("%d-byte header map, x-api-key twice: %d of 3 admitted, want 2", size, n)
		}
		k := fmt.Sprintf("big-%d", size)
		if n := admitted(repeat(3, func(i int) *wasmhost.Result { return get(vms[i%2], "/api", ip, filler, key(k)) })); n != 2 {
			t.Errorf("%d-byte header map, one key: %d of 3 admitted, want 2", size, n)
		}
	}
	healthy(t, vms...)
}

// TestKeyedHeaderHostCalls: a rule keyed by a header costs one read of the
// request's header map per request, however many rules key on headers, and
// a configuration without header keys never reads the map.
func TestKeyedHeaderHostCalls(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[
		{"name":"a","key":["header:x-api-key"],"limit":100,"window":"1h"},
		{"name":"b","key":["header:x-tenant","client_ip"],"limit":100,"window":"1h"},
		{"name":"c","key":["header:x-api-key","path"],"limit":100,"window":"1h"}]}`)[0]
	hdrs := [][2]string{{"x-api-key", "k"}, {"x-tenant", "t"}, {"accept", "a"}, {"accept", "b"}}
	get(vm, "/", "10.0.0.9:1", hdrs...).Must(t)
	vm.ResetHostCalls()
	get(vm, "/", "10.0.0.9:1", hdrs...).Must(t)
	calls := vm.HostCalls()
	t.Logf("three header-keyed rules: %d host calls: %s", total(calls), wasmhost.FormatHostCalls(calls))
	if n := calls["env.proxy_get_header_map_pairs"]; n != 1 {
		t.Errorf("header map read %d times, want once", n)
	}
	// One header read: :path, for rule c's path key.
	if n := calls["env.proxy_get_header_map_value"]; n != 1 {
		t.Errorf("%d single header reads, want 1 (:path; the keyed headers come from the map)", n)
	}

	vm2 := workers(t, newHost(t), 1, burstConfig)[0]
	get(vm2, "/", "10.0.0.9:1", hdrs...).Must(t)
	vm2.ResetHostCalls()
	get(vm2, "/", "10.0.0.9:1", hdrs...).Must(t)
	if n := vm2.HostCalls()["env.proxy_get_header_map_pairs"]; n != 0 {
		t.Errorf("a configuration without header keys read the header map %d times", n)
	}
	healthy(t, vm, vm2)
}

// TestCostHeaderSentTwice: a cost.request_header sent more than once costs
// the rule's max, not the first value: Envoy gives the plugin the first
// field, and an upstream may bill the last (`x-cost: 1` then `x-cost: 50`
// must not be charged 1). Once is charged as declared.
func TestCostHeaderSentTwice(t *testing.T) {
	h := newHost(t)
	vm := workers(t, h, 1, `{"rules":[{"name":"spend","limit":100,"window":"1h","cost":{"request_header":"x-cost","max":60}}]}`)[0]
	cost := func(n string) [2]string { return [2]string{"x-cost", n} }
	if r := get(vm, "/", "10.0.0.1:1", cost("1"), cost("50")); r.Status != 200 {
		t.Fatalf("first request: %d", r.Status)
	}
	// 100 - 60 = 40 left: a request declaring 41 once is refused, 40 passes.
	if r := get(vm, "/", "10.0.0.1:1", cost("41")); r.Status != 429 {
		t.Errorf("41 after a repeated header: %d, want 429 (the repeated header cost max, 60)", r.Status)
	}
	if r := get(vm, "/", "10.0.0.1:1", cost("40")); r.Status != 200 {
		t.Errorf("40 after a repeated header: %d, want 200", r.Status)
	}
	healthy(t, vm)
}
