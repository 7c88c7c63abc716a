package wasmhost

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// StreamState is where an HTTP stream stands.
type StreamState int

const (
	// StreamOpen: the context exists, no request headers yet.
	StreamOpen StreamState = iota
	// StreamPaused: the plugin holds the request (it returned Pause from
	// proxy_on_request_headers or proxy_on_request_body and has not resumed
	// it). Envoy keeps the request waiting; the plugin may resume it or
	// answer it later, e.g. from proxy_on_tick.
	StreamPaused
	// StreamUpstream: the request went upstream; its response is awaited
	// (Stream.SendResponse / Stream.Finish).
	StreamUpstream
	// StreamResponsePaused: the plugin holds the response.
	StreamResponsePaused
	// StreamResponded: the client got its response (upstream or local);
	// on_log, on_done and on_delete run at the end of the operation.
	StreamResponded
	// StreamReset: the plugin reset the stream (proxy_close_stream).
	StreamReset
	// StreamClosed: on_log, on_done and on_delete ran; the context is gone.
	StreamClosed
)

func (s StreamState) String() string {
	switch s {
	case StreamOpen:
		return "open"
	case StreamPaused:
		return "paused"
	case StreamUpstream:
		return "upstream"
	case StreamResponsePaused:
		return "response-paused"
	case StreamResponded:
		return "responded"
	case StreamReset:
		return "reset"
	case StreamClosed:
		return "closed"
	}
	return fmt.Sprintf("StreamState(%d)", int(s))
}

// Stream is one HTTP stream (one HTTP context of the plugin) on a VM. Drive
// it step by step with SendRequestHeaders, SendRequestBody, SendResponse and
// Close, or let VM.Request do it all. All methods lock the VM.
type Stream struct {
	vm       *VM
	id       uint32
	root     uint32 // the root context it was created under
	state    StreamState
	props    map[string]string
	setProps map[string]string

	reqHeaders    *headerMap
	reqLive       bool // Envoy's request_headers_ is set: readable and writable
	reqBody       []byte
	reqBodyLive   bool
	pausedAtBody  bool
	headersOnly   bool // the request headers stopped alone (stopsHeadersOnly): the body goes on to the plugin
	pendingBody   []byte
	hasPending    bool
	pendingPassed bool // pendingBody went through the plugin already (bodyAtStoppedHeaders)
	// Trailers (stream_trailers.go): the request's, readable and writable
	// while live (their callback, or held at them); trailersPending: they
	// arrived while the request was held at its headers (or VM.Request
	// queued them) and reach the plugin when it goes on.
	reqTrailers      *headerMap
	reqTrailersLive  bool
	trailersPending  bool
	pausedAtTrailers bool
	upstreamTrailers Headers
	respTrailers     *headerMap
	respTrailersLive bool
	respAtTrailers   bool
	finalTrailers    Headers
	respHeaders      *headerMap
	respLive         bool
	respBody         []byte
	respBodyLive     bool
	respAtBody       bool
	inLog            bool
	localSent        bool
	local            *LocalResponse
	pendingResp      *Response
	keepOpen         bool // see Response.KeepOpen
	details          string
	forwarded        bool
	upstreamReq      Headers
	upstreamBody     []byte
	responded        bool
	finalStatus      int
	finalHeaders     Headers
	finalBody        []byte
	action           Action
	rawAction        uint32
	respAction       Action
	respRawAction    uint32
	reqOps           []HeaderOp
	respOps          []HeaderOp
	warnings         []string
	err              error
	endQueued        bool
	ended            bool
	resetByPlugin    bool
}

// NewStream creates an HTTP context (proxy_on_context_create(id, root))
// with the given stream properties.
func (vm *VM) NewStream(props Properties) (*Stream, error) {
	var s *Stream
	err := vm.op(func() error {
		var err error
		s, err = vm.newStream(props)
		return err
	})
	return s, err
}

func (vm *VM) newStream(props Properties) (*Stream, error) {
	if vm.failed != nil {
		// Envoy still creates the filter; the plugin is just not called.
		s := &Stream{vm: vm, id: vm.allocContextID(), props: normalizeProperties(props)}
		vm.streams[s.id] = s
		return s, nil
	}
	s := &Stream{vm: vm, id: vm.allocContextID(), root: vm.rootID, props: normalizeProperties(props)}
	vm.streams[s.id] = s
	if err := vm.invoke(s.id, "proxy_on_context_create", vm.fn.onContextCreate, nil, uint64(s.id), uint64(vm.rootID)); err != nil {
		s.err = err
		return s, err
	}
	return s, nil
}

// ID returns the stream's context id.
func (s *Stream) ID() uint32 { return s.id }

// State returns the stream's state.
func (s *Stream) State() StreamState {
	s.vm.mu.Lock()
	defer s.vm.mu.Unlock()
	return s.state
}

// LocalResponse returns the plugin's local response, or nil.
func (s *Stream) LocalResponse() *LocalResponse {
	s.vm.mu.Lock()
	defer s.vm.mu.Unlock()
	return s.local
}

func boolArg(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// headerAction converts a proxy_on_*_headers result the way cpp-host does
// (convertVmCallResultToFilterHeadersStatus): 0 Continue, 2
// ContinueAndEndStream; anything else, or a local response sent during the
// call, stops iteration.
func headerAction(ret uint64, stopped bool) Action {
	if stopped {
		return Pause
	}
	switch uint32(ret) {
	case 0, 2:
		return Continue
	}
	return Pause
}

// stopsHeadersOnly reports whether a header callback's result stops the
// headers alone, Envoy's StopIteration: only where the plugin's
// configuration sets allow_on_headers_stop_iteration
// (WithAllowOnHeadersStopIteration), for the plugin's own 1 (cpp-host
// turns it into StopAllIterationAndWatermark otherwise, as it does a local
// response sent during the call). Envoy then goes on delivering the body
// to the plugin, and a Continue from the body callback, or no body
// callback at all, continues the headers too.
func (vm *VM) stopsHeadersOnly(ret uint64, stopped bool) bool {
	return vm.h.cfg.stopIter && !stopped && ret == 1
}

// dataAction converts a proxy_on_*_body result: 0 Continue, else stop.
func dataAction(ret uint64, stopped bool) Action {
	if stopped || uint32(ret) != 0 {
		return Pause
	}
	return Continue
}

func (s *Stream) warn(format string, args ...any) {
	msg := fmt.Sprintf("stream %d: ", s.id) + fmt.Sprintf(format, args...)
	s.warnings = append(s.warnings, msg)
	s.vm.warnings = append(s.vm.warnings, msg)
	s.vm.logHost(LogWarn, msg)
}

// SendRequestHeaders delivers the request headers: proxy_on_request_headers
// (id, number of headers, endOfStream). It returns the verdict Envoy applies.
// A local response sent during the call is processed right after it, as in
// Envoy: it goes through this plugin's proxy_on_response_headers (and
// proxy_on_response_body), and the stream then ends. If the headers
// continue and a body was queued (VM.Request), proxy_on_request_body runs.
func (s *Stream) SendRequestHeaders(h Headers, endOfStream bool) (Action, error) {
	var act Action
	err := s.vm.op(func() error {
		var err error
		act, err = s.requestHeaders(h, endOfStream)
		if err == nil && s.state == StreamUpstream && s.hasPending {
			err = s.deliverPendingBody()
		}
		return err
	})
	return act, err
}

func (s *Stream) requestHeaders(h Headers, eos bool) (Action, error) {
	if s.state != StreamOpen || s.reqHeaders != nil {
		return Pause, fmt.Errorf("wasmhost: stream %d: request headers already sent (state %s)", s.id, s.state)
	}
	vm := s.vm
	s.reqHeaders = newHeaderMap(h)
	s.reqLive = true
	s.state = StreamPaused
	if vm.failed != nil {
		return s.failRequest(), nil
	}
	act := Continue
	if vm.fn.onRequestHeaders != nil {
		err := vm.invoke(s.id, "proxy_on_request_headers", vm.fn.onRequestHeaders, func(ret uint64, stopped bool) {
			s.rawAction = uint32(ret)
			act = headerAction(ret, stopped)
			s.headersOnly = vm.stopsHeadersOnly(ret, stopped)
		}, uint64(s.id), uint64(len(s.reqHeaders.kv)), boolArg(eos))
		if err != nil {
			s.err = err
			return s.failRequest(), err
		}
	}
	s.action = act
	if act == Continue && s.state == StreamPaused && !s.responded {
		s.forward()
	}
	if s.headersOnly && s.hasPending && s.state == StreamPaused && !s.responded {
		// The body VM.Request queued reaches the plugin now.
		body := s.pendingBody
		s.pendingBody, s.hasPending = nil, false
		_, err := s.bodyAtStoppedHeaders(body, !s.trailersPending)
		return act, err
	}
	return act, nil
}

// failRequest applies the failure policy to a request on a crashed VM
// (Envoy CHECK_FAIL_HTTP / Context::failStream).
func (s *Stream) failRequest() Action {
	if s.vm.h.cfg.failOpen {
		s.action = Continue
		s.forward()
		return Continue
	}
	s.action = Pause
	s.hostReply()
	return Pause
}

// hostReply sends the fail-closed 503 without calling the plugin.
func (s *Stream) hostReply() {
	lr := &LocalResponse{Status: 503, Details: "wasm_fail_stream", GrpcStatus: 14, FromHost: true}
	if s.local == nil {
		s.local = lr
	}
	s.details = lr.Details
	s.complete(lr.Status, lr.responseHeaders(), nil)
}

// forward sends the request upstream: Envoy clears request_headers_ when
// decodeHeaders returns Continue, so the request map is no longer writable.
func (s *Stream) forward() {
	s.reqLive = false
	s.forwarded = true
	s.upstreamReq = s.reqHeaders.kv.Clone()
	s.state = StreamUpstream
}

// SendRequestBody delivers (part of) the request body. If the request is
// paused at its headers, Envoy buffers the data: it is delivered when the
// plugin resumes the request. Otherwise proxy_on_request_body runs.
func (s *Stream) SendRequestBody(body []byte, endOfStream bool) (Action, error) {
	return s.vm.opAction(func() (Action, error) { return s.requestBody(body, endOfStream) })
}

func (s *Stream) requestBody(body []byte, eos bool) (Action, error) {
	switch {
	case s.state == StreamPaused && !s.pausedAtBody && s.headersOnly && s.vm.failed == nil:
		return s.bodyAtStoppedHeaders(body, eos)
	case s.state == StreamPaused && !s.pausedAtBody:
		s.pendingBody = append(s.pendingBody, body...)
		s.hasPending = true
		return Pause, nil
	case s.state != StreamUpstream:
		return Pause, fmt.Errorf("wasmhost: stream %d: cannot send a request body in state %s", s.id, s.state)
	}
	vm := s.vm
	s.reqBody = append([]byte(nil), body...)
	if vm.failed != nil {
		if vm.h.cfg.failOpen {
			s.upstreamBody = append(s.upstreamBody, s.reqBody...)
			return Continue, nil
		}
		s.hostReply()
		return Pause, nil
	}
	s.reqBodyLive = true
	s.state = StreamPaused
	s.pausedAtBody = true
	act := Continue
	err := vm.invoke(s.id, "proxy_on_request_body", vm.fn.onRequestBody, func(ret uint64, stopped bool) {
		act = dataAction(ret, stopped)
	}, uint64(s.id), uint64(len(s.reqBody)), boolArg(eos))
	if err != nil {
		s.err = err
		return s.failRequest(), err
	}
	if act == Continue && s.state == StreamPaused && s.pausedAtBody {
		s.bodyForward()
	}
	return act, nil
}

// bodyAtStoppedHeaders delivers body to a request whose headers stopped
// alone (stopsHeadersOnly): proxy_on_request_body runs (cpp-host answers
// Continue for a module that does not export it), and a Continue
// continues the headers with the body; a stop leaves the headers held
// and Envoy buffers the body past this filter (a resume sends it on
// without calling the plugin again).
func (s *Stream) bodyAtStoppedHeaders(body []byte, eos bool) (Action, error) {
	vm := s.vm
	act := Continue
	if vm.fn.onRequestBody != nil {
		s.reqBody = append([]byte(nil), body...)
		s.reqBodyLive = true
		err := vm.invoke(s.id, "proxy_on_request_body", vm.fn.onRequestBody, func(ret uint64, stopped bool) {
			act = dataAction(ret, stopped)
		}, uint64(s.id), uint64(len(s.reqBody)), boolArg(eos))
		s.reqBodyLive = false
		if err != nil {
			s.err = err
			return s.failRequest(), err
		}
		body = s.reqBody // as the plugin left it
	}
	switch {
	case s.responded || s.ended || s.state == StreamReset:
	case s.state == StreamUpstream: // resumed during the call
		s.upstreamBody = append(s.upstreamBody, body...)
	case act == Continue:
		s.forward()
		s.upstreamBody = append(s.upstreamBody, body...)
	default:
		s.pendingBody = append(s.pendingBody, body...)
		s.hasPending, s.pendingPassed = true, true
	}
	return act, nil
}

func (s *Stream) bodyForward() {
	s.reqBodyLive = false
	s.pausedAtBody = false
	s.upstreamBody = append(s.upstreamBody, s.reqBody...)
	s.state = StreamUpstream
}

func (s *Stream) deliverPendingBody() error {
	body := s.pendingBody
	s.pendingBody, s.hasPending = nil, false
	if s.pendingPassed {
		s.pendingPassed = false
		s.upstreamBody = append(s.upstreamBody, body...)
		return nil
	}
	_, err := s.requestBody(body, !s.trailersPending)
	return err
}

// resumeRequest is the deferred effect of proxy_continue_stream(HTTP_REQUEST)
// (Envoy decoder_callbacks_->continueDecoding()).
func (s *Stream) resumeRequest() {
	if s.ended || s.responded {
		return
	}
	if s.state != StreamPaused {
		s.warn("proxy_continue_stream(HTTP_REQUEST) on a stream that is not paused (state %s); Envoy ignores or asserts", s.state)
		return
	}
	if s.pausedAtTrailers {
		s.trailersForward()
		return
	}
	if s.pausedAtBody {
		s.bodyForward()
		return
	}
	s.forward()
	if s.hasPending {
		_ = s.deliverPendingBody()
	}
	_ = s.deliverPendingTrailers()
}

// resumeResponse is the deferred effect of proxy_continue_stream(HTTP_RESPONSE).
func (s *Stream) resumeResponse() {
	if s.ended || s.responded {
		return
	}
	if s.state != StreamResponsePaused {
		s.warn("proxy_continue_stream(HTTP_RESPONSE) on a stream whose response is not paused (state %s)", s.state)
		return
	}
	if s.respAtBody || s.respAtTrailers {
		s.respAtBody, s.respAtTrailers = false, false
		s.completeFromMaps()
		return
	}
	s.respLive = false
	s.responseBody()
}

func (s *Stream) queueEnd() {
	if s.endQueued || s.ended {
		return
	}
	s.endQueued = true
	s.vm.endQueue = append(s.vm.endQueue, s)
}

// localReply is the deferred effect of proxy_send_local_response on a
// stream (Envoy decoder_callbacks_->sendLocalReply, run after the callback).
func (s *Stream) localReply(lr *LocalResponse) {
	if s.ended || s.responded {
		return
	}
	s.details = lr.Details
	if s.respLive || s.state == StreamResponsePaused {
		// The upstream response is being processed by this filter: Envoy
		// sends the local reply directly, bypassing the encoder filters.
		s.complete(lr.Status, lr.responseHeaders(), lr.Body)
		return
	}
	// Otherwise the local reply goes through the encoder filter chain,
	// this plugin's proxy_on_response_headers included.
	s.reqLive = false
	s.reqBodyLive = false
	s.pausedAtBody = false
	s.respHeaders = newHeaderMap(lr.responseHeaders())
	s.respBody = append([]byte(nil), lr.Body...)
	s.respTrailers = nil
	_, _ = s.runResponse()
}

// resetStream is the deferred effect of proxy_close_stream on an HTTP stream.
func (s *Stream) resetStream() {
	if s.ended {
		return
	}
	s.resetByPlugin = true
	s.respLive, s.reqLive, s.reqBodyLive, s.respBodyLive = false, false, false, false
	s.reqTrailersLive, s.respTrailersLive = false, false
	if !s.responded {
		s.state = StreamReset
		if s.details == "" {
			s.details = "wasm_fail_stream"
		}
	}
	s.queueEnd()
}

// end runs the end of the stream as Envoy does for an HTTP filter: the
// access-log callback proxy_on_log (request and response headers readable),
// then the filter's onDestroy: proxy_on_done and proxy_on_delete. (The spec
// lists on_done before on_log; Envoy has called log() before onDestroy()
// since 2020, and the Go SDK runs OnHttpStreamDone in proxy_on_log.)
func (s *Stream) end() {
	if s.ended {
		return
	}
	vm := s.vm
	s.ended = true
	s.reqLive, s.respLive, s.reqBodyLive, s.respBodyLive = false, false, false, false
	s.reqTrailersLive, s.respTrailersLive = false, false
	if vm.failed == nil {
		s.inLog = true
		_ = vm.invoke(s.id, "proxy_on_log", vm.fn.onLog, nil, uint64(s.id))
		s.inLog = false
	}
	if vm.failed == nil {
		_ = vm.invoke(s.id, "proxy_on_done", vm.fn.onDone, nil, uint64(s.id))
	}
	if vm.failed == nil {
		_ = vm.invoke(s.id, "proxy_on_delete", vm.fn.onDelete, nil, uint64(s.id))
	}
	delete(vm.streams, s.id)
	s.state = StreamClosed
}

// Close ends the stream now, as when the client goes away: a paused stream
// is reset and the plugin sees proxy_on_log, proxy_on_done and
// proxy_on_delete. Closing a closed stream does nothing.
func (s *Stream) Close() error {
	return s.vm.op(func() error {
		if s.ended {
			return nil
		}
		if !s.responded && s.state != StreamReset {
			s.state = StreamReset
		}
		s.reqLive, s.respLive = false, false
		s.queueEnd()
		return nil
	})
}

// ErrStillPaused is returned by Finish for a stream the plugin still holds.
var ErrStillPaused = errors.New("wasmhost: the stream is still paused by the plugin")

// Finish drives the stream as far as it can go: a request that went upstream
// gets its upstream response (Request.Response for streams started by
// VM.Request, else 200), and a responded stream ends. It returns the
// stream's Result; Result.Err is ErrStillPaused if the plugin still holds
// the request or the response.
func (s *Stream) Finish() *Result {
	var err error
	opErr := s.vm.op(func() error {
		switch s.state {
		case StreamUpstream:
			resp := s.pendingResp
			if resp == nil {
				resp = &Response{}
			}
			_, err = s.response(*resp)
		case StreamPaused, StreamResponsePaused:
			err = ErrStillPaused
		}
		return nil
	})
	if err == nil {
		err = opErr
	}
	r := s.Result()
	if err != nil && r.Err == nil {
		r.Err = err
	}
	return r
}

// Header access rules (Envoy Context::getMap / getConstMap):
// the request map is readable and writable while the request headers are
// being processed or held (paused), readable in proxy_on_log; likewise the
// response map for the response. Other times the map "does not exist" and
// calls return BadArgument (get_header_map_pairs returns an empty map).
func (s *Stream) mapFor(t MapType, mutable bool) *headerMap {
	switch t {
	case MapRequestHeaders:
		if s.reqLive || (!mutable && s.inLog) {
			return s.reqHeaders
		}
	case MapResponseHeaders:
		if s.respLive || (!mutable && s.inLog && s.respHeaders != nil) {
			return s.respHeaders
		}
	case MapRequestTrailers:
		if s.reqTrailersLive {
			return s.reqTrailers
		}
	case MapResponseTrailers:
		// Envoy's log callback has the response trailers, not the request's.
		if s.respTrailersLive || (!mutable && s.inLog && s.respTrailers != nil) {
			return s.respTrailers
		}
	}
	return nil
}

func (s *Stream) recordOp(op HeaderOp) {
	switch op.Map {
	case MapRequestHeaders:
		s.reqOps = append(s.reqOps, op)
	case MapResponseHeaders:
		s.respOps = append(s.respOps, op)
	}
}

// FilterState returns what the plugin set with proxy_set_property under
// name (one segment): in Envoy, the filter state "wasm.<name>" that an
// access log prints with %FILTER_STATE(wasm.<name>:PLAIN)%.
func (s *Stream) FilterState(name string) (string, bool) {
	v, ok := s.setProps[name]
	return v, ok
}

// property resolves a stream property (wire path).
func (s *Stream) property(path string) (string, bool) {
	if strings.IndexByte(path, 0) < 0 {
		if v, ok := s.setProps[path]; ok {
			return v, true
		}
	}
	if v, ok := s.props[path]; ok {
		return v, true
	}
	return "", false
}

func (s *Stream) derivedProperty(path string) (string, bool) {
	if strings.HasPrefix(path, "request\x00") && s.reqHeaders != nil {
		return derivedRequestProperty(s.reqHeaders.kv, path)
	}
	switch path {
	case "response\x00code":
		if s.respHeaders != nil {
			if st, err := strconv.Atoi(s.respHeaders.kv.Value(":status")); err == nil {
				return PropertyInt64(int64(st)), true
			}
		}
	case "response\x00code_details":
		if s.details != "" {
			return s.details, true
		}
	}
	return "", false
}
