package engine

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkDecide measures one decision of the engine natively: the rule
// matching, the client's fingerprint and one shared-data read-modify-write
// of its bucket (plus, with "+headers", building the response headers).
//
// "memstore" runs over the tests' memStore, which copies every value on Get
// and Set as Envoy's shared data does: its allocations are the store's, not
// the engine's. "nocopy" runs over a store that reuses one buffer, so that
// allocs/op is the engine's own (target: zero).
func BenchmarkDecide(b *testing.B) {
	const (
		admitCfg  = `{"rules":[{"name":"bench","limit":1000000000,"window":"1h"}]}`
		rejectCfg = `{"rules":[{"name":"bench","limit":1,"window":"1h"}]}`
		twoCfg    = `{"rules":[
			{"name":"all","limit":1000000000,"window":"1h"},
			{"name":"buy","match":{"path_prefix":"/buy","methods":["POST"]},"limit":1000000000,"window":"1h","algorithm":"sliding_window"}]}`
		xffCfg = `{"rules":[{"name":"bench","limit":1000000000,"window":"1h"}],"client_ip":{"xff_trusted_hops":1}}`
	)
	one := []*fakeRequest{req("/", "GET", "10.0.0.1:5555")}
	many := make([]*fakeRequest, 1024)
	for i := range many {
		many[i] = req("/", "GET", fmt.Sprintf("10.%d.%d.1:5555", i>>8, i&0xff))
	}
	buy := []*fakeRequest{req("/buy/item", "POST", "10.0.0.1:5555")}
	xff := make([]*fakeRequest, 1024)
	for i := range xff {
		xff[i] = req("/", "GET", "127.0.0.1:40000", "x-forwarded-for", fmt.Sprintf("203.0.113.9, 198.18.%d.%d", i>>8, i&0xff))
	}
	cases := []struct {
		name    string
		cfg     string
		reqs    []*fakeRequest
		headers bool
		want    Outcome
	}{
		{"admit", admitCfg, one, false, Allow},
		{"admit+headers", admitCfg, one, true, Allow},
		{"reject", rejectCfg, one, false, Reject},
		{"reject+headers", rejectCfg, one, true, Reject},
		{"admit-1024clients", admitCfg, many, false, Allow},
		{"admit-xff-1024clients", xffCfg, xff, false, Allow},
		{"admit-2rules", twoCfg, buy, false, Allow},
	}
	stores := []struct {
		name string
		new  func() Store
	}{
		{"memstore", func() Store { return newMemStore() }},
		{"nocopy", func() Store { return newNoCopyStore() }},
	}
	for _, s := range stores {
		for _, c := range cases {
			b.Run(s.name+"/"+c.name, func(b *testing.B) {
				e := New(mustConfig(b, c.cfg), s.new(), 42, wallClock)
				var hs HeaderSet
				now := t0
				// Warm up: create every bucket and, for reject, spend the budget.
				for _, r := range c.reqs {
					e.Decide(r, now)
				}
				if v := e.Decide(c.reqs[0], now); v.Outcome != c.want {
					b.Fatalf("outcome %v, want %v", v.Outcome, c.want)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					now += int64(time.Microsecond)
					v := e.Decide(c.reqs[i%len(c.reqs)], now)
					if c.headers {
						hs.Build(&v, e.Config().Headers, v.Outcome == Reject)
					}
				}
			})
		}
	}
}

// noCopyStore is a single-goroutine Store that hands out one reused buffer
// instead of a fresh copy per Get, so a benchmark over it counts only the
// caller's allocations. Same semantics as memStore otherwise.
type noCopyStore struct {
	m       map[string]*memEntry
	buf     []byte
	nextCAS uint32
}

func newNoCopyStore() *noCopyStore {
	return &noCopyStore{m: map[string]*memEntry{}, nextCAS: 1}
}

func (s *noCopyStore) Get(key string) ([]byte, uint32, bool, error) {
	e, ok := s.m[key]
	if !ok {
		return nil, 0, false, nil
	}
	s.buf = append(s.buf[:0], e.val...)
	return s.buf, e.cas, true, nil
}

func (s *noCopyStore) Set(key string, val []byte, cas uint32) (bool, error) {
	e, ok := s.m[key]
	if ok && cas != 0 && cas != e.cas {
		return true, nil
	}
	if !ok {
		e = &memEntry{}
		s.m[string([]byte(key))] = e
	}
	e.val = append(e.val[:0], val...)
	e.cas = s.nextCAS
	if s.nextCAS++; s.nextCAS == 0 {
		s.nextCAS = 1
	}
	return false, nil
}

// BenchmarkDecideSettle: a decision and, for a rule charged after the
// response, the charge from the response's header (Settle), beside a plain
// token bucket's decision (no Settle). Over the no-copy store: allocs/op
// are the engine's own.
func BenchmarkDecideSettle(b *testing.B) {
	cases := []struct{ name, cfg string }{
		{"token_bucket", `{"rules":[{"name":"bench","limit":1000000000,"window":"1h"}]}`},
		{"response_header", `{"rules":[{"name":"bench","limit":1000000000,"window":"1h","cost":{"response_header":"x-tokens-used","max":100000}}]}`},
		{"request_header", `{"rules":[{"name":"bench","limit":1000000000,"window":"1h","cost":{"request_header":"x-cost","max":50}}]}`},
	}
	r := req("/", "GET", "10.0.0.1:5555", "x-cost", "7")
	rp := resp("200", "x-tokens-used", "42")
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			e := New(mustConfig(b, c.cfg), newNoCopyStore(), 1, wallClock)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				v := e.Decide(r, t0)
				if v.Outcome != Allow {
					b.Fatal(v.Outcome)
				}
				if v.ChargesAfterResponse() {
					e.Settle(&v, rp, t0)
				}
			}
		})
	}
}
