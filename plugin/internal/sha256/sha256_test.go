package sha256

import (
	stdsha256 "crypto/sha256"
	"encoding/hex"
	"math/big"
	"math/rand/v2"
	"testing"
)

// TestAgainstCryptoSHA256 compares every length from 0 to 1000 bytes (all
// padding cases: one or two final blocks, lengths around 55, 56 and 64) and
// random inputs with crypto/sha256.
func TestAgainstCryptoSHA256(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 4096)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	check := func(b []byte) {
		if got, want := Sum256(b), stdsha256.Sum256(b); got != want {
			t.Fatalf("Sum256(%d bytes %x) = %x, crypto/sha256 %x", len(b), b, got, want)
		}
	}
	for n := 0; n <= 1000; n++ {
		check(buf[:n])
	}
	for i := 0; i < 20000; i++ {
		off := rng.IntN(len(buf))
		check(buf[off : off+rng.IntN(len(buf)-off+1)])
	}
	check(make([]byte, 1<<20))
}

// TestKnownAnswers are the examples of FIPS 180-4's companion document
// (SHA256.pdf): "abc" and the 448-bit message.
func TestKnownAnswers(t *testing.T) {
	for in, want := range map[string]string{
		"":    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		"abc": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
		"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq": "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
	} {
		sum := Sum256([]byte(in))
		if got := hex.EncodeToString(sum[:]); got != want {
			t.Errorf("Sum256(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestConstants derives k and h0 from their definition: the first 32 bits
// of the fractional parts of the cube (square) roots of the first primes.
func TestConstants(t *testing.T) {
	var primes []int64
	for n := int64(2); len(primes) < 64; n++ {
		prime := true
		for _, p := range primes {
			if n%p == 0 {
				prime = false
				break
			}
		}
		if prime {
			primes = append(primes, n)
		}
	}
	// frac32 is floor(root(p) * 2^32) mod 2^32, by integer root of p*2^(32*r).
	frac32 := func(p int64, r int) uint32 {
		x := new(big.Int).Lsh(big.NewInt(p), uint(32*r))
		lo, hi := big.NewInt(0), new(big.Int).Lsh(big.NewInt(1), uint(64))
		for new(big.Int).Sub(hi, lo).Cmp(big.NewInt(1)) > 0 {
			m := new(big.Int).Rsh(new(big.Int).Add(lo, hi), 1)
			if new(big.Int).Exp(m, big.NewInt(int64(r)), nil).Cmp(x) <= 0 {
				lo = m
			} else {
				hi = m
			}
		}
		return uint32(lo.Uint64())
	}
	for i, p := range primes {
		if got := frac32(p, 3); k[i] != got {
			t.Errorf("k[%d] = %#08x, cube root of %d gives %#08x", i, k[i], p, got)
		}
		if i < 8 {
			if got := frac32(p, 2); h0[i] != got {
				t.Errorf("h0[%d] = %#08x, square root of %d gives %#08x", i, h0[i], p, got)
			}
		}
	}
}

func BenchmarkSum256Key(b *testing.B) {
	key := []byte("\x00\x01client-ip:203.0.113.7|/api/v1/orders|GET")
	for b.Loop() {
		Sum256(key)
	}
}
