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
// time it wrote them, and adds to the gauges what its write changed
// (publish). A worker whose VM failed never retires: the first worker to
// publish after it has not written for workerStale takes its counts out,
// instead of leaving them in the gauges until Envoy restarts. A worker
// that ends (a configuration update drains it) takes its entry out at
// once (retire).

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
// owner's entry out), takes out the entries of workers that have not
// written for workerStale, and returns what the process-wide gauges must
// change by: mine less what owner's entry held, less the counts taken
// out. The gauges add these changes rather than being set to sums over
// the record: two filters with their own vm_id (records of their own, as
// shared data is namespaced by vm_id) publish into the same gauges, Envoy
// naming a metric without its vm_id, and a sum would overwrite the other
// filter's counts. A successful write owns the changes it returns (the
// CAS), so each worker's counts are added and taken out once. ok is
// false when shared data could not be read or written.
func (workerTable) publish(store engine.Store, owner uint64, now int64, mine workerCounts, remove bool) (delta workerCounts, ok bool) {
	for try := 0; try < workerCASTries; try++ {
		val, cas, err := readWorkers(store)
		if err != nil {
			return delta, false
		}
		delta = workerCounts{}
		free, dirty := -1, false
		for i := 0; i < workerEntries; i++ {
			// Owner's entry and those of workers gone are taken out; owner's
			// counts go into the first free entry.
			e := val[i*workerEntry : (i+1)*workerEntry]
			who := binary.LittleEndian.Uint64(e[0:8])
			if who == owner || who != 0 && now-int64(binary.LittleEndian.Uint64(e[8:16])) >= int64(workerStale) {
				for k := range delta {
					delta[k] -= int64(int32(binary.LittleEndian.Uint32(e[16+4*k:])))
				}
				binary.LittleEndian.PutUint64(e[0:8], 0) // free (its counts are ignored)
				who, dirty = 0, true
			}
			if free < 0 && who == 0 {
				free = i
			}
		}
		if !remove && free >= 0 {
			e := val[free*workerEntry : (free+1)*workerEntry]
			binary.LittleEndian.PutUint64(e[0:8], owner)
			binary.LittleEndian.PutUint64(e[8:16], uint64(now))
			for k, n := range mine {
				binary.LittleEndian.PutUint32(e[16+4*k:], uint32(int32(n)))
				delta[k] += int64(int32(n))
			}
			dirty = true
		}
		if !dirty {
			return delta, true // no room (this worker is not counted), nothing to take out
		}
		mismatch, err := store.Set(workersKey, val, cas)
		if err != nil {
			return workerCounts{}, false
		}
		if !mismatch {
			return delta, true
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
