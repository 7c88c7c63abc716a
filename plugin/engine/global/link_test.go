package global

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/plugin/internal/rls"
)

type recCaller struct {
	bodies   int
	detached int
	fail     bool
}

func (c *recCaller) Call(_ string, body []byte, _ time.Duration, _ func(rls.Response, error)) error {
	c.bodies++
	if c.fail {
		return errors.New("not sent")
	}
	return nil
}

type detCaller struct{ recCaller }

func (c *detCaller) CallDetached(_ string, _ []byte, _ time.Duration, _ func(rls.Response, error)) error {
	c.detached++
	return nil
}

// TestLinkCircuit: a failure opens the circuit; probes are due after a
// back-off that doubles up to CircuitMaxBackoff, one at a time; an answer
// closes it.
func TestLinkCircuit(t *testing.T) {
	var l Link
	if l.Open() || l.ProbeDue(0) {
		t.Fatal("a new link is closed and probes nothing")
	}
	now := int64(1e9)
	backoff := CircuitMinBackoff
	for i := 0; i < 5; i++ {
		l.Failed(now)
		if !l.Open() {
			t.Fatalf("failure %d: circuit closed", i+1)
		}
		if l.ProbeDue(now + int64(backoff) - 1) {
			t.Fatalf("failure %d: probe before the back-off %v", i+1, backoff)
		}
		if !l.ProbeDue(now+int64(backoff)) || l.ProbeDue(now+int64(backoff)) {
			t.Fatalf("failure %d: want exactly one probe at the back-off %v", i+1, backoff)
		}
		backoff = min(2*backoff, CircuitMaxBackoff)
	}
	l.Answered(now, now+int64(time.Millisecond))
	if l.Open() || l.ProbeDue(now+int64(time.Hour)) {
		t.Fatal("an answer closes the circuit")
	}
}

// TestLinkRTT: InitialRTT until an answer, then the first measure, then a
// moving average of 1/8.
func TestLinkRTT(t *testing.T) {
	var l Link
	if l.RTT() != InitialRTT {
		t.Fatalf("rtt %v before any answer, want %v", l.RTT(), InitialRTT)
	}
	l.Answered(0, int64(8*time.Millisecond))
	if l.RTT() != 8*time.Millisecond {
		t.Fatalf("rtt %v after one answer of 8ms", l.RTT())
	}
	l.Answered(0, int64(16*time.Millisecond))
	if l.RTT() != 9*time.Millisecond {
		t.Fatalf("rtt %v after 8ms then 16ms, want 9ms", l.RTT())
	}
}

// TestLinkSend: calls go through Call, detached ones through CallDetached
// when the caller has it; a caller's error is returned.
func TestLinkSend(t *testing.T) {
	var l Link
	if l.Ready() {
		t.Fatal("ready without a caller")
	}
	c := &detCaller{}
	l.SetCaller(c)
	req := &rls.Request{Domain: "d", Entries: []rls.Entry{{Key: "k", Value: "v"}}, Limit: 1, Hits: 1}
	if err := l.Send("c", req, time.Second, false, nil); err != nil || c.bodies != 1 {
		t.Fatalf("send: %v, %d calls", err, c.bodies)
	}
	if err := l.Send("c", req, time.Second, true, nil); err != nil || c.detached != 1 || c.bodies != 1 {
		t.Fatalf("detached: %v, %d detached %d calls", err, c.detached, c.bodies)
	}
	plain := &recCaller{fail: true}
	l.SetCaller(plain)
	if err := l.Send("c", req, time.Second, true, nil); err == nil || plain.bodies != 1 {
		t.Fatalf("detached without CallDetached: %v, %d calls; want Call's error", err, plain.bodies)
	}
}

// TestLinkRecovery: a probe out does not block the next beyond
// CircuitMaxBackoff; a failure of a call sent before the last answer
// leaves the circuit closed, so does one failure just after an answer
// (the next opens it); another worker's answer after this one's last
// failure closes it, one before it brings the next probe to the shortest
// back-off.
func TestLinkRecovery(t *testing.T) {
	var l Link
	now := int64(1e9)
	for i := 0; i < 4; i++ {
		l.Failed(now)
	}
	at := now + int64(CircuitMaxBackoff)
	if !l.ProbeDue(at) || l.ProbeDue(at+int64(CircuitMaxBackoff)-1) || !l.ProbeDue(at+int64(CircuitMaxBackoff)) {
		t.Fatal("a stuck probe: want the next one CircuitMaxBackoff later, not before")
	}
	answered := at + int64(CircuitMaxBackoff) + 1
	if !l.Succeeded(answered) || l.Open() {
		t.Fatal("an answer closes an open circuit and says it was open")
	}
	l.FailedCall(at, answered+1) // the stuck probe, sent before the answer
	if l.Open() {
		t.Fatal("the late failure of a call sent before the answer opened the circuit")
	}
	l.FailedCall(answered+2, answered+3)
	if l.Open() {
		t.Fatal("one failure just after an answer opened the circuit")
	}
	l.FailedCall(answered+3, answered+3)
	if !l.Open() {
		t.Fatal("a second failure without an answer between: the circuit stays closed")
	}
	// Another worker answered before this failure: the next probe at the
	// shortest back-off.
	l.Failed(answered + 4) // the back-off grows
	failed := answered + 4
	l.PeerAnswered(answered+3, failed+int64(time.Millisecond))
	if !l.Open() || l.ProbeDue(failed+int64(CircuitMinBackoff)-1) || !l.ProbeDue(failed+int64(CircuitMinBackoff)) {
		t.Fatal("a peer's answer before the last failure: want a probe at the shortest back-off")
	}
	// Another worker answered after it: closed.
	l.PeerAnswered(failed+1, failed+2)
	if l.Open() {
		t.Fatal("a peer's answer after the last failure leaves the circuit open")
	}
}
