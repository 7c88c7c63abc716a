package main

import (
	"time"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"

	"github.com/sluicehq/sluice/plugin/engine"
	"github.com/sluicehq/sluice/plugin/internal/rls"
	"github.com/sluicehq/sluice/plugin/internal/sprintf"
)

// globalTickMS is the tick period when global rules exist: the tick fails
// calls whose answer Envoy will never deliver (engine.Sweep).
const globalTickMS = 20

// rlsCaller sends gRPC calls to the rate-limit service with
// DispatchHttpCall (the pinned Go SDK has no gRPC call): a unary call is an
// HTTP/2 POST with a 5-byte framed protobuf body, its status in the
// grpc-status header or trailer.
type rlsCaller struct {
	headers [][2]string
	// root is the plugin's root context; stream, while not 0, the stream
	// whose response is being settled (the current context): see
	// CallDetached.
	root, stream uint32
}

func newRLSCaller(cluster string, root uint32) *rlsCaller {
	return &rlsCaller{root: root, headers: [][2]string{
		{":method", "POST"},
		{":path", rls.Path},
		{":authority", cluster},
		{"content-type", "application/grpc"},
		{"te", "trailers"},
	}}
}

func (c *rlsCaller) Call(cluster string, body []byte, timeout time.Duration, done func(rls.Response, error)) error {
	ms := uint32(max(timeout/time.Millisecond, 1))
	_, err := proxywasm.DispatchHttpCall(cluster, c.headers, body, nil, ms, func(numHeaders, bodySize, numTrailers int) {
		var hs, ts [][2]string
		var b []byte
		if numHeaders > 0 {
			hs, _ = proxywasm.GetHttpCallResponseHeaders()
		}
		if bodySize > 0 {
			b, _ = proxywasm.GetHttpCallResponseBody(0, bodySize)
		}
		if numTrailers > 0 {
			ts, _ = proxywasm.GetHttpCallResponseTrailers()
		}
		resp, err := rls.Reply(hs, ts, b)
		done(resp, err)
	})
	return err
}

// CallDetached sends a call no request waits for (a charge) on behalf of
// the plugin's root context when a stream is current: Envoy cancels the
// calls a stream made when the stream ends, which a response that goes on
// to its client usually does before the call's answer, and a cancelled
// charge may never reach the service. The answer is still delivered only
// while the stream lives (the Go SDK keys it on the stream), which a
// charge can do without.
func (c *rlsCaller) CallDetached(cluster string, body []byte, timeout time.Duration, done func(rls.Response, error)) error {
	if c.stream == 0 || proxywasm.SetEffectiveContext(c.root) != nil {
		return c.Call(cluster, body, timeout, done)
	}
	err := c.Call(cluster, body, timeout, done)
	_ = proxywasm.SetEffectiveContext(c.stream) // the stream is current: it lives
	return err
}

// onDecided acts on a request that waited for the rate-limit service.
func (p *pluginContext) onDecided(pd *engine.Pending, v *engine.Verdict) {
	h, ok := pd.Ctx.(*httpContext)
	if !ok || h.gone {
		return
	}
	h.pending = nil
	*h.verdict = *v
	h.verdict.Pending = nil
	if err := proxywasm.SetEffectiveContext(h.id); err != nil {
		return // the stream is gone
	}
	now := nowNanos()
	if v.Err != nil && v.ErrRule != nil {
		p.logCallError(v, now)
	}
	switch v.Outcome {
	case engine.Reject:
		if err := p.reject(h, h.verdict, now); err != nil {
			_ = proxywasm.ResumeHttpRequest()
		}
	case engine.Delay:
		// A rate rule also delays it: hold it for what is left.
		if release := pd.Arrival + int64(v.Delay); release > now {
			if p.hold(h, h.verdict, time.Duration(release-now), now) {
				p.tell(h.verdict)
			}
			return
		}
		p.tell(h.verdict)
		h.sent = now
		_ = proxywasm.ResumeHttpRequest()
	default:
		p.tell(h.verdict)
		h.sent = now
		if err := proxywasm.ResumeHttpRequest(); err != nil {
			proxywasm.LogDebug(sprintf.Sprintf("sluice: resume of request %d failed: %v", h.id, err))
		}
	}
}

// logCallError logs a failed call at most once a second per worker.
func (p *pluginContext) logCallError(v *engine.Verdict, now int64) {
	if !p.logs.callError(now) {
		return
	}
	proxywasm.LogWarn(sprintf.Sprintf("sluice: rule %s: %v (on_error: %s)", v.ErrRule.Name, v.Err, onErrorWord(p.engine.Config())))
}
