package e2e_test

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// classesConfig: one concurrency rule of 4 slots for the whole store
// (`"key": []`), with a login class above the buys (the default class)
// keeping a quarter of the slots for logins; %s is the classes field or
// nothing.
const classesConfig = `{"rules":[{"name":"store","algorithm":"concurrency","limit":4,"key":[],"max_delay":"5s"%s}]}`

const loginClass = `,"classes":[{"name":"login","match":{"path_prefix":"/login"},"reserve":0.25}]`

// classRun is what one run of the launch measured.
type classRun struct {
	buys, buysRefused     int           // buys served (200) and refused in the run's span
	logins, loginsOK      int           // logins sent and served (200)
	loginP99              time.Duration // over every login sent
	upstreamMax, buyMax   int           // most requests in progress at the upstreams at once
	span                  time.Duration // how long the buyers hammered, as measured
	loginSpacing          time.Duration // the mean spacing of the logins, as sent
	classGauges           map[string]uint64
	classInFlightObserved bool
	workers               int // Envoy workers that took connections
}

// TestClassesInEnvoy: a concurrency rule of 4 slots with a login class
// (reserve 0.25) in front of a store whose /buy takes 200 ms: 16 clients
// hammer /buy over both workers while a login arrives every 50 ms. Every
// login is let in at once (the buys never hold the slot kept for logins),
// the buys get their 3 slots; without classes, the logins queue behind the
// buys.
func TestClassesInEnvoy(t *testing.T) {
	with := runClasses(t, loginClass)
	t.Logf("with a login class: %+v", with)
	if with.logins < 60 || with.loginsOK != with.logins {
		t.Errorf("with classes: %d of %d logins served, want every one", with.loginsOK, with.logins)
	}
	if with.loginP99 > 300*time.Millisecond {
		t.Errorf("with classes: login p99 %v, want <= 300 ms", with.loginP99)
	}
	// The buys' 3 slots for the measured span, each buy 200 ms: at most
	// 3 x span / 200 ms (90 in 6 s); at least 50 in 6 s.
	if hi := int(3*with.span/(200*time.Millisecond)) + 3; with.buys < 50 || with.buys > min(100, hi) {
		t.Errorf("with classes: %d buys served in %v, want 50..%d (3 slots of 200 ms)", with.buys, with.span, min(100, hi))
	}
	if with.buyMax > 3 {
		t.Errorf("with classes: the store saw %d buys at once, the buys' cap is 3", with.buyMax)
	}
	if with.workers < 2 {
		t.Errorf("the clients reached %d of Envoy's 2 workers", with.workers)
	}
	if !with.classInFlightObserved {
		t.Errorf("the class gauges never showed the buys in flight: %v", with.classGauges)
	}

	without := runClasses(t, "")
	t.Logf("without classes: %+v", without)
	if without.loginsOK == without.logins && without.loginP99 <= 300*time.Millisecond && without.buys <= 100 {
		t.Errorf("without classes the run met the bounds too (%d of %d logins, p99 %v, %d buys): the test does not tell classes apart",
			without.loginsOK, without.logins, without.loginP99, without.buys)
	}
}

// runClasses starts Envoy (2 workers) with the rule (classes as given),
// a store whose /buy takes 200 ms and whose /login answers at once, and
// runs the launch for 6 s.
func runClasses(t *testing.T, classes string) classRun {
	t.Helper()
	login, err := envoytest.StartUpstream()
	if err != nil {
		t.Fatal(err)
	}
	defer login.Close()
	e := startSluice(t, 2, strings.Replace(classesConfig, "%s", classes, 1), func(o *envoytest.Options) {
		o.Clusters = map[string]string{"login": login.Addr()}
		o.Routes = []envoytest.Route{{Name: "login", Prefix: "/login", Cluster: "login"}, {Name: "default", Prefix: "/"}}
	})
	defer e.Stop()
	e.Upstream.SetDelay(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	const span = 6 * time.Second
	var (
		mu  sync.Mutex
		run classRun
		wg  sync.WaitGroup
	)
	stop := time.Now().Add(span)
	for c := 0; c < 16; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// One connection per buyer: Envoy spreads connections over
			// its workers.
			client := envoytest.NewClient(1)
			for time.Now().Before(stop) {
				code := getStatus(ctx, client, e.URL()+"/buy")
				mu.Lock()
				if time.Now().Before(stop) {
					switch code {
					case 200:
						run.buys++
					default:
						run.buysRefused++
					}
				}
				mu.Unlock()
			}
		}()
	}
	var lat []time.Duration
	var sent []time.Time
	time.Sleep(500 * time.Millisecond) // the buyers fill their slots first
	gauges := make(chan map[string]uint64, 1)
	go func() {
		time.Sleep(2 * time.Second)
		s, _ := e.Stats("sluice.class")
		gauges <- s
	}()
	for next := time.Now(); next.Before(stop.Add(-250 * time.Millisecond)); next = next.Add(50 * time.Millisecond) {
		time.Sleep(time.Until(next))
		sent = append(sent, time.Now())
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A new connection per login: any worker.
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			t0 := time.Now()
			code := getStatus(ctx, client, e.URL()+"/login")
			d := time.Since(t0)
			mu.Lock()
			lat = append(lat, d)
			if code == 200 {
				run.loginsOK++
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	run.span = span // buys are counted until stop only
	run.logins = len(lat)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) > 0 {
		run.loginP99 = lat[(len(lat)*99+99)/100-1]
	}
	if len(sent) > 1 {
		run.loginSpacing = sent[len(sent)-1].Sub(sent[0]) / time.Duration(len(sent)-1)
	}
	run.buyMax = e.Upstream.InFlight().Max
	run.upstreamMax = run.buyMax + login.InFlight().Max
	run.classGauges = <-gauges
	// Both workers took connections (Envoy's per-worker listener stats).
	if st, err := e.Stats("downstream_cx_total"); err == nil {
		for k, v := range st {
			if strings.Contains(k, ".worker_") && v > 0 {
				run.workers++
			}
		}
	}
	run.classInFlightObserved = run.classGauges["wasmcustom.sluice.class.store.default.in_flight"] > 0
	return run
}

func getStatus(ctx context.Context, c *http.Client, url string) int {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return 0
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
