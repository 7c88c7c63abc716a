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
}

func newRLSCaller(cluster string) *rlsCaller {
	return &rlsCaller{headers: [][2]string{
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
		if err := p.reject(h.verdict, now); err != nil {
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
	if now-p.lastCallErrLog < int64(time.Second) {
		return
	}
	p.lastCallErrLog = now
	proxywasm.LogWarn(sprintf.Sprintf("sluice: rule %s: %v (on_error: %s)", v.ErrRule.Name, v.Err, onErrorWord(p.engine.Config())))
}
