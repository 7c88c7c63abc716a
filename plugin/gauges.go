package main

import (
	"encoding/binary"
	"time"

	"github.com/sluicehq/sluice/plugin/engine"
)

// The process-wide gauges of what workers hold (concurrency slots held,
// requests waiting in queues, requests held for throttling, workers whose
// circuit is open) are sums over the workers of the Envoy. Each worker
// keeps its own counts in one shared-data record (workersKey) with the
// time it wrote them, and sets the gauges to the sums over the workers
// that wrote within workerStale. A worker whose VM failed never retires:
// it drops out of the sums then, instead of leaving its last counts in
// the gauges until Envoy restarts. A worker that ends (a configuration
// update drains it) takes its entry out at once (retire).

const (
	workersKey = "sluice.v1.workers"
	// workerEntries bounds the workers counted (of every configuration
	// of the vm_id live at once); one more is left out of the sums.
	workerEntries = 128
	// workerEntry: owner, written at (ns), then the four counts (int32).
	workerEntry = 32
	// workerStale: a worker writes its entry at every flush (about once
	// a second, whatever its traffic: the tick flushes); one that has
	// not written for this long is gone.
	workerStale = 10 * time.Second
	// workerCASTries bounds the CAS loop of one publication.
	workerCASTries = 8
)

// workerCounts are a worker's slots held, waiting, held requests and
// circuits open (0 or 1).
type workerCounts [4]int64

// workerTable publishes a worker's counts.
type workerTable struct{}

// workersBuf holds the record while a worker publishes, so that a
// publication makes no garbage: one for the VM (its plugin contexts run
// on one thread, one at a time), in its static memory rather than in each
// context's heap.
var workersBuf [workerEntries * workerEntry]byte

// publish writes mine as owner's counts at now (with remove, takes
// owner's entry out) and returns the sums over the workers live at now.
// ok is false when shared data could not be read or written.
func (workerTable) publish(store engine.Store, owner uint64, now int64, mine workerCounts, remove bool) (sum workerCounts, ok bool) {
	for try := 0; try < workerCASTries; try++ {
		val, cas, err := readWorkers(store)
		if err != nil {
			return sum, false
		}
		sum = workerCounts{}
		free, own := -1, -1
		for i := 0; i < workerEntries; i++ {
			e := val[i*workerEntry : (i+1)*workerEntry]
			who, at := binary.LittleEndian.Uint64(e[0:8]), int64(binary.LittleEndian.Uint64(e[8:16]))
			switch {
			case who == owner:
				own = i
			case who == 0 || now-at >= int64(workerStale):
				if free < 0 {
					free = i
				}
			default:
				for k := range sum {
					sum[k] += int64(int32(binary.LittleEndian.Uint32(e[16+4*k:])))
				}
			}
		}
		i := own
		if i < 0 {
			i = free
		}
		if i < 0 || (remove && own < 0) {
			return sum, true // no room (or nothing to take out): not written
		}
		e := val[i*workerEntry : (i+1)*workerEntry]
		clear(e)
		if !remove {
			binary.LittleEndian.PutUint64(e[0:8], owner)
			binary.LittleEndian.PutUint64(e[8:16], uint64(now))
			for k, n := range mine {
				binary.LittleEndian.PutUint32(e[16+4*k:], uint32(int32(n)))
				sum[k] += n
			}
		}
		mismatch, err := store.Set(workersKey, val, cas)
		if err != nil {
			return sum, false
		}
		if !mismatch {
			return sum, true
		}
	}
	return workerCounts{}, false
}

// readWorkers reads the record into workersBuf (a missing one reads as
// empty, to be created; one of another size as empty, to replace it).
func readWorkers(store engine.Store) ([]byte, uint32, error) {
	var (
		val   []byte
		cas   uint32
		found bool
		err   error
	)
	if bs, ok := store.(engine.BufferStore); ok {
		val, cas, found, err = bs.GetInto(workersKey, workersBuf[:])
	} else {
		val, cas, found, err = store.Get(workersKey)
	}
	if err != nil {
		return nil, 0, err
	}
	switch {
	case !found:
		// Created with a CAS no existing key carries: if another worker
		// creates it first, this write fails and reads it again.
		val, cas = workersBuf[:], ^uint32(0)
		clear(val)
	case len(val) != len(workersBuf):
		val = workersBuf[:] // another build's record: replaced
		clear(val)
	}
	return val, cas, nil
}
