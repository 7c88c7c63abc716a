package wasmhost

import (
	"sort"
	"strings"
	"sync"
)

// Metrics is the stats store shared by all VMs of a Host, like Envoy's
// process-wide stats: proxy_define_metric on several VMs with the same name
// and type returns per-VM metric ids that all point at one stat. Values are
// uint64 as in Envoy (gauges wrap below zero; the SDK reads them as int64).
//
// Envoy shows these stats as "wasmcustom.<name>" in /stats; the accessors
// here accept the name with or without that prefix.
//
// Semantics (Envoy source/extensions/common/wasm/context.cc):
//   - increment on a counter: offset must be > 0, else BadArgument.
//   - increment on a gauge: adds a positive offset, subtracts a negative one.
//   - increment on a histogram, get on a histogram: BadArgument.
//   - record on a counter adds, on a gauge sets, on a histogram records.
//
// Metrics is safe for concurrent use.
type Metrics struct {
	mu       sync.Mutex
	stats    map[metricKey]*stat
	rejected map[string]bool
}

type metricKey struct {
	name string
	typ  MetricType
}

type stat struct {
	name    string
	typ     MetricType
	value   uint64
	samples []uint64
	null    bool // a rejected name's stat (Reject)
}

// Metric is a snapshot of one stat.
type Metric struct {
	Name  string
	Type  MetricType
	Value uint64
	// Samples are the values recorded into a histogram, in order.
	Samples []uint64
}

// NewMetrics returns an empty stats store.
func NewMetrics() *Metrics { return &Metrics{stats: map[metricKey]*stat{}} }

const wasmCustomPrefix = "wasmcustom."

// Reject makes the stats called names (with or without the "wasmcustom."
// prefix) rejected, as an Envoy stats_config.stats_matcher rejects them:
// defining one succeeds and hands out a null stat, which is never listed,
// ignores increments and records, and reads 0 (Envoy's ThreadLocalStore
// returns its null counter, gauge or histogram for a rejected name). Call
// it before the VMs define the names.
func (m *Metrics) Reject(names ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rejected == nil {
		m.rejected = map[string]bool{}
	}
	for _, n := range names {
		m.rejected[strings.TrimPrefix(n, wasmCustomPrefix)] = true
	}
}

func (m *Metrics) define(typ MetricType, name string) *stat {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rejected[name] {
		return &stat{name: name, typ: typ, null: true}
	}
	k := metricKey{name, typ}
	s, ok := m.stats[k]
	if !ok {
		s = &stat{name: name, typ: typ}
		m.stats[k] = s
	}
	return s
}

func (m *Metrics) increment(s *stat, offset int64) Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch s.typ {
	case MetricCounter:
		if offset <= 0 {
			return StatusBadArgument
		}
		if !s.null {
			s.value += uint64(offset)
		}
	case MetricGauge:
		if s.null {
			break
		}
		if offset > 0 {
			s.value += uint64(offset)
		} else {
			s.value -= uint64(-offset)
		}
	default:
		return StatusBadArgument
	}
	return StatusOK
}

func (m *Metrics) record(s *stat, v uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s.null {
		return
	}
	switch s.typ {
	case MetricCounter:
		s.value += v
	case MetricGauge:
		s.value = v
	case MetricHistogram:
		s.samples = append(s.samples, v)
	}
}

func (m *Metrics) value(s *stat) (uint64, Status) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s.typ == MetricHistogram {
		return 0, StatusBadArgument
	}
	return s.value, StatusOK
}

func (s *stat) snapshot() Metric {
	return Metric{Name: s.name, Type: s.typ, Value: s.value, Samples: append([]uint64(nil), s.samples...)}
}

// Get returns the stat called name (a counter, else a gauge, else a
// histogram of that name).
func (m *Metrics) Get(name string) (Metric, bool) {
	name = strings.TrimPrefix(name, wasmCustomPrefix)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range []MetricType{MetricCounter, MetricGauge, MetricHistogram} {
		if s, ok := m.stats[metricKey{name, t}]; ok {
			return s.snapshot(), true
		}
	}
	return Metric{}, false
}

// Counter returns the value of the counter called name (0 if undefined).
func (m *Metrics) Counter(name string) uint64 { return m.typed(name, MetricCounter) }

// Gauge returns the value of the gauge called name (0 if undefined).
func (m *Metrics) Gauge(name string) uint64 { return m.typed(name, MetricGauge) }

// Histogram returns the values recorded into the histogram called name.
func (m *Metrics) Histogram(name string) []uint64 {
	name = strings.TrimPrefix(name, wasmCustomPrefix)
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.stats[metricKey{name, MetricHistogram}]; ok {
		return append([]uint64(nil), s.samples...)
	}
	return nil
}

func (m *Metrics) typed(name string, t MetricType) uint64 {
	name = strings.TrimPrefix(name, wasmCustomPrefix)
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.stats[metricKey{name, t}]; ok {
		return s.value
	}
	return 0
}

// Snapshot returns every stat, sorted by name then type.
func (m *Metrics) Snapshot() []Metric {
	m.mu.Lock()
	out := make([]Metric, 0, len(m.stats))
	for _, s := range m.stats {
		out = append(out, s.snapshot())
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Type < out[j].Type
	})
	return out
}

// Reset sets every stat back to zero (keeping the definitions, so metric ids
// held by running VMs stay valid).
func (m *Metrics) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.stats {
		s.value = 0
		s.samples = nil
	}
}
