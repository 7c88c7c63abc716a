package local

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/shared/limit"
)

// heldTable answers UpdateHeld from back (per fingerprint) and records
// the refunds it took.
type heldTable struct {
	back  map[uint64]bool
	given []uint64
}

func (h *heldTable) UpdateHeld(fp uint64, _ int, _ *limit.Limit, _, _, _ int64) (bool, error) {
	if h.back[fp] {
		h.given = append(h.given, fp)
		return true, nil
	}
	return false, nil
}

// TestRefundHeld: a reservation that requests were held behind is kept,
// and given back once the one behind it is; one whose release time passed
// is forgotten.
func TestRefundHeld(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"rules":[{"name":"r","limit":1,"window":"1s","max_delay":"5s"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	tb := &heldTable{back: map[uint64]bool{}}
	l := New(cfg, tb, 1)
	l.RefundHeld(Charge{Rule: 0, FP: 7, N: 1, Release: 100}, 10) // held behind: kept
	l.RefundHeld(Charge{Rule: 0, FP: 8, N: 1, Release: 5}, 10)   // its time passed: spent
	if len(l.kept) != 1 || len(tb.given) != 0 {
		t.Fatalf("kept %+v, given %v: want the first kept, nothing given", l.kept, tb.given)
	}
	tb.back[7] = true
	l.RefundHeld(Charge{Rule: 0, FP: 7, N: 1, Release: 200}, 20) // the later one: both back
	if len(l.kept) != 0 || len(tb.given) != 2 {
		t.Fatalf("kept %+v, given %v: want both given back", l.kept, tb.given)
	}
	l.Begin()
	l.Add(Charge{Rule: 0, FP: 9})
	if c := l.Charged(); len(c) != 1 || c[0].FP != 9 {
		t.Fatalf("charged %+v", c)
	}
	l.KeepKey(append(l.KeyBuf(), "abc"...), 1)
	if string(l.Key()) != "abc" || len(l.KeyBuf()) != 0 {
		t.Fatalf("key %q", l.Key())
	}
}

// TestKeyAndHold: a key's fingerprint depends on the seed, the rule and
// the key; a worker that holds all it can holds nothing more, and a shadow
// rule never holds.
func TestKeyAndHold(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"rules":[{"name":"r","limit":1,"window":"1s","max_delay":"5s"},
	  {"name":"s","limit":1,"window":"1s","max_delay":"5s","shadow":true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	a, b := New(cfg, nil, 1), New(cfg, nil, 2)
	key := []byte("client")
	fa := a.KeepKey(append(a.KeyBuf(), key...), 1)
	if fb := b.KeepKey(append(b.KeyBuf(), key...), 1); fb == fa {
		t.Error("two seeds, one fingerprint")
	}
	if fa2 := a.KeepKey(append(a.KeyBuf(), key...), 2); fa2 == fa {
		t.Error("two rules, one fingerprint")
	}
	if again := a.KeepKey(append(a.KeyBuf(), key...), 1); again != fa || string(a.Key()) != "client" {
		t.Errorf("one key, two fingerprints (%x, %x), key %q", fa, again, a.Key())
	}
	r, s := &cfg.Rules[0], &cfg.Rules[1]
	if a.MaxDelay(r) != 5*time.Second || a.MaxDelay(s) != 0 {
		t.Errorf("max delay %v, shadow %v: want 5s, 0", a.MaxDelay(r), a.MaxDelay(s))
	}
	a.SetHoldsFull(true)
	if a.MaxDelay(r) != 0 {
		t.Error("a worker that holds all it can holds one more")
	}
}

// fnv64Reference is the fingerprint hash as its first version wrote it, in
// one pass: states in shared data outlive a module (a worker of an older
// Sluice of the same vm_id reads them), so fingerprints never change.
func fnv64Reference(seed, id uint64, data []byte) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037) ^ seed
	for i := 0; i < 8; i++ {
		h = (h ^ (id >> (8 * i) & 0xff)) * prime
	}
	for _, c := range data {
		h = (h ^ uint64(c)) * prime
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// TestFingerprintsUnchanged: KeepKey, which keeps the hash's state after
// a key's first bytes for the next key of the rule that starts the same,
// gives the reference hash for keys of rules in any order, keys that share
// their first bytes (one word of them, or all) or not, short and long.
func TestFingerprintsUnchanged(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"rules":[{"name":"r","limit":1,"window":"1s"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(3, 4))
	for range 50 {
		seed := rnd.Uint64()
		l := New(cfg, nil, seed)
		for range 200 {
			id := rnd.Uint64N(4) // repeats and changes of rule
			key := make([]byte, rnd.IntN(40))
			for i := range key {
				key[i] = byte(rnd.Uint32())
			}
			if len(key) >= 13 && rnd.IntN(4) > 0 {
				// One of three starts: the first word alike in all,
				// the rest up to byte 13 told apart by the second.
				copy(key, "i\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff")
				key[8+rnd.IntN(5)] ^= byte(rnd.IntN(3))
			}
			want := fnv64Reference(seed, id, key)
			if got := l.KeepKey(append(l.KeyBuf(), key...), id); got != want {
				t.Fatalf("seed %x rule %d key %x: fingerprint %x, want %x", seed, id, key, got, want)
			}
		}
	}
	if got, want := hash64(7, 9, []byte("i\x00")), fnv64Reference(7, 9, []byte("i\x00")); got != want {
		t.Errorf("hash64 %x, want %x", got, want)
	}
}
