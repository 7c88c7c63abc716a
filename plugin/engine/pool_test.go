package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// poolConfig: n rules on /r<i>/ (the first `busy` of them with limit 1 per
// hour per client), no max_keys of their own.
func poolConfig(n int, maxKeys int, window string) string {
	var rules []string
	for i := 0; i < n; i++ {
		rules = append(rules, fmt.Sprintf(`{"name":"r%d","match":{"path_prefix":"/r%d/"},"limit":1,"window":%q}`, i, i, window))
	}
	return fmt.Sprintf(`{"rules":[%s],"max_keys":%d}`, strings.Join(rules, ","), maxKeys)
}

func clientAddr(i int) string { return fmt.Sprintf("10.%d.%d.%d:1", i>>16&255, i>>8&255, i&255) }

// firstAdmits sends one request of each of n new clients to path and
// counts those admitted; then a second request of each, which must all
// be refused (limit 1): a client decided on the overflow state with others
// is admitted only if it is the first there.
func firstAdmits(t *testing.T, e *Engine, path string, from, n int, now int64) int {
	t.Helper()
	ok := 0
	for i := from; i < from+n; i++ {
		if e.Decide(req(path, "GET", clientAddr(i)), now).Outcome == Allow {
			ok++
		}
	}
	for i := from; i < from+n; i++ {
		if e.Decide(req(path, "GET", clientAddr(i)), now).Outcome == Allow {
			t.Fatalf("client %d admitted twice under a limit of 1", i)
		}
	}
	return ok
}

// TestPoolBusyRule: with 100 rules sharing max_keys 18000, a busy rule's
// 2000 clients each get a state of their own (its own share is 90; the
// pool holds the rest), where equal shares alone left it about 90.
func TestPoolBusyRule(t *testing.T) {
	cfg := mustConfig(t, poolConfig(100, 18000, "1h"))
	if cfg.Pool != 9000 || cfg.Rules[0].Share != 90 {
		t.Fatalf("pool %d, share %d: want 9000 and 90", cfg.Pool, cfg.Rules[0].Share)
	}
	e := New(cfg, newMemStore(), 7, wallClock)
	got := firstAdmits(t, e, "/r0/x", 0, 2000, t0)
	t.Logf("busy rule: %d of 2000 new clients admitted with their own state", got)
	if got < 1800 {
		t.Errorf("busy rule: %d of 2000 clients had a state of their own, want nearly all (the pool)", got)
	}
	// A configuration of 64 rules (no pool) keeps its equal shares.
	small := mustConfig(t, poolConfig(64, 18000, "1h"))
	if small.Pool != 0 || small.Rules[0].Share != 18000/64 {
		t.Errorf("64 rules: pool %d, share %d, want 0 and %d", small.Pool, small.Rules[0].Share, 18000/64)
	}
}

// TestPoolFloodIsolation: a flood of new clients on one rule fills its own
// region and at most its window of the pool: a quiet rule's clients and
// another busy rule still get states of their own.
func TestPoolFloodIsolation(t *testing.T) {
	cfg := mustConfig(t, poolConfig(100, 18000, "1h"))
	store := newMemStore()
	e := New(cfg, store, 7, wallClock)
	firstAdmits(t, e, "/r0/x", 0, 20000, t0)
	poolKeys := 0
	store.mu.Lock()
	for k := range store.m {
		if strings.HasPrefix(k, "sluice.v2.pool") {
			poolKeys++
		}
	}
	store.mu.Unlock()
	window := int(e.Table().pool.window)
	if poolKeys > window {
		t.Errorf("the flooded rule wrote %d pool buckets, more than its window of %d", poolKeys, window)
	}
	if got := firstAdmits(t, e, "/r1/x", 100000, 60, t0); got < 55 {
		t.Errorf("a quiet rule after the flood: %d of 60 clients with their own state", got)
	}
	got := firstAdmits(t, e, "/r2/x", 200000, 1000, t0)
	t.Logf("flood: %d pool buckets of %d (window %d); another busy rule then gave %d of 1000 clients their own state", poolKeys, e.Table().PoolBuckets(), window, got)
	if got < 85 {
		t.Errorf("another busy rule after the flood: %d of 1000, fewer than its own share", got)
	}
}

// TestPoolStateNotDuplicated: a client whose state is in the pool keeps it
// when a slot of its own bucket frees: it is looked for in the pool first.
func TestPoolStateNotDuplicated(t *testing.T) {
	// 100 rules, max_keys 1800: a pool of 900 and shares of 9, one bucket
	// of 8 each.
	cfg := mustConfig(t, poolConfig(100, 1800, "1s"))
	if b := (cfg.Rules[0].Share - 1) / SlotsPerBucket; b != 1 {
		t.Fatalf("share %d: want one bucket", cfg.Rules[0].Share)
	}
	e := New(cfg, newMemStore(), 7, wallClock)
	for i := 0; i < 8; i++ {
		if e.Decide(req("/r0/x", "GET", clientAddr(i)), t0).Outcome != Allow {
			t.Fatalf("client %d refused", i)
		}
	}
	late := t0 + int64(500*time.Millisecond)
	if e.Decide(req("/r0/x", "GET", clientAddr(99)), late).Outcome != Allow {
		t.Fatal("client 99 (into the pool) refused")
	}
	// The first 8 states have expired (a 1s window), client 99's has not.
	again := t0 + int64(1200*time.Millisecond)
	if e.Decide(req("/r0/x", "GET", clientAddr(99)), again).Outcome == Allow {
		t.Error("client 99 was admitted again within its window: its pool state was duplicated into a freed slot")
	}
	if e.Decide(req("/r0/x", "GET", clientAddr(99)), t0+int64(1600*time.Millisecond)).Outcome != Allow {
		t.Error("client 99 refused after its window")
	}
}
