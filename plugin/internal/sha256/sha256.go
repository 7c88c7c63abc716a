// Package sha256 is SHA-256 (FIPS 180-4, section 6.2) for the plugin.
//
// Why not crypto/sha256: importing it links Go's FIPS 140 module (AES,
// GCM, DRBG, SHA-3, SHA-512, HMAC and their self-tests) into the plugin,
// several hundred kilobytes of code that Envoy's V8 keeps resident in every
// worker. The plugin hashes only a few bytes per global-rule call (the
// client key at the rate-limit service), so a plain implementation is
// enough; TestAgainstCryptoSHA256 holds it to crypto/sha256 byte for byte,
// so every Envoy of a fleet, old or new, computes the same keys.
package sha256

import "encoding/binary"

// Size is the length of a digest in bytes.
const Size = 32

// blockSize is the length of a message block in bytes (512 bits).
const blockSize = 64

// k are the 64 round constants: the first 32 bits of the fractional parts
// of the cube roots of the first 64 primes (FIPS 180-4, 4.2.2;
// TestConstants derives them).
var k = [64]uint32{
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
}

// h0 is the initial hash value: the first 32 bits of the fractional parts
// of the square roots of the first 8 primes (FIPS 180-4, 5.3.3).
var h0 = [8]uint32{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19}

// Sum256 returns the SHA-256 digest of data.
func Sum256(data []byte) [Size]byte {
	h := h0
	n := len(data)
	for len(data) >= blockSize {
		block(&h, data[:blockSize])
		data = data[blockSize:]
	}
	// Padding (5.1.1): a 1 bit, zeros up to 56 bytes mod 64, then the
	// message length in bits as a 64-bit big-endian number; one or two
	// final blocks.
	var tail [2 * blockSize]byte
	r := copy(tail[:], data)
	tail[r] = 0x80
	end := blockSize
	if r >= blockSize-8 {
		end = 2 * blockSize
	}
	binary.BigEndian.PutUint64(tail[end-8:end], uint64(n)<<3)
	for i := 0; i < end; i += blockSize {
		block(&h, tail[i:i+blockSize])
	}
	var out [Size]byte
	for i, v := range h {
		binary.BigEndian.PutUint32(out[4*i:], v)
	}
	return out
}

func rotr(x uint32, n uint) uint32 { return x>>n | x<<(32-n) }

// block runs the compression function on one 64-byte block (6.2.2).
func block(h *[8]uint32, p []byte) {
	var w [64]uint32
	for t := 0; t < 16; t++ {
		w[t] = binary.BigEndian.Uint32(p[4*t:])
	}
	for t := 16; t < 64; t++ {
		s0 := rotr(w[t-15], 7) ^ rotr(w[t-15], 18) ^ w[t-15]>>3
		s1 := rotr(w[t-2], 17) ^ rotr(w[t-2], 19) ^ w[t-2]>>10
		w[t] = s1 + w[t-7] + s0 + w[t-16]
	}
	a, b, c, d, e, f, g, hh := h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]
	for t := 0; t < 64; t++ {
		S1 := rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)
		ch := e&f ^ ^e&g
		t1 := hh + S1 + ch + k[t] + w[t]
		S0 := rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)
		maj := a&b ^ a&c ^ b&c
		t2 := S0 + maj
		hh, g, f, e, d, c, b, a = g, f, e, d+t1, c, b, a, t1+t2
	}
	h[0] += a
	h[1] += b
	h[2] += c
	h[3] += d
	h[4] += e
	h[5] += f
	h[6] += g
	h[7] += hh
}
