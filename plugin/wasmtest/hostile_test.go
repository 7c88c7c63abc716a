package wasmtest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

// hostileConfig uses every request-derived input: keyed headers, path and
// method keys, X-Forwarded-For, matching on path and method.
const hostileConfig = `{"rules":[
  {"name":"api","match":{"path_prefix":"/api","methods":["GET","POST"]},"key":["header:x-api-key","path","method"],"limit":3,"window":"1s"},
  {"name":"all","key":["client_ip"],"limit":50,"window":"1s","max_delay":"100ms"},
  {"name":"exact","match":{"path_exact":"/"},"limit":5,"window":"1s","shadow":true}],
  "client_ip":{"xff_trusted_hops":2},"exempt_cidrs":["10.255.0.0/16"]}`

var (
	fuzzOnce sync.Once
	fuzzHost *wasmhost.Host
	fuzzVM   *wasmhost.VM
	fuzzErr  error
)

func hostileVM(t testing.TB) (*wasmhost.Host, *wasmhost.VM) {
	fuzzOnce.Do(func() {
		fuzzHost, fuzzErr = wasmhost.New(t.Context(), pluginWasm)
		if fuzzErr == nil {
			fuzzVM, fuzzErr = fuzzHost.NewVM(nil, []byte(hostileConfig))
		}
	})
	if fuzzErr != nil {
		t.Fatal(fuzzErr)
	}
	return fuzzHost, fuzzVM
}

// checkHostile sends one hostile request and fails on a trap, a panic that
// the plugin had to swallow, or any answer but a pass, a hold or a 429.
func checkHostile(t testing.TB, vm *wasmhost.VM, method, path, source string, headers ...[2]string) {
	t.Helper()
	req := wasmhost.Request{Headers: append(wasmhost.Headers{{":method", method}, {":path", path}, {":authority", "x"}}, headers...)}
	req.Properties = wasmhost.Properties{"source.address": source}
	req.Response = &wasmhost.Response{Status: 200}
	r := vm.Request(req)
	if r.Err != nil {
		t.Fatalf("plugin failed on method %q path %.80q source %.80q: %v", method, path, source, r.Err)
	}
	if r.Paused {
		r.Stream.Close()
	} else if r.Status != 200 && r.Status != 429 {
		t.Fatalf("status %d for method %q path %.80q", r.Status, method, path)
	}
	if err := vm.Failed(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(vm.LogText(), "internal error") {
		t.Fatalf("the plugin recovered from a panic:\n%s", vm.LogText())
	}
}

func FuzzHostileRequest(f *testing.F) {
	f.Add("GET", "/api/x?y", "10.0.0.1:80", "1.2.3.4, 5.6.7.8", "key", 0)
	f.Add("", "", "", "", "", 3)
	f.Add("POST", "/", "[::1]:1", ",,,, ,", "\x00\xff", 50)
	f.Add("GET", "/api", "garbage", "2001:db8::1, [::1]:80, 1.1.1.1:", strings.Repeat("k", 5000), 1)
	f.Add("\x00", "\xff\xfe", "1.2.3.4:5:6", "10.255.3.4, 1.1.1.1", "", 200)
	f.Fuzz(func(t *testing.T, method, path, source, xff, apiKey string, extra int) {
		_, vm := hostileVM(t)
		hs := [][2]string{{"x-forwarded-for", xff}, {"x-api-key", apiKey}}
		for i := 0; i < extra%300; i++ {
			hs = append(hs, [2]string{fmt.Sprintf("x-h%d", i), path})
		}
		checkHostile(t, vm, method, path, source, hs...)
	})
}

// TestHostileExtremes: the worst of each input at once, with bounded time
// and memory.
func TestHostileExtremes(t *testing.T) {
	h, vm := hostileVM(t)
	manyXFF := strings.Repeat("198.51.100.7, ", 20000) + "203.0.113.9, 127.0.0.1"
	manyHeaders := make([][2]string, 0, 1000)
	for i := 0; i < 1000; i++ {
		manyHeaders = append(manyHeaders, [2]string{fmt.Sprintf("x-%d", i), strings.Repeat("v", 100)})
	}
	cases := []struct {
		name, method, path, source string
		headers                    [][2]string
	}{
		{"20,000 XFF entries", "GET", "/", "10.0.0.1:1", [][2]string{{"x-forwarded-for", manyXFF}}},
		{"64 KiB path", "GET", "/api/" + strings.Repeat("a", 64<<10), "10.0.0.1:1", nil},
		{"64 KiB API key", "POST", "/api/k", "10.0.0.1:1", [][2]string{{"x-api-key", strings.Repeat("k", 64<<10)}}},
		{"1,000 headers", "GET", "/api/h", "10.0.0.1:1", manyHeaders},
		{"empty path and method", "", "", "", nil},
		{"invalid addresses", "GET", "/", "not an address", [][2]string{{"x-forwarded-for", "999.1.1.1, ::ffff:zz, [::1"}}},
		{"binary junk", "G\x00T", "/\xff\xfe\x00", "\x00\x01:\x02", [][2]string{{"x-forwarded-for", "\x00,\xff"}}},
		{"unix socket peer", "GET", "/", "/var/run/envoy.sock", nil},
	}
	mem0 := vm.MemorySize()
	for _, c := range cases {
		start := time.Now()
		for i := 0; i < 20; i++ {
			checkHostile(t, vm, c.method, c.path, c.source, c.headers...)
		}
		t.Logf("%s: %v per request", c.name, time.Since(start)/20)
	}
	for i := 0; i < 2000; i++ {
		checkHostile(t, vm, "GET", fmt.Sprintf("/api/%d", i), fmt.Sprintf("10.%d.%d.1:1", i>>8, i&255), [2]string{"x-forwarded-for", manyXFF[:1000]})
	}
	h.AdvanceClock(2 * time.Second)
	mem1 := vm.MemorySize()
	t.Logf("guest memory %d KiB -> %d KiB", mem0>>10, mem1>>10)
	if mem1 > mem0+16<<20 {
		t.Errorf("guest memory grew from %d to %d KiB", mem0>>10, mem1>>10)
	}
}
