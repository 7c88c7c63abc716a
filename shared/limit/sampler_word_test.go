package limit

import (
	"testing"
	"time"
)

// A login read under a loop lag too large to time it (4 ms, the loop 20
// ms late) gives no latency sample but its word on the queue, with the
// lag's error out: 30 ms waited (30-20 >= 2x4), 25 ms did not; in a round
// watching slow start's growth the word comes at once, at CrossRise. A
// class with no base gives none.
func TestSamplerDoneWord(t *testing.T) {
	ms := time.Millisecond
	var p Sampler
	p.Reset(3, 0)
	buy := p.Admit(0, ms)
	waited := p.Admit(0, ms)
	calm := p.Admit(0, ms)
	noBase := p.Admit(0, ms)
	p.DoneWord(waited, 30*ms, 4*ms, 20*ms)
	p.DoneWord(calm, 25*ms, 4*ms, 20*ms)
	p.DoneWord(noBase, 90*ms, 0, 20*ms)
	p.DoneBase(buy, 150*ms, 150*ms, true, true)
	p.Close(int64(2*ms), ms)
	if r := p.Ready; r.N != 1 || r.Fast != 2 || r.Queued != 1 || r.Exp != 150*ms {
		t.Errorf("a buy and three untimed logins: ready %+v, want 1 sample (the buy), the word of 2 (1 queued)", r)
	}
	watch := Gauge{Limit: 30, SlowStart: true, Grown: true, FastGrown: true, Round: 4}
	p.ResetTo(watch, 0)
	_ = p.Admit(0, ms)
	waited = p.Admit(0, ms)
	calm = p.Admit(0, ms)
	p.DoneWord(waited, 37*ms, 4*ms, 20*ms)
	p.DoneWord(calm, 30*ms, 4*ms, 20*ms)
	if r := p.Ready; r.N != 0 || r.Fast != 2 || r.Queued != 1 || !r.Pending() {
		t.Errorf("watching the growth: ready %+v, want the word at once (2, 1 queued at 4x), no sample", r)
	}
}
