package wasmtest

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmhost"
)

// TestBucketReadsIntoReusedBufferKeepClientsApart: `make build` has the
// host copy every bucket read into one reused buffer per table
// (plugin/hostcall_wasip1.go, sluiceOnMemoryAllocate) instead of a new
// allocation. Were a decision to read a bucket through a view that a later
// read overwrote, clients sharing buckets would see each other's counts; were
// the buffer handed to any other allocation, the client string (a view of
// source.address) would be overwritten by the next bucket read. 30 clients
// (45 client states) on 100 buckets, about ten pairs sharing one, their
// requests shuffled over 3 VMs, to two rules with different limits: every
// client's remaining count goes down by one per request from its own limit,
// exactly limit requests per client are admitted, and the client named in
// each rejection's log line is the one rejected.
func TestBucketReadsIntoReusedBufferKeepClientsApart(t *testing.T) {
	t.Run("ipv4", func(t *testing.T) {
		testReusedBuffers(t, "", func(c, n int) (string, string) {
			ip := fmt.Sprintf("10.%d.0.%d", c/50, c%50+1)
			return fmt.Sprintf("%s:%d", ip, 1000+n), ip
		})
	})
	t.Run("ipv6 zone", func(t *testing.T) {
		testReusedBuffers(t, `,"client_ip":{"ipv6_prefix":128}`, func(c, n int) (string, string) {
			ip := fmt.Sprintf("fe80::%x%%eth%d", c+1, c)
			return fmt.Sprintf("[%s]:%d", ip, 1000+n), ip
		})
	})
}

// TestZoneSurvivesLaterAddressReads: an IPv6 zone is kept in the client
// (ipv6_prefix 128), which log lines print; ParseHostPort copies it out of
// the source.address buffer that the next request's address is read into.
// A request waiting in a concurrency queue keeps its client while others'
// addresses are read, and is logged when its max_delay passes: with the
// zone a view of the buffer, the line would name the later client's zone.
func TestZoneSurvivesLaterAddressReads(t *testing.T) {
	h := newHost(t)
	vms := workers(t, h, 1, `{"rules":[{"name":"buy","algorithm":"concurrency","limit":1,"max_delay":"300ms"}],"client_ip":{"ipv6_prefix":128}}`)
	holder := open(t, vms[0], "/buy", "[fe80::1%eth1]:1000")
	waiter := open(t, vms[0], "/buy", "[fe80::1%eth1]:1001")
	if state(holder) != wasmhost.StreamUpstream || state(waiter) != wasmhost.StreamPaused {
		t.Fatalf("holder %v, waiter %v: want upstream and queued", state(holder), state(waiter))
	}
	// Other clients' addresses, the same length, overwrite the buffer.
	for i := range 3 {
		open(t, vms[0], "/buy", fmt.Sprintf("[fe80::%d%%wlp%d]:2000", i+2, i))
	}
	h.AdvanceClock(350 * time.Millisecond)
	if r := waiter.Result(); r.Status != 429 {
		t.Fatalf("waiter past max_delay: %v %d", state(waiter), r.Status)
	}
	logs := vms[0].LogText()
	if !strings.Contains(logs, "rejected client fe80::1%eth1 ") {
		t.Fatalf("no rejection of fe80::1%%eth1 logged:\n%s", logs)
	}
}

// testReusedBuffers runs the test with extra top-level configuration and
// addr giving a client's n-th request's source.address and the client as
// logged.
func testReusedBuffers(t *testing.T, extra string, addr func(c, n int) (string, string)) {
	h := newHost(t)
	vms := workers(t, h, 3, `{"rules":[
		{"name":"all","limit":4,"window":"1h"},
		{"name":"b","match":{"path_prefix":"/b"},"limit":2,"window":"1h"}],"max_keys":900`+extra+`}`)
	const clients, perClient = 30, 6
	var order []int
	for c := 0; c < clients; c++ {
		for i := 0; i < perClient; i++ {
			order = append(order, c)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	sent := make([]int, clients)
	admitted := make([]int, clients)
	for n, c := range order {
		src, client := addr(c, n)
		path := "/a"
		if c%2 == 1 {
			path = "/b"
		}
		sent[c]++
		limit := 4
		if path == "/b" {
			limit = 2 // the tighter rule decides
		}
		vm := vms[n%len(vms)]
		if sent[c] > limit {
			// A worker logs at most one rejection a second: let one pass.
			h.AdvanceClock(1100 * time.Millisecond)
		}
		r := get(vm, path, src).Must(t)
		wantRemaining := limit - sent[c]
		if wantRemaining < 0 {
			wantRemaining = 0
		}
		switch r.Status {
		case 200:
			admitted[c]++
		case 429:
			// The client string comes from source.address; it must not
			// share memory with a bucket read since.
			logs := vm.LogText()
			last := logs[strings.LastIndex(logs, "rejected client "):]
			if want := "rejected client " + client + " "; !strings.HasPrefix(last, want) {
				t.Fatalf("client %d rejected, last rejection logged: %.60q, want %q", c, last, want)
			}
		default:
			t.Fatalf("client %d: status %d", c, r.Status)
		}
		if got := r.Headers.Value("x-ratelimit-remaining"); got != strconv.Itoa(wantRemaining) {
			t.Fatalf("client %d request %d (%s): x-ratelimit-remaining %q, want %d", c, sent[c], path, got, wantRemaining)
		}
	}
	for c := 0; c < clients; c++ {
		want := 4
		if c%2 == 1 {
			want = 2
		}
		if admitted[c] != want {
			t.Errorf("client %d: %d admitted, want %d", c, admitted[c], want)
		}
	}
}
