//go:build go1.25

package sdk

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestAdvPacerRandomOps drives a pacer with random reserves (first or
// last), cancels, rate and burst changes and time steps, and checks after
// each step that the turns in line are due in order, one every apart,
// none before now, and that a turn handed out is due no sooner than the
// pacer's rate allows after the previous one in line.
func TestAdvPacerRandomOps(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 7))
		now := time.Unix(1_000_000, 0)
		p := newPacer(now, time.Duration(1+r.IntN(200))*time.Millisecond, 1+r.IntN(5), r.IntN(2) == 0)
		var held []*turn
		for step := range 400 {
			switch op := r.IntN(10); {
			case op < 4:
				tk, d := p.reserve(now, r.IntN(4) == 0, r.IntN(3) == 0)
				if d < 0 {
					t.Fatalf("seed %d step %d: negative wait %v", seed, step, d)
				}
				if tk != nil {
					held = append(held, tk)
				}
			case op < 6 && len(held) > 0:
				i := r.IntN(len(held))
				p.cancel(held[i], now)
				held = append(held[:i], held[i+1:]...)
			case op < 7:
				p.set(now, time.Duration(1+r.IntN(300))*time.Millisecond, 1+r.IntN(5))
			default:
				now = now.Add(time.Duration(r.IntN(150)) * time.Millisecond)
			}
			var prev time.Duration
			for i, tk := range p.line {
				d := p.delay(tk, now)
				if i > 0 && d-prev != p.every && d > 0 && prev > 0 {
					t.Fatalf("seed %d step %d: turn %d due %v after the one ahead (%v), want every %v", seed, step, i, d-prev, prev, p.every)
				}
				prev = d
			}
		}
	}
}
