package main

import (
	"time"

	"github.com/sluicehq/sluice/plugin/config"
	"github.com/sluicehq/sluice/plugin/engine"
	"github.com/sluicehq/sluice/sdk/header"
)

// The parts of a worker's plugin context, each a small type that owns its
// state: pluginContext calls their methods and never reads their fields.

// ticker is the worker's tick: its period and when the counters were last
// published.
type ticker struct {
	_         [0]func() // not comparable: no equality function in the module
	ms        uint32
	lastFlush int64
}

func newTicker(ms uint32) ticker { return ticker{ms: ms} }

// periodMS is the tick's period in milliseconds.
func (t *ticker) periodMS() uint32 { return t.ms }

// period is the tick's period.
func (t *ticker) period() time.Duration { return time.Duration(t.ms) * time.Millisecond }

// flushDue reports whether the counters are to be published at now (about
// once a second), and if so counts them published.
func (t *ticker) flushDue(now int64) bool {
	if now-t.lastFlush < int64(time.Second) {
		return false
	}
	t.lastFlush = now
	return true
}

// logLimits keeps a worker's log lines about requests to one a second:
// a log call per rejected request would cost a host call and an allocation
// each, under exactly the floods a rate limiter exists for.
type logLimits struct {
	lastReject   int64
	rejectsSince int
	lastCallErr  int64
}

// rejection counts a rejection at now; a line is due (due) when report
// and the last one is a second old, with the rejections since it (n).
func (l *logLimits) rejection(now int64, report bool) (n int, due bool) {
	l.rejectsSince++
	if !report || now-l.lastReject < int64(time.Second) {
		return 0, false
	}
	n = l.rejectsSince
	l.lastReject, l.rejectsSince = now, 0
	return n, true
}

// callError reports whether a failed call at now is to be logged.
func (l *logLimits) callError(now int64) bool {
	if now-l.lastCallErr < int64(time.Second) {
		return false
	}
	l.lastCallErr = now
	return true
}

// censusWorker advances the census of tracked client states on the worker
// that holds the census lease (owner is this worker's identity for it).
type censusWorker struct {
	census engine.Census
	owner  uint64
}

func newCensusWorker(owner uint64) censusWorker { return censusWorker{owner: owner} }

// id is this worker's identity (also in the record of workers' gauge
// counts, gauges.go).
func (c *censusWorker) id() uint64 { return c.owner }

// step counts a fifth of t's keys at now when this worker holds the lease;
// done says a complete census is ready (n states, counts).
func (c *censusWorker) step(t *engine.Table, now int64) (n int, counts *engine.Census, done bool) {
	if !engine.AcquireLease(&sharedData{}, c.owner, now, censusLease) {
		return 0, nil, false
	}
	n, err := c.census.Step(t, now, (t.Keys()+4)/5)
	if err != nil || !c.census.Complete() {
		return 0, nil, false
	}
	return n, &c.census, true
}

// waitingStreams are the streams of this worker waiting in a concurrency
// rule's queue, by context id, and Poll's scratch (nil without concurrency
// rules).
type waitingStreams struct {
	on     bool
	byID   map[uint32]*httpContext
	events []engine.ConcEvent
}

// enable readies the queue (the configuration has concurrency rules).
func (w *waitingStreams) enable() {
	w.on = true
	w.byID = map[uint32]*httpContext{}
}

// enabled reports whether the configuration has concurrency rules.
func (w *waitingStreams) enabled() bool { return w.on }

// add records h as waiting.
func (w *waitingStreams) add(h *httpContext) {
	w.byID[h.id] = h
	h.shared = true // never reused: the queue refers to it
}

// take returns the waiting stream id (nil: not ours any more) and forgets it.
func (w *waitingStreams) take(id uint32) *httpContext {
	h := w.byID[id]
	if h != nil {
		delete(w.byID, id)
	}
	return h
}

// drop forgets stream id.
func (w *waitingStreams) drop(id uint32) { delete(w.byID, id) }

// any reports whether a stream waits.
func (w *waitingStreams) any() bool { return len(w.byID) > 0 }

// poll lets e advance its queues at now: the decisions on waiting streams,
// in a buffer the next poll reuses.
func (w *waitingStreams) poll(e *engine.Engine, now int64) []engine.ConcEvent {
	w.events = e.Poll(now, w.events[:0])
	return w.events
}

// problemBody builds a rejection's body and headers in buffers the next
// rejection reuses (the host copies them). Both depend only on the rules
// that refused and the whole seconds they say (rejectKey), which most
// rejections of a flood share with the one before: the last ones are kept
// and sent again while those are the same (why.go).
type problemBody struct {
	body    []byte
	names   []string // the rules body names (scratch)
	hdrs    engine.HeaderSet
	encoded []byte
	// key is what body, hdrs and encoded say; built: they are set and
	// hdrs has no gRPC pushback (whose milliseconds change with every
	// request).
	key   rejectKey
	built bool
}

// build builds the problem+json body of v's rejection under cfg.
func (b *problemBody) build(cfg *config.Config, v *engine.Verdict) {
	b.names = v.ViolatedNames(cfg, b.names[:0])
	b.body = header.AppendProblem(b.body[:0], int(cfg.Status), b.names, v.RetryAfter)
}

// limitHeaders is an admitted response's headers (built by
// OnHttpResponseHeaders) in a set the next response reuses. They depend
// only on a part of what a rejection's depend on (admitKeyOf: the rules
// they name, the limit, the remaining quota and the whole seconds), which
// most responses share with the one before (every new client of a rule
// gets the same numbers): the last set is sent again while those are the
// same.
type limitHeaders struct {
	set   engine.HeaderSet
	key   rejectKey
	built bool
}

// headerPairs is the request header map of the decision under way
// (HeaderFields), read at most once per request, when a rule keys on a
// header.
type headerPairs struct {
	b    []byte
	read bool
}

// reset forgets the map: the next request reads its own.
func (m *headerPairs) reset() { m.read = false }

// fields returns the first value of header name and how many fields of
// that name the request has (headerFields), reading the map once.
func (m *headerPairs) fields(name string) (string, int) {
	if !m.read {
		m.b, m.read = getRequestHeaderPairs(), true
	}
	return headerFields(m.b, name)
}

// redirects follows Envoy's internal redirects: the stream that just ended
// was redirected by Envoy itself (next), and the next request this worker
// decides is that redirect; carried are the ended request's global charges
// after the response, settled on the redirect's response.
type redirects struct {
	next    bool
	carried engine.Carried
}

// set records that the stream that just ended was redirected, with what
// it carries.
func (r *redirects) set(c engine.Carried) { *r = redirects{next: true, carried: c} }

// pending reports whether set recorded a redirect that no decision took
// or reset since.
func (r *redirects) pending() bool { return r.next }

// reset forgets what set recorded (the stream that just ended was not
// redirected, or the decision under way is not the redirect): only the
// decision right after the redirected stream's end may take it. Nothing
// is written when nothing is recorded (the carried charges are 160 bytes).
func (r *redirects) reset() {
	if r.next {
		*r = redirects{}
	}
}

// take returns and forgets what set recorded (pending).
func (r *redirects) take() engine.Carried {
	c := r.carried
	*r = redirects{}
	return c
}
