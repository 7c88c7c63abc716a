package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// The fleet on highly available Redis: three Sluice Envoys (two workers
// each) behind a round-robin front, envoyproxy/ratelimit on Redis with
// Sentinel (a master, a replica, three Sentinels) or on a Redis Cluster of
// three masters, all on loopback.

// haConfig: a client's budget (/budget, 200 an hour) and probes (/probe,
// each from a new client, so each needs a call: a response with
// X-RateLimit-Limit was decided by the service, one without by on_error).
const haConfig = `{
  "rules": [
    {"name": "ha_budget", "scope": "global", "match": {"path_prefix": "/budget"}, "limit": 200, "window": "1h", "key": ["header:x-client"]},
    {"name": "ha_probe", "scope": "global", "match": {"path_prefix": "/probe"}, "limit": 1000, "window": "1h", "key": ["header:x-client"]}
  ],
  "global": {"cluster": "ratelimit", "domain": "sluice", "timeout": "500ms"},
  "on_error": "allow"
}`

const haLimit = 200

// haGet sends one request for client to path through the front: admitted
// or not, and whether the service decided it (limit headers) rather than
// on_error.
func haGet(t *testing.T, f *fleet, path, client string) (admitted, byService bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, _, err := f.front.Get(ctx, path, http.Header{"X-Client": {client}})
	if err != nil {
		t.Error(err)
		return false, false
	}
	if resp.StatusCode != 200 && resp.StatusCode != 429 {
		t.Errorf("status %d", resp.StatusCode)
	}
	return resp.StatusCode == 200, resp.Header.Get("X-RateLimit-Limit") != ""
}

// awayFromTheHour waits past the top of the hour if a run of need would
// cross it (the rules' fixed window).
func awayFromTheHour(t *testing.T, need time.Duration) {
	now := time.Now()
	if left := now.Truncate(time.Hour).Add(time.Hour).Sub(now); left < need {
		t.Logf("waiting %v for the next hour window", left.Round(time.Millisecond))
		time.Sleep(left + 100*time.Millisecond)
	}
}

// redisCountAt sums the counters of keys matching pattern on the Redis at
// addr.
func redisCountAt(t *testing.T, addr, pattern string) uint64 {
	t.Helper()
	n, err := redisSum(addr, pattern)
	if err != nil {
		t.Fatalf("count at %s: %v", addr, err)
	}
	return n
}

// TestFleetSentinel: the master is killed (SIGKILL) mid-window; nothing is
// restarted. The Sentinels promote the replica, the service follows, and
// the fleet decides by the service again within 10 s of the kill. Two
// clients: "quiet" spent part of its budget before the kill and the rest
// after the recovery (its count was replicated long before the kill): in
// all it is admitted exactly its limit less what leases left unused; "busy"
// spends its budget from four senders through the kill: it is admitted at
// most its limit plus what on_error admitted for it plus what the failover
// lost (hits the old master granted and did not replicate; measured as the
// admissions the service decided over the limit, and as the old master's
// count just before the kill less the new master's).
func TestFleetSentinel(t *testing.T) {
	set := envoytest.StartSentinelT(t)
	rls := envoytest.RLST(t, map[string]string{"sluice.yaml": shippedRLSConfig(t)},
		"REDIS_TYPE=sentinel", "REDIS_URL="+set.URL())
	f := startFleet(t, rls, haConfig)
	awayFromTheHour(t, 40*time.Second)
	run := fmt.Sprint(time.Now().UnixNano())
	quiet, busy := run+"quiet", run+"busy"
	onErr0 := f.sum(t, "wasmcustom.sluice.on_error.allowed")
	for i := 0; i < 6; i++ {
		if ok, svc := haGet(t, f, "/probe", fmt.Sprintf("%sprobe-before%d", run, i)); !ok || !svc {
			t.Fatalf("before the kill: probe admitted %v, decided by the service %v", ok, svc)
		}
	}
	quietAdmitted := 0
	for i := 0; i < haLimit/2; i++ {
		if ok, _ := haGet(t, f, "/budget", quiet); ok {
			quietAdmitted++
		}
	}
	watch := watchCircuits(t, f)
	b := spendThroughKill(t, f, set, busy)
	recovered, probes, probesOnError := probeRecovery(t, f, b.killed, run)
	promoted := <-b.promoted
	t.Logf("the Sentinels named the new master %v after the kill; replication lag at the kill %d bytes", promoted.Round(time.Millisecond), b.lag)
	if os.Getenv("SLUICE_DEBUG_RLS") != "" {
		for _, l := range strings.Split(rls.Logs(), "\n") {
			if strings.Contains(l, "rror") {
				t.Log(l)
			}
		}
	}
	newMaster, err := set.MasterAddr()
	if err != nil {
		t.Fatal(err)
	}
	after := redisCountAt(t, newMaster, "*ha_budget*")
	onErr := f.sum(t, "wasmcustom.sluice.on_error.allowed") - onErr0
	t.Logf("Sentinel failover: master %s killed, new master %s; the fleet decided by the service again %v after the kill (%d probes from new clients, %d of them decided by on_error); on_error.allowed %d",
		b.oldMaster, newMaster, recovered.Round(time.Millisecond), probes, probesOnError, onErr)
	if recovered == 0 || recovered > 10*time.Second {
		t.Fatalf("the fleet did not decide by the service again within 10 s of the kill (%v)", recovered)
	}
	if newMaster == b.oldMaster {
		t.Fatalf("no failover: the master is still %s", newMaster)
	}
	// Both clients spend the rest of their budget. What decided by on_error
	// from here: the circuit (short_circuited) or failed calls.
	why := []string{"short_circuited", "call_failures", "expired", "lost_answers", "probes"}
	whyAt := func() []uint64 {
		var n []uint64
		for _, w := range why {
			n = append(n, f.sum(t, "wasmcustom.sluice.global."+w))
		}
		return n
	}
	why0 := whyAt() // as published (each worker once a second)
	quietLate, quietOnError := spendRestBy(t, f, quiet)
	quietAdmitted += quietLate
	late, busyLateOnError := spendRestBy(t, f, busy)
	time.Sleep(1100 * time.Millisecond)
	why1 := whyAt()
	for i, w := range why {
		t.Logf("after the recovery, while both clients spent the rest: %s %d", w, why1[i]-why0[i])
	}
	// Every worker decides by the service again within 10 s of the kill:
	// probes from new clients (each needs a call) until every Envoy has
	// shown no open circuit and no on_error decision for 2 s (as published
	// once a second), or 11 s after the kill; none decided by on_error
	// after 10 s.
	lateProbes, lateOnError := probeUntil(t, f, func() bool {
		return time.Since(b.killed) > 11*time.Second || watch.quietFor(2*time.Second)
	}, b.killed.Add(10*time.Second), run)
	watch.end()
	lastOpen := watch.lastOnError(b.killed)
	t.Logf("after the kill, each Envoy's last sample of an open circuit or an on_error decision: %v; probes from 10 s to 11 s after the kill: %d, by on_error %d",
		lastOpen, lateProbes, lateOnError)
	if lateOnError > 0 {
		t.Errorf("%d of %d probes decided by on_error more than 10 s after the kill", lateOnError, lateProbes)
	}
	for i, d := range lastOpen {
		if d > 11*time.Second {
			t.Errorf("Envoy %d: a circuit open or on_error deciding %v after the kill", i, d.Round(time.Millisecond))
		}
	}
	byService := b.admitted - b.byOnError + int64(late-busyLateOnError)
	overByService := byService - haLimit
	t.Logf("quiet: %d admitted in all (limit %d), %d of them after the recovery by on_error (a circuit still open); busy: %d admitted before the kill, %d through it (%d by on_error), %d after the recovery (%d by on_error): %d decided by the service (%d over the limit: lost by the failover); counts: old master before the kill %d (both clients), new master after the promotion %d (lost at least %d)",
		quietAdmitted, haLimit, quietOnError, b.atKill, b.admitted-b.atKill, b.byOnError, late, busyLateOnError, byService, max(overByService, 0), b.before, after, int64(b.before)-int64(after))
	if byService := quietAdmitted - quietOnError; byService > haLimit || byService < haLimit*9/10 {
		t.Errorf("quiet: the service admitted %d (and on_error %d), want %d..%d", byService, quietOnError, haLimit*9/10, haLimit)
	}
	// What the failover can lose is what the old master granted in its
	// last moments without replicating: at most a few leases.
	if overByService > haLimit/2 {
		t.Errorf("busy: the service decided %d admissions, %d over the limit", byService, overByService)
	}
	for _, c := range []string{quiet, busy} {
		if ok, svc := haGet(t, f, "/budget", c); ok && svc {
			t.Errorf("%s is admitted by the service after spending its budget", c)
		}
	}
}

type killRun struct {
	oldMaster                   string
	killed                      time.Time
	before                      uint64
	atKill, admitted, byOnError int64
	promoted                    chan time.Duration // after the kill
	lag                         int64              // replication lag at the kill, bytes
}

// replOffset reads a replication offset (field of INFO replication) at
// addr.
func replOffset(t *testing.T, addr, field string) int64 {
	r, err := envoytest.RedisDo(addr, "INFO", "replication")
	if err != nil || len(r) == 0 {
		t.Fatalf("INFO replication at %s: %v", addr, err)
	}
	for _, l := range strings.Split(r[0], "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("%s: %q", field, v)
			}
			return n
		}
	}
	t.Fatalf("no %s at %s", field, addr)
	return 0
}

// spendThroughKill has client spend its budget from four senders, kills the
// master 300 ms in and goes on 500 ms after the kill.
func spendThroughKill(t *testing.T, f *fleet, set *envoytest.SentinelSet, client string) killRun {
	var admitted, byOnError atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if ok, svc := haGet(t, f, "/budget", client); ok {
					admitted.Add(1)
					if !svc {
						byOnError.Add(1)
					}
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	r := killRun{oldMaster: set.Master.Addr()}
	r.before = redisCountAt(t, r.oldMaster, "*ha_budget*")
	// The replication lag at the kill: what the master has written that
	// the replica has not (bytes of the replication stream).
	masterOff := replOffset(t, r.oldMaster, "master_repl_offset")
	r.lag = masterOff - replOffset(t, set.Replica.Addr(), "slave_repl_offset")
	set.Master.Kill()
	r.killed = time.Now()
	r.atKill = admitted.Load()
	r.promoted = make(chan time.Duration, 1)
	go func() { // when the Sentinels name the new master
		for time.Since(r.killed) < 20*time.Second {
			if m, err := set.MasterAddr(); err == nil && m != r.oldMaster {
				r.promoted <- time.Since(r.killed)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		r.promoted <- 0
	}()
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	r.admitted, r.byOnError = admitted.Load(), byOnError.Load()
	return r
}

// probeRecovery sends probes from new clients until three in a row are
// decided by the service, or 15 s after the kill.
func probeRecovery(t *testing.T, f *fleet, killed time.Time, run string) (recovered time.Duration, probes, onError int) {
	for inRow := 0; time.Since(killed) < 15*time.Second; probes++ {
		if _, svc := haGet(t, f, "/probe", fmt.Sprintf("%sprobe-after%d", run, probes)); !svc {
			onError++
			inRow = 0
		} else if inRow++; inRow == 3 {
			return time.Since(killed), probes + 1, onError
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, probes, onError
}

// probeUntil sends probes from new clients until done and returns how
// many were sent after from and how many of those on_error decided.
func probeUntil(t *testing.T, f *fleet, done func() bool, from time.Time, run string) (probes, onError int) {
	for i := 0; !done(); i++ {
		at := time.Now()
		_, svc := haGet(t, f, "/probe", fmt.Sprintf("%sprobe-late%d", run, i))
		if at.Before(from) {
			continue
		}
		probes++
		if !svc {
			onError++
		}
		time.Sleep(5 * time.Millisecond)
	}
	return probes, onError
}

// spendRestBy sends client's requests until every member's workers have
// refused in a row and returns how many were admitted, and how many of those
// on_error decided (no limit headers): a worker whose circuit is still open
// after the failover decides by on_error until its next probe succeeds, and
// those admissions are on_error's, not the service's. One refusal is not the
// end of the budget: a lease held by another Envoy's worker can still have
// hits in it.
func spendRestBy(t *testing.T, f *fleet, client string) (admitted, byOnError int) {
	refusedInARow := 0
	for i := 0; i < 3*haLimit && refusedInARow < 2*len(f.members); i++ {
		ok, svc := haGet(t, f, "/budget", client)
		if !ok {
			refusedInARow++
			continue
		}
		refusedInARow = 0
		admitted++
		if !svc {
			byOnError++
		}
	}
	return admitted, byOnError
}

// TestFleetRedisCluster: the service on a Redis Cluster of three masters
// (implicit pipelining, which cluster mode needs): 24 clients, whose keys
// spread over the masters, each send 120 requests one after another: each
// gets 90 to 100 of its 100 an hour, and every master holds some of the
// counters.
func TestFleetRedisCluster(t *testing.T) {
	c := envoytest.StartClusterT(t)
	rls := envoytest.RLST(t, map[string]string{"sluice.yaml": shippedRLSConfig(t)},
		"REDIS_TYPE=cluster", "REDIS_URL="+c.URL(), "REDIS_PIPELINE_WINDOW=150us", "REDIS_PIPELINE_LIMIT=8")
	f := startFleet(t, rls, strings.Replace(haConfig, `"limit": 200`, `"limit": 100`, 1))
	awayFromTheHour(t, 30*time.Second)
	run := fmt.Sprint(time.Now().UnixNano())
	var wg sync.WaitGroup
	// 24 clients: the chance that a master holds none of their keys is
	// 3 x (2/3)^24, 0.02%.
	got := make([]int, 24)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 120; n++ {
				if ok, _ := haGet(t, f, "/budget", run+"c"+strconv.Itoa(i)); ok {
					got[i]++
				}
			}
		}()
	}
	wg.Wait()
	var held []uint64
	for _, p := range c.Nodes {
		held = append(held, redisCountAt(t, p.Addr(), "*ha_budget*"))
	}
	onErr := f.sum(t, "wasmcustom.sluice.on_error.allowed")
	t.Logf("Redis Cluster: admitted %v of 120 each (limit 100); counters per master %v; on_error.allowed %d; calls %d",
		got, held, onErr, f.sum(t, "wasmcustom.sluice.global.calls"))
	for i, n := range got {
		if n < 90 || n > 100 {
			t.Errorf("client %d: admitted %d, want 90..100", i, n)
		}
	}
	if onErr > 0 {
		t.Errorf("%d requests decided by on_error", onErr)
	}
	for i, n := range held {
		if n == 0 {
			t.Errorf("master %d holds no counter: the keys did not spread", i)
		}
	}
}

// circuitWatch samples, every 250 ms, each member's circuit_open gauge
// (its workers whose circuit is open) and on_error counter, so that a test
// can tell when each Envoy's workers decided by the service again (the
// plugin publishes them once a second).
type circuitWatch struct {
	mu      sync.Mutex
	samples []circuitSample
	stop    chan struct{}
	done    chan struct{}
}

type circuitSample struct {
	at      time.Time
	open    []uint64
	onError []uint64
}

func watchCircuits(t *testing.T, f *fleet) *circuitWatch {
	w := &circuitWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			s := circuitSample{at: time.Now()}
			for _, e := range f.members {
				o, _ := e.Stat("wasmcustom.sluice.global.circuit_open")
				n, _ := e.Stat("wasmcustom.sluice.on_error.allowed")
				s.open, s.onError = append(s.open, o), append(s.onError, n)
			}
			w.mu.Lock()
			w.samples = append(w.samples, s)
			w.mu.Unlock()
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(w.end)
	return w
}

func (w *circuitWatch) end() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// quietFor says whether the samples of the last d (at least d of them)
// show every member with no circuit open and no on_error decision.
func (w *circuitWatch) quietFor(d time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(w.samples)
	if n < 2 || time.Since(w.samples[0].at) < d {
		return false
	}
	for i := n - 1; i > 0 && time.Since(w.samples[i].at) <= d; i-- {
		for m, o := range w.samples[i].open {
			if o > 0 || w.samples[i].onError[m] > w.samples[i-1].onError[m] {
				return false
			}
		}
	}
	return true
}

// lastOnError returns, per member, the last time after since at which a
// sample showed a worker's circuit open or on_error deciding (its counter
// grew since the previous sample), as a duration after since (0: never).
func (w *circuitWatch) lastOnError(since time.Time) []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var last []time.Duration
	for i, s := range w.samples {
		if last == nil {
			last = make([]time.Duration, len(s.open))
		}
		for m := range s.open {
			grew := i > 0 && s.onError[m] > w.samples[i-1].onError[m]
			if s.at.After(since) && (s.open[m] > 0 || grew) {
				last[m] = s.at.Sub(since)
			}
		}
	}
	return last
}
