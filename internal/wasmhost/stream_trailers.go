package wasmhost

import "fmt"

// Trailers, as proxy-wasm-cpp-host and Envoy handle them. The trailers
// callbacks answer 0 to go on, anything else to stop
// (FilterTrailersStatus::StopIteration); cpp-host answers Continue for a
// module that does not export them. Where a filter stopped its headers
// with StopAllIteration (a header callback's 4, or the 1 cpp-host turns
// into it), Envoy keeps the body and trailers from the filter until it
// resumes, then hands them to it (commonContinue). Where it stopped only
// the headers (allow_on_headers_stop_iteration) or the body, the trailers
// reach the filter when they arrive, and its Continue continues what it
// had stopped: headers, buffered body and trailers
// (commonHandleAfterTrailersCallback).

// SendRequestTrailers delivers the request's trailers, its end (send the
// body before with endOfStream false). A request held at its headers keeps
// them with its body until the plugin resumes it; otherwise
// proxy_on_request_trailers runs, and its Continue sends on what the
// plugin had stopped. Trailers of a stream already answered are dropped.
func (s *Stream) SendRequestTrailers(trailers Headers) (Action, error) {
	return s.vm.opAction(func() (Action, error) { return s.requestTrailers(trailers) })
}

func (s *Stream) requestTrailers(trailers Headers) (Action, error) {
	if s.reqTrailers != nil || s.reqHeaders == nil {
		return Pause, fmt.Errorf("wasmhost: stream %d: request trailers before the headers or twice", s.id)
	}
	s.reqTrailers = newHeaderMap(trailers)
	switch {
	case s.responded || s.ended || s.state == StreamReset:
		return Continue, nil
	case s.state == StreamPaused && s.heldAtHeaders():
		s.trailersPending = true
		return Pause, nil
	case s.state != StreamUpstream && s.state != StreamPaused:
		return Pause, fmt.Errorf("wasmhost: stream %d: cannot send request trailers in state %s", s.id, s.state)
	case s.vm.failed != nil:
		s.trailersForward() // fail-open (fail-closed answered at the headers)
		return Continue, nil
	}
	return s.runRequestTrailers()
}

// heldAtHeaders reports that a paused request stopped at its headers with
// StopAllIteration: its body and trailers wait for the resume.
func (s *Stream) heldAtHeaders() bool {
	return !s.pausedAtBody && !s.pausedAtTrailers && !s.headersOnly
}

// runRequestTrailers runs proxy_on_request_trailers (the trailers map
// readable and writable) on a request that went upstream or whose headers
// or body stopped alone.
func (s *Stream) runRequestTrailers() (Action, error) {
	vm := s.vm
	act := Continue
	if vm.fn.onRequestTrailers != nil {
		s.reqTrailersLive = true
		err := vm.invoke(s.id, "proxy_on_request_trailers", vm.fn.onRequestTrailers, func(ret uint64, stopped bool) {
			act = dataAction(ret, stopped)
		}, uint64(s.id), uint64(len(s.reqTrailers.kv)))
		if err != nil {
			s.reqTrailersLive = false
			s.err = err
			return s.failRequest(), err
		}
	}
	switch {
	case s.responded || s.ended || s.state == StreamReset:
		s.reqTrailersLive = false
	case act == Continue:
		s.trailersForward()
	default:
		s.state, s.pausedAtTrailers = StreamPaused, true
	}
	return act, nil
}

// trailersForward sends on what the request's filter had stopped, with the
// trailers: its headers, its buffered body (Envoy's commonContinue).
func (s *Stream) trailersForward() {
	s.reqTrailersLive, s.pausedAtTrailers = false, false
	if s.pausedAtBody {
		s.bodyForward()
	}
	if !s.forwarded {
		s.forward()
	}
	if s.hasPending {
		s.upstreamBody = append(s.upstreamBody, s.pendingBody...)
		s.pendingBody, s.hasPending, s.pendingPassed = nil, false, false
	}
	s.upstreamTrailers = s.reqTrailers.kv.Clone()
	s.state = StreamUpstream
}

// deliverPendingTrailers hands the trailers that waited (the request held
// at its headers, or trailers VM.Request queued) to the plugin once the
// request went on or stopped otherwise than at its headers.
func (s *Stream) deliverPendingTrailers() error {
	if !s.trailersPending || s.responded || s.ended || s.state == StreamReset ||
		s.state == StreamPaused && s.heldAtHeaders() {
		return nil
	}
	s.trailersPending = false
	_, err := s.runRequestTrailers()
	return err
}

// responseTrailers runs the response's trailers, if it has any, through the
// plugin, and sends the response on unless they stop it.
func (s *Stream) responseTrailers() error {
	if s.respTrailers == nil {
		s.completeFromMaps()
		return nil
	}
	return s.runResponseTrailers()
}

// runResponseTrailers runs proxy_on_response_trailers: its Continue sends
// the response (also one whose body the plugin stopped), a stop holds it
// until proxy_continue_stream(HTTP_RESPONSE).
func (s *Stream) runResponseTrailers() error {
	vm := s.vm
	act := Continue
	if vm.fn.onResponseTrailers != nil {
		s.respTrailersLive = true
		s.state = StreamResponsePaused
		err := vm.invoke(s.id, "proxy_on_response_trailers", vm.fn.onResponseTrailers, func(ret uint64, stopped bool) {
			act = dataAction(ret, stopped)
		}, uint64(s.id), uint64(len(s.respTrailers.kv)))
		if err != nil {
			s.responseFailed(err)
			return err
		}
	}
	if s.responded || s.ended {
		return nil
	}
	if act == Continue {
		s.respAtBody, s.respAtTrailers = false, false
		s.completeFromMaps()
		return nil
	}
	s.state, s.respAtTrailers = StreamResponsePaused, true
	return nil
}
