package engine

import "sync"

// memStore is a Store with Envoy's shared-data semantics (proxy-wasm-cpp-host):
// one process-global CAS counter, cas 0 unconditional, a set on a missing
// key succeeds whatever cas is passed, get copies.
type memStore struct {
	mu      sync.Mutex
	nextCAS uint32
	m       map[string]memEntry
	// beforeSet, if set, runs (unlocked) before every Set: tests use it to
	// inject a concurrent writer between a get and a set.
	beforeSet func(key string)
	// writes is the count of layout record writes (LayoutSignal), as the
	// plugin keeps it in an Envoy counter; noSignal: the count cannot be
	// read (tables read the record before every fresh state).
	writes   uint64
	noSignal bool
}

func (s *memStore) LayoutWrites() (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes, !s.noSignal
}

func (s *memStore) LayoutWritten() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
}

type memEntry struct {
	val []byte
	cas uint32
}

func newMemStore() *memStore { return &memStore{m: map[string]memEntry{}, nextCAS: 1} }

func (s *memStore) Get(key string) ([]byte, uint32, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[key]
	if !ok {
		return nil, 0, false, nil
	}
	return append([]byte(nil), e.val...), e.cas, true, nil
}

func (s *memStore) Set(key string, val []byte, cas uint32) (bool, error) {
	if h := s.beforeSet; h != nil {
		h(key)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[key]
	if ok && cas != 0 && cas != e.cas {
		return true, nil
	}
	c := s.nextCAS
	s.nextCAS++
	if s.nextCAS == 0 {
		s.nextCAS = 1
	}
	s.m[string([]byte(key))] = memEntry{val: append([]byte(nil), val...), cas: c}
	return false, nil
}

func (s *memStore) keys() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

func (s *memStore) bytes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, e := range s.m {
		n += len(k) + len(e.val)
	}
	return n
}
