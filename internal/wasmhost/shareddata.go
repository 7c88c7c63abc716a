package wasmhost

import (
	"sort"
	"sync"
)

// SharedData is the process-wide key-value store behind
// proxy_get_shared_data / proxy_set_shared_data, with the semantics of
// proxy-wasm-cpp-host (src/shared_data.cc, src/shared_data.h):
//
//   - Keys are namespaced by vm_id only: every VM (worker) with the same
//     vm_id sees the same keys.
//   - One mutex guards everything; a get copies the whole value.
//   - CAS values come from ONE counter shared by all keys and all vm_ids. It
//     starts at 1, is incremented on every successful set, and skips 0 when
//     it wraps around 2^32.
//   - get returns the value and the key's current CAS, or NotFound.
//   - set with cas == 0 is unconditional. A set on a missing key succeeds
//     whatever cas is passed (so two workers that both saw NotFound and then
//     create the key both succeed; the second overwrites the first). A set
//     on an existing key with cas != 0 fails with CasMismatch only when cas
//     differs from the key's current CAS.
//   - The ABI Envoy exposes has no delete: setting an empty value keeps the
//     key. (cpp-host does delete a vm_id's keys once no VM with that vm_id
//     is left; this store keeps them until it is garbage collected.)
//
// SharedData also holds the shared queues (cpp-host src/shared_queue.cc),
// which are process-wide in Envoy too.
//
// A SharedData is safe for concurrent use. All VMs of a Host share one; pass
// the same store to several Hosts with WithSharedData to model several
// plugins with the same vm_id in one Envoy.
type SharedData struct {
	mu      sync.Mutex
	data    map[string]map[string]*sharedEntry // vm_id -> key -> entry
	nextCAS uint32

	qmu        sync.Mutex
	queues     map[uint32]*sharedQueue
	queueNames map[queueKey]uint32
	nextQueue  uint32
}

type sharedEntry struct {
	value []byte
	cas   uint32
}

// SharedEntry is one key of a SharedData snapshot.
type SharedEntry struct {
	VMID  string
	Key   string
	Value []byte
	CAS   uint32
}

// NewSharedData returns an empty store whose CAS counter starts at 1.
func NewSharedData() *SharedData {
	return &SharedData{
		data:       map[string]map[string]*sharedEntry{},
		nextCAS:    1,
		queues:     map[uint32]*sharedQueue{},
		queueNames: map[queueKey]uint32{},
		nextQueue:  1,
	}
}

// casLocked returns the next CAS value and advances the counter, skipping 0.
func (s *SharedData) casLocked() uint32 {
	c := s.nextCAS
	s.nextCAS++
	if s.nextCAS == 0 {
		s.nextCAS++
	}
	return c
}

// Get returns a copy of the value of key in namespace vmID and its CAS.
func (s *SharedData) Get(vmID, key string) (value []byte, cas uint32, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.data[vmID][key]
	if !ok {
		return nil, 0, false
	}
	return append([]byte(nil), e.value...), e.cas, true
}

// getInto is Get for the host call: it copies the value into buf (reusing
// its capacity) under the lock, as cpp-host copies it into a std::string,
// and the caller copies it into guest memory after the lock is released.
func (s *SharedData) getInto(vmID, key string, buf []byte) ([]byte, uint32, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.data[vmID][key]
	if !ok {
		return buf, 0, false
	}
	return append(buf[:0], e.value...), e.cas, true
}

// Set stores a copy of value under key in namespace vmID with the CAS rules
// described on SharedData. It returns StatusOK or StatusCasMismatch.
func (s *SharedData) Set(vmID, key string, value []byte, cas uint32) Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.data[vmID]
	if !ok {
		m = map[string]*sharedEntry{}
		s.data[vmID] = m
	}
	if e, ok := m[key]; ok {
		if cas != 0 && cas != e.cas {
			return StatusCasMismatch
		}
		e.value = append(e.value[:0:0], value...)
		e.cas = s.casLocked()
		return StatusOK
	}
	m[key] = &sharedEntry{value: append([]byte(nil), value...), cas: s.casLocked()}
	return StatusOK
}

// NextCAS returns the CAS value the next successful set will receive.
func (s *SharedData) NextCAS() uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nextCAS
}

// SetNextCAS sets the CAS counter, e.g. to 0xFFFFFFFF to test wrap-around.
// Setting 0 is the same as setting 1 (0 is never a valid CAS).
func (s *SharedData) SetNextCAS(next uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if next == 0 {
		next = 1
	}
	s.nextCAS = next
}

// Len returns the number of keys, over all vm_ids.
func (s *SharedData) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.data {
		n += len(m)
	}
	return n
}

// Bytes returns the total size of all keys and values, over all vm_ids
// (the payload Envoy keeps in memory, without its per-entry overhead).
func (s *SharedData) Bytes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.data {
		for k, e := range m {
			n += len(k) + len(e.value)
		}
	}
	return n
}

// Snapshot returns a copy of every entry, sorted by vm_id then key.
func (s *SharedData) Snapshot() []SharedEntry {
	s.mu.Lock()
	out := make([]SharedEntry, 0, 16)
	for vmID, m := range s.data {
		for k, e := range m {
			out = append(out, SharedEntry{VMID: vmID, Key: k, Value: append([]byte(nil), e.value...), CAS: e.cas})
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].VMID != out[j].VMID {
			return out[i].VMID < out[j].VMID
		}
		return out[i].Key < out[j].Key
	})
	return out
}

// Shared queues.

type queueKey struct{ vmID, name string }

type sharedQueue struct {
	items [][]byte
	// The registering VM and its root context receive proxy_on_queue_ready.
	vm        *VM
	contextID uint32
}

// registerQueue registers (or re-registers) a queue for vm's root context
// and returns its token, as cpp-host SharedQueue::registerQueue does.
func (s *SharedData) registerQueue(vmID, name string, vm *VM, contextID uint32) uint32 {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	k := queueKey{vmID, name}
	if tok, ok := s.queueNames[k]; ok {
		q := s.queues[tok]
		q.vm, q.contextID = vm, contextID
		return tok
	}
	tok := s.nextQueue
	s.nextQueue++
	if s.nextQueue == 0 {
		s.nextQueue++
	}
	s.queueNames[k] = tok
	s.queues[tok] = &sharedQueue{vm: vm, contextID: contextID}
	return tok
}

func (s *SharedData) resolveQueue(vmID, name string) (uint32, bool) {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	tok, ok := s.queueNames[queueKey{vmID, name}]
	return tok, ok
}

func (s *SharedData) enqueue(token uint32, value []byte) Status {
	s.qmu.Lock()
	q, ok := s.queues[token]
	if !ok {
		s.qmu.Unlock()
		return StatusNotFound
	}
	q.items = append(q.items, append([]byte(nil), value...))
	vm, ctxID := q.vm, q.contextID
	s.qmu.Unlock()
	if vm != nil {
		vm.postQueueReady(ctxID, token)
	}
	return StatusOK
}

func (s *SharedData) dequeue(token uint32) ([]byte, Status) {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	q, ok := s.queues[token]
	if !ok {
		return nil, StatusNotFound
	}
	if len(q.items) == 0 {
		return nil, StatusEmpty
	}
	v := q.items[0]
	q.items[0] = nil
	q.items = q.items[1:]
	return v, StatusOK
}
