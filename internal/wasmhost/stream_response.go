package wasmhost

import (
	"fmt"
	"strconv"
)

// SendResponse delivers the upstream response to a stream whose request went
// upstream: proxy_on_response_headers, then proxy_on_response_body if there
// is a body. When the response continues, the client receives it and the
// stream ends (on_log, on_done, on_delete).
func (s *Stream) SendResponse(resp Response) (Action, error) {
	return s.vm.opAction(func() (Action, error) { return s.response(resp) })
}

func (s *Stream) response(resp Response) (Action, error) {
	if s.state != StreamUpstream {
		return Pause, fmt.Errorf("wasmhost: stream %d: cannot deliver a response in state %s", s.id, s.state)
	}
	s.respHeaders = newHeaderMap(resp.headers())
	s.respBody = append([]byte(nil), resp.Body...)
	s.respTrailers = nil
	if len(resp.Trailers) > 0 {
		s.respTrailers = newHeaderMap(resp.Trailers)
	}
	s.keepOpen = resp.KeepOpen
	if s.details == "" {
		// Envoy's response.code_details of a response from the upstream.
		s.details = "via_upstream"
	}
	if s.vm.failed != nil {
		if s.vm.h.cfg.failOpen {
			s.completeFromMaps()
			return Continue, nil
		}
		s.hostReply()
		return Pause, nil
	}
	return s.runResponse()
}

// runResponse runs the encoder side of this filter on s.respHeaders and
// s.respBody: proxy_on_response_headers, then proxy_on_response_body.
func (s *Stream) runResponse() (Action, error) {
	vm := s.vm
	s.respLive = true
	s.state = StreamResponsePaused
	eos := len(s.respBody) == 0 && s.respTrailers == nil
	act, headersOnly := Continue, false
	if vm.fn.onResponseHeaders != nil {
		err := vm.invoke(s.id, "proxy_on_response_headers", vm.fn.onResponseHeaders, func(ret uint64, stopped bool) {
			s.respRawAction = uint32(ret)
			act = headerAction(ret, stopped)
			headersOnly = vm.stopsHeadersOnly(ret, stopped)
		}, uint64(s.id), uint64(len(s.respHeaders.kv)), boolArg(eos))
		if err != nil {
			if s.responseFailed(err) {
				return Continue, err
			}
			return Pause, err
		}
	}
	s.respAction = act
	if s.responded || s.ended {
		return act, nil
	}
	if act == Pause {
		if s.local != nil && !s.local.FromHost {
			s.warn("the plugin paused its own local response in proxy_on_response_headers; Envoy holds it until proxy_continue_stream(HTTP_RESPONSE)")
		}
		if headersOnly && (len(s.respBody) > 0 || s.respTrailers != nil) {
			// The headers stopped alone: the body and trailers go on to
			// the plugin (the headers still held and writable), and their
			// Continue, or no callback for them, sends the response.
			return act, s.responseBody()
		}
		return act, nil
	}
	s.respLive = false
	return act, s.responseBody()
}

func (s *Stream) responseBody() error {
	vm := s.vm
	if len(s.respBody) == 0 || vm.fn.onResponseBody == nil {
		return s.responseTrailers()
	}
	s.respBodyLive = true
	s.respAtBody = true
	s.state = StreamResponsePaused
	act := Continue
	err := vm.invoke(s.id, "proxy_on_response_body", vm.fn.onResponseBody, func(ret uint64, stopped bool) {
		act = dataAction(ret, stopped)
	}, uint64(s.id), uint64(len(s.respBody)), boolArg(s.respTrailers == nil))
	if err != nil {
		s.responseFailed(err)
		return err
	}
	if s.responded || s.ended {
		return nil
	}
	if act == Continue {
		s.respAtBody = false
		return s.responseTrailers()
	}
	if s.respTrailers != nil {
		// A stopped body does not stop the trailers from reaching the
		// filter: their Continue sends the response.
		return s.runResponseTrailers()
	}
	return nil
}

func (s *Stream) completeFromMaps() {
	if s.respTrailers != nil {
		s.finalTrailers = s.respTrailers.kv.Clone()
	}
	st, _ := strconv.Atoi(s.respHeaders.kv.Value(":status"))
	s.complete(st, s.respHeaders.kv, s.respBody)
}

// complete records what the client received and schedules the stream's end.
func (s *Stream) complete(status int, headers Headers, body []byte) {
	s.respLive = false
	s.respBodyLive = false
	s.respTrailersLive = false
	s.reqLive = false
	s.reqBodyLive = false
	s.responded = true
	s.finalStatus = status
	s.finalHeaders = headers.Clone()
	s.finalBody = append([]byte(nil), body...)
	s.state = StreamResponded
	if s.respHeaders == nil || !sameHeaders(s.respHeaders.kv, headers) {
		s.respHeaders = newHeaderMap(headers)
	}
	if s.keepOpen {
		return // Close ends it
	}
	s.queueEnd()
}

func sameHeaders(a, b Headers) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// responseFailed settles s after a response callback failed with err, as
// the filter's failure policy says: failing open sends the response on as
// it is (it reports true), otherwise the host answers for the plugin.
func (s *Stream) responseFailed(err error) bool {
	s.err = err
	if s.vm.h.cfg.failOpen {
		s.completeFromMaps()
		return true
	}
	s.hostReply()
	return false
}
