//go:build !wasip1

package engine

import "crypto/rand"

// ReadRandom fills b with random bytes (natively: crypto/rand).
func ReadRandom(b []byte) error {
	_, err := rand.Read(b)
	return err
}
