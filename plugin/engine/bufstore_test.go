package engine

import (
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/shared/limit"
)

// bufStore is a memStore that reads into the caller's buffer
// (BufferStore), as the plugin's shared data does in Envoy; it scribbles
// over the buffer first, so that a view kept from an earlier read shows.
type bufStore struct {
	*memStore
	intoBuf, plain int
}

func (s *bufStore) Get(key string) ([]byte, uint32, bool, error) {
	s.plain++
	return s.memStore.Get(key)
}

func (s *bufStore) GetInto(key string, buf []byte) ([]byte, uint32, bool, error) {
	for i := range buf {
		buf[i] = 0xA5
	}
	v, cas, found, err := s.memStore.Get(key)
	if !found || err != nil || len(v) > len(buf) {
		return v, cas, found, err
	}
	s.intoBuf++
	return buf[:copy(buf, v)], cas, true, nil
}

// TestTableReadsBucketsIntoItsBuffer: with a BufferStore every bucket read
// of Update goes into the table's own buffer, and clients interleaved on
// shared buckets still get exactly their own limit.
func TestTableReadsBucketsIntoItsBuffer(t *testing.T) {
	s := &bufStore{memStore: newMemStore()}
	tb := NewTable(s, []Region{{ID: 1, Share: 4*SlotsPerBucket + 1}}) // 4 buckets
	lim, err := limit.New(limit.TokenBucket, 3, time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	const clients = 20 // 5 a bucket on average: no overflow
	admitted := make([]int, clients)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for round := 0; round < 5; round++ {
		for c := 0; c < clients; c++ {
			fp := uint64(c)*0x9E3779B97F4A7C15 | 1
			d, kind, err := tb.Update(Charge, fp, 0, &lim, now, 1, 0)
			if err != nil || kind != SlotOwn {
				t.Fatalf("client %d: kind %d err %v", c, kind, err)
			}
			if d.Allowed {
				admitted[c]++
			}
		}
	}
	for c, n := range admitted {
		if n != 3 {
			t.Errorf("client %d: %d admitted, want 3", c, n)
		}
	}
	if s.plain != 0 || s.intoBuf == 0 {
		t.Errorf("bucket reads: %d into the table's buffer, %d plain", s.intoBuf, s.plain)
	}
}

// TestParseHostPortCopiesTheZone: the plugin hands SourceAddress a view of
// a buffer the next request's address overwrites; the client parsed from it
// keeps nothing of it.
func TestParseHostPortCopiesTheZone(t *testing.T) {
	buf := []byte("[fe80::1%eth0]:8080")
	a, ok := ParseHostPort(unsafe.String(&buf[0], len(buf)))
	if !ok || a.Zone() != "eth0" {
		t.Fatalf("parsed %v %v", a, ok)
	}
	copy(buf, "[fe80::1%xxxx]:8080")
	if a.Zone() != "eth0" {
		t.Errorf("zone %q after the buffer was reused, want eth0", a.Zone())
	}
}
