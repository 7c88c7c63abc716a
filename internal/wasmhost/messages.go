package wasmhost

import "strconv"

// Request is one HTTP request for VM.Request.
type Request struct {
	// Headers are the request headers as the HTTP connection manager hands
	// them to the filter, pseudo-headers included (":method", ":path",
	// ":authority", ":scheme"). Names are lowercased on entry.
	Headers Headers
	// Properties of the stream (source.address, xds.route_name, ...), on top
	// of the Host's WithProperties. See Properties for the key format.
	Properties Properties
	// Body is the request body. Empty means a headers-only request:
	// proxy_on_request_headers gets end_of_stream=true and no body callback
	// runs. Otherwise the body arrives in one proxy_on_request_body call
	// with end_of_stream=true once the headers continued.
	Body []byte
	// Trailers are the request's trailers (none when empty): the body,
	// then they, end the request (SendRequestTrailers).
	Trailers Headers
	// Response is what the upstream answers if the request reaches it;
	// nil means 200 with no other header and no body.
	Response *Response
}

// HTTPRequest returns a Request with the pseudo-headers :method, :path,
// :authority and :scheme ("http") followed by extra headers.
func HTTPRequest(method, authority, path string, headers ...[2]string) Request {
	h := make(Headers, 0, 4+len(headers))
	h = append(h, [2]string{":method", method}, [2]string{":path", path},
		[2]string{":authority", authority}, [2]string{":scheme", "http"})
	return Request{Headers: append(h, headers...)}
}

// Response is an upstream response.
type Response struct {
	// Status is the :status (default 200); ignored if Headers has ":status".
	Status int
	// Headers are the other response headers.
	Headers Headers
	// Body is the response body (delivered in one proxy_on_response_body
	// call with end_of_stream=true; empty means headers only).
	Body []byte
	// Trailers are the response's trailers (none when empty; a gRPC
	// response's grpc-status): the headers and body do not end the
	// response then, and proxy_on_response_trailers runs after them.
	Trailers Headers
	// KeepOpen: the response is complete but the stream does not end yet
	// (Envoy is still writing it to a slow client); Close ends it.
	KeepOpen bool
}

func (r *Response) headers() Headers {
	if r.Headers.Has(":status") {
		return r.Headers.Clone()
	}
	st := r.Status
	if st == 0 {
		st = 200
	}
	return append(Headers{{":status", strconv.Itoa(st)}}, r.Headers...)
}

// LocalResponse is a response the plugin generated with
// proxy_send_local_response (or the host, for the fail-closed policy).
type LocalResponse struct {
	Status int
	// Headers are the additional headers the plugin passed, in order,
	// names lowercased.
	Headers Headers
	Body    []byte
	// Details is the response code details, with whitespace replaced by
	// '_' as Envoy does (StringUtil::replaceAllEmptySpace). The Go SDK
	// always passes "".
	Details string
	// GrpcStatus is the gRPC status the plugin passed (-1: none).
	GrpcStatus int32
	// FromHost is true for the 503 "wasm_fail_stream" reply a fail-closed
	// plugin whose VM crashed gets.
	FromHost bool
}

// responseHeaders builds the headers Envoy's Utility::sendLocalReply gives
// the local reply before the encoder filters see it: :status, the plugin's
// headers, then content-length and content-type: text/plain when there is
// a body (content-type only if the plugin did not set one). Headers the HTTP
// connection manager adds after the filters (date, server) are not included.
func (lr *LocalResponse) responseHeaders() Headers {
	h := Headers{{":status", strconv.Itoa(lr.Status)}}
	for _, kv := range lr.Headers {
		h = append(h, [2]string{lower(kv[0]), kv[1]})
	}
	if len(lr.Body) > 0 {
		h = append(h, [2]string{"content-length", strconv.Itoa(len(lr.Body))})
		if !h.Has("content-type") {
			h = append(h, [2]string{"content-type", "text/plain"})
		}
	}
	return h
}
