package engine

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/plugin/internal/rls"
)

// failingOnce fails its first calls as Envoy does when the replica of the
// service it chose is gone (connection refused), then answers as
// fakeService.
type failingOnce struct {
	*fakeService
	fail int
	msg  string
}

func (s *failingOnce) Call(cluster string, body []byte, timeout time.Duration, done func(rls.Response, error)) error {
	if s.fail > 0 {
		s.fail--
		s.calls = append(s.calls, hitsOf(body))
		s.pending = append(s.pending, func() {
			done(rls.Response{}, &rls.CallError{HTTPStatus: "200", GRPCStatus: 14, Msg: s.msg})
		})
		return nil
	}
	return s.fakeService.Call(cluster, body, timeout, done)
}

// A call Envoy could not deliver (the replica it chose is gone) is sent
// again, to the replica Envoy's cluster chooses next, up to three times:
// the request is decided by the service, not by on_error, and the circuit
// stays closed. A fourth such failure, or an error of the service itself,
// is left to on_error.
func TestGlobalRetriesACallEnvoyCouldNotDeliver(t *testing.T) {
	const refused = "upstream connect error or disconnect/reset before headers. reset reason: remote connection failure"
	for _, c := range []struct {
		name      string
		fail      int
		msg       string
		byService bool
	}{
		{"one replica gone", 1, refused, true},
		{"the dead replica met three times", 3, refused, true},
		{"every replica gone", 4, refused, false},
		{"the service's own error", 1, "redis: connection refused", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, svc, decided, now := globalEngine(t, 100, "allow")
			f := &failingOnce{fakeService: svc, fail: c.fail, msg: c.msg}
			e.SetGlobal(f, func(p *Pending, v *Verdict) { d := *v; *decided = append(*decided, &d) })
			v := e.Decide(req("/", "GET", "10.0.0.1:1", "x-client", "a"), *now)
			if v.Outcome != Call {
				t.Fatal(v.Outcome)
			}
			for i := 0; i < 6 && len(*decided) == 0; i++ {
				*now += int64(time.Millisecond)
				f.deliver()
			}
			if len(*decided) != 1 {
				t.Fatalf("%d decisions", len(*decided))
			}
			d := (*decided)[0]
			if got := d.Outcome == Allow && d.Err == nil; got != c.byService {
				t.Fatalf("decided by the service: %v (outcome %v, err %v), want %v", got, d.Outcome, d.Err, c.byService)
			}
			if e.CircuitOpen() == c.byService {
				t.Errorf("circuit open %v", e.CircuitOpen())
			}
			t.Logf("calls %v", svc.calls)
		})
	}
}
