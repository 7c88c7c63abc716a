package wasmhost

// Result is the outcome of a request, as far as it went.
type Result struct {
	// Stream is the stream, for stepping further (paused requests).
	Stream    *Stream
	ContextID uint32
	State     StreamState
	// Paused is true when the plugin holds the request (State ==
	// StreamPaused): resume or answer it from Tick, or Close it.
	Paused bool
	// Action is the verdict Envoy applied after proxy_on_request_headers.
	Action Action
	// RawAction is the value proxy_on_request_headers returned.
	RawAction uint32
	// LocalResponse is the plugin's local response, if it sent one.
	LocalResponse *LocalResponse
	// Forwarded is true if the request went upstream.
	Forwarded bool
	// UpstreamRequest are the request headers the upstream received (after
	// the plugin's changes); UpstreamBody the body, UpstreamTrailers the
	// trailers.
	UpstreamRequest  Headers
	UpstreamBody     []byte
	UpstreamTrailers Headers
	// Status, Headers, Body and Trailers are what the client received (0/nil while
	// no response was sent): the upstream response or the local response,
	// after this plugin's changes in proxy_on_response_headers/body.
	Status   int
	Headers  Headers
	Body     []byte
	Trailers Headers
	// ResponseAction is the verdict after proxy_on_response_headers.
	ResponseAction Action
	// ResponseRawAction is the value proxy_on_response_headers returned.
	ResponseRawAction uint32
	// Details is the response code details of a local response or reset.
	Details string
	// RequestHeaderOps and ResponseHeaderOps list the plugin's changes to
	// the request and response header maps, in order.
	RequestHeaderOps  []HeaderOp
	ResponseHeaderOps []HeaderOp
	// Warnings lists what the host noticed Envoy would mishandle.
	Warnings []string
	// Err is the first error: a *TrapError if the plugin crashed on this
	// stream, or a host error.
	Err error
}

// TB is the subset of testing.TB that Result.Must uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Must fails the test if r.Err is set, and returns r.
func (r *Result) Must(t TB) *Result {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("wasmhost: request failed: %v", r.Err)
	}
	return r
}

// Result returns a snapshot of the stream's outcome so far.
func (s *Stream) Result() *Result {
	s.vm.mu.Lock()
	defer s.vm.mu.Unlock()
	return s.result()
}

func (s *Stream) result() *Result {
	r := &Result{
		Stream:            s,
		ContextID:         s.id,
		State:             s.state,
		Paused:            s.state == StreamPaused,
		Action:            s.action,
		RawAction:         s.rawAction,
		Forwarded:         s.forwarded,
		UpstreamRequest:   s.upstreamReq.Clone(),
		UpstreamBody:      append([]byte(nil), s.upstreamBody...),
		UpstreamTrailers:  s.upstreamTrailers.Clone(),
		ResponseAction:    s.respAction,
		ResponseRawAction: s.respRawAction,
		Details:           s.details,
		RequestHeaderOps:  append([]HeaderOp(nil), s.reqOps...),
		ResponseHeaderOps: append([]HeaderOp(nil), s.respOps...),
		Warnings:          append([]string(nil), s.warnings...),
		Err:               s.err,
	}
	if s.local != nil {
		lr := *s.local
		r.LocalResponse = &lr
	}
	if s.responded {
		r.Status = s.finalStatus
		r.Headers = s.finalHeaders.Clone()
		r.Body = append([]byte(nil), s.finalBody...)
		r.Trailers = s.finalTrailers.Clone()
	}
	return r
}

// Request runs one HTTP request through the plugin as Envoy would on this
// VM's worker: a new HTTP context, proxy_on_request_headers (then
// proxy_on_request_body if there is a body), and, if the request
// continues, the upstream response through proxy_on_response_headers (and
// proxy_on_response_body), then proxy_on_log, proxy_on_done and
// proxy_on_delete. A local response from the plugin is returned to the
// client after going through the plugin's own proxy_on_response_headers,
// as in Envoy.
//
// If the plugin pauses the request, Request returns with Result.Paused set
// and the stream open: drive time (VM.Tick, Host.AdvanceClock) and then call
// Result.Stream.Finish, or Result.Stream.Close to model a client that left.
func (vm *VM) Request(req Request) *Result {
	var s *Stream
	err := vm.op(func() error {
		var err error
		s, err = vm.newStream(req.Properties)
		if err != nil {
			return err
		}
		s.pendingResp = req.Response
		if len(req.Body) > 0 {
			s.pendingBody = append([]byte(nil), req.Body...)
			s.hasPending = true
		}
		if len(req.Trailers) > 0 {
			s.reqTrailers, s.trailersPending = newHeaderMap(req.Trailers), true
		}
		if _, err = s.requestHeaders(req.Headers, len(req.Body) == 0 && len(req.Trailers) == 0); err != nil {
			return err
		}
		if s.state == StreamUpstream && s.hasPending {
			if err = s.deliverPendingBody(); err != nil {
				return err
			}
		}
		if err = s.deliverPendingTrailers(); err != nil {
			return err
		}
		if s.state == StreamUpstream {
			resp := req.Response
			if resp == nil {
				resp = &Response{}
			}
			_, err = s.response(*resp)
		}
		return err
	})
	if s == nil {
		return &Result{Err: err}
	}
	r := s.Result()
	if r.Err == nil {
		r.Err = err
	}
	return r
}
