// Package otelsluice records what a Sluice SDK Transport does as
// OpenTelemetry metrics, from the SDK's event hook, on the MeterProvider
// the caller passes. It is a package of its own so that package sdk
// imports no OpenTelemetry.
//
//	m, err := otelsluice.New(otel.GetMeterProvider())
//	if err != nil { ... }
//	client := sdk.NewClient(m.Option(), sdk.WithAdaptiveRate())
//
// The instruments (meter "github.com/sluicehq/sluice/sdk/otelsluice"):
//
//   - sluice.client.resends {request}: every retry the Transport schedules
//     (sent after its wait, unless the context ends first), with
//     http.request.resend_count (1 for the first retry), the status code
//     that caused it (http.response.status_code, absent for a transport
//     error), sluice.reason and server.address. First attempts are the
//     HTTP client instrumentation's to count (otelhttp); a request with no
//     resend never reaches the hook.
//   - sluice.client.wait.duration (s): every wait, a retry's backoff or a
//     hold before sending, with sluice.reason (rate_limited, unavailable,
//     transport_error, host_limit), server.address and, for holds,
//     sluice.policy.
//   - sluice.client.cooldowns {hold}: holds of a request before sending
//     because a shared view of the limit (a cool-down after a 429, an
//     exhausted quota, the pacing at the announced or learned rate) said
//     it would be refused, with sluice.policy and server.address; a
//     request may be held more than once on its way.
//   - sluice.client.retry_budget.refusals {request}: retries refused
//     because the host's retry budget was empty.
//   - sluice.client.give_ups {request}: every time the Transport stops
//     and returns the last outcome, with sluice.give_up (the
//     sdk.GiveUp* text), sluice.reason and server.address.
package otelsluice

import (
	"context"

	"github.com/sluicehq/sluice/sdk"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ScopeName is the instrumentation scope of the meter.
const ScopeName = "github.com/sluicehq/sluice/sdk/otelsluice"

// Attribute keys besides OpenTelemetry's semantic conventions.
const (
	ReasonKey = attribute.Key("sluice.reason")
	PolicyKey = attribute.Key("sluice.policy")
	GiveUpKey = attribute.Key("sluice.give_up")
)

// Semantic-convention keys (HTTP client spans and metrics).
const (
	ResendCountKey = attribute.Key("http.request.resend_count")
	StatusCodeKey  = attribute.Key("http.response.status_code")
	ServerKey      = attribute.Key("server.address")
)

// Metrics holds the instruments; its Hook is the SDK's retry hook.
type Metrics struct {
	resends  metric.Int64Counter
	wait     metric.Float64Histogram
	cooldown metric.Int64Counter
	budget   metric.Int64Counter
	giveUps  metric.Int64Counter
}

// New creates the instruments on mp's meter for this package.
func New(mp metric.MeterProvider) (*Metrics, error) {
	m := mp.Meter(ScopeName)
	var (
		r   Metrics
		err error
	)
	if r.resends, err = m.Int64Counter("sluice.client.resends", metric.WithUnit("{request}"),
		metric.WithDescription("Retries sent by the Sluice SDK Transport.")); err != nil {
		return nil, err
	}
	if r.wait, err = m.Float64Histogram("sluice.client.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Waits of the Sluice SDK Transport: retry backoffs and holds before sending."),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)); err != nil {
		return nil, err
	}
	if r.cooldown, err = m.Int64Counter("sluice.client.cooldowns", metric.WithUnit("{hold}"),
		metric.WithDescription("Requests held before sending by a shared view of a rate limit.")); err != nil {
		return nil, err
	}
	if r.budget, err = m.Int64Counter("sluice.client.retry_budget.refusals", metric.WithUnit("{request}"),
		metric.WithDescription("Retries refused because the host's retry budget was empty.")); err != nil {
		return nil, err
	}
	if r.giveUps, err = m.Int64Counter("sluice.client.give_ups", metric.WithUnit("{request}"),
		metric.WithDescription("Times the Sluice SDK Transport stopped and returned the last outcome.")); err != nil {
		return nil, err
	}
	return &r, nil
}

// Option is sdk.WithRetryHook(m.Hook). To keep a hook of your own as
// well, call m.Hook from it instead.
func (m *Metrics) Option() sdk.Option { return sdk.WithRetryHook(m.Hook) }

// Hook records one event of the SDK (see sdk.RetryEvent). It is safe for
// concurrent use, as the SDK requires.
func (m *Metrics) Hook(ev sdk.RetryEvent) {
	ctx := context.Background()
	if ev.Request != nil {
		ctx = ev.Request.Context()
	}
	host := ""
	if ev.Request != nil && ev.Request.URL != nil {
		host = ev.Request.URL.Hostname()
	}
	reason := ReasonKey.String(ev.Reason.String())
	server := ServerKey.String(host)
	if ev.GiveUp != "" {
		m.giveUps.Add(ctx, 1, metric.WithAttributes(GiveUpKey.String(ev.GiveUp), reason, server))
		if ev.GiveUp == sdk.GiveUpBudget {
			m.budget.Add(ctx, 1, metric.WithAttributes(reason, server))
		}
		return
	}
	if ev.Reason == sdk.HostLimit {
		policy := PolicyKey.String(ev.Policy)
		m.cooldown.Add(ctx, 1, metric.WithAttributes(policy, server))
		m.wait.Record(ctx, ev.Delay.Seconds(), metric.WithAttributes(reason, server, policy))
		return
	}
	m.wait.Record(ctx, ev.Delay.Seconds(), metric.WithAttributes(reason, server))
	// The retry about to be sent is resend number Attempt: Attempt
	// attempts have been sent, the first of which was no resend.
	attrs := []attribute.KeyValue{ResendCountKey.Int(ev.Attempt), reason, server}
	if ev.StatusCode != 0 {
		attrs = append(attrs, StatusCodeKey.Int(ev.StatusCode))
	}
	m.resends.Add(ctx, 1, metric.WithAttributes(attrs...))
}
