package engine

import (
	"strconv"
	"time"

	"github.com/sluicehq/sluice/sdk/header"
)

// MaxHeaders is the most headers a HeaderSet holds: Retry-After, three
// legacy, two draft, the shadow header, a rejection's content-type and,
// for a refused gRPC call, grpc-retry-pushback-ms.
const MaxHeaders = 9

// HeaderSet is a fixed list of response headers whose values point into one
// buffer, so building it allocates nothing after the first use.
type HeaderSet struct {
	Pairs [MaxHeaders][2]string
	N     int
	buf   []byte
}

// Add appends a header whose value outlives h (a constant); false when h
// is full.
func (h *HeaderSet) Add(name, value string) bool {
	if h.N >= MaxHeaders {
		return false
	}
	h.Pairs[h.N] = [2]string{name, value}
	h.N++
	return true
}

// AddPushback appends grpc-retry-pushback-ms for a wait of d, to a refused
// gRPC call (see header.GRPCRetryPushback): a gRPC client's retry policy
// waits that long instead of retrying UNAVAILABLE at once, and it does not
// read Retry-After.
func (h *HeaderSet) AddPushback(d time.Duration) {
	if h.N >= MaxHeaders {
		return
	}
	s := len(h.buf)
	h.buf = header.AppendPushback(h.buf, d)
	h.add(header.GRPCRetryPushback, s)
}

// List returns the headers as the slice proxy-wasm calls take.
func (h *HeaderSet) List() [][2]string { return h.Pairs[:h.N] }

// Not inlined: a copy at each of Build's call sites costs more wasm code
// than the call (docs/design/memory.md, "Inlining"), and Build runs only
// when the headers change (the plugin keeps the last ones).
//
//go:noinline
func (h *HeaderSet) add(name string, start int) {
	h.Pairs[h.N] = [2]string{name, unsafeString(h.buf[start:])}
	h.N++
}

// Build fills h with the headers for v in mode. rejected adds Retry-After.
// The strings stay valid until the next Build on h.
func (h *HeaderSet) Build(v *Verdict, mode header.Mode, rejected bool) {
	h.N = 0
	if cap(h.buf) < 512 {
		h.buf = make([]byte, 0, 512)
	}
	// Appending must never reallocate: earlier values point into buf.
	h.buf = h.buf[:0]
	if rejected {
		s := len(h.buf)
		h.buf = header.AppendRetryAfter(h.buf, v.RetryAfter)
		h.add(header.RetryAfter, s)
	}
	if r := v.Report; r != nil && mode != header.None {
		lim := r.Limit.Limit()
		if IsAdaptive(r) && v.ReportLimit > 0 {
			lim = v.ReportLimit // the learnt limit, not max_limit
		}
		if mode.Legacy() {
			s := len(h.buf)
			h.buf = strconv.AppendInt(h.buf, lim, 10)
			h.add(header.XLimit, s)
			s = len(h.buf)
			h.buf = strconv.AppendInt(h.buf, max(v.Remaining, 0), 10)
			h.add(header.XRemaining, s)
			s = len(h.buf)
			h.buf = header.AppendSeconds(h.buf, v.Reset)
			h.add(header.XReset, s)
		}
		if mode.Draft() {
			s := len(h.buf)
			h.buf = header.AppendPolicy(h.buf, r.Name, lim, r.Limit.Window())
			if IsConcurrency(r) {
				h.buf = header.AppendQuotaUnit(h.buf, header.UnitConcurrentRequests)
			}
			h.add(header.Policy, s)
			s = len(h.buf)
			if rejected {
				// t says what Retry-After says (the draft: Retry-After is
				// never earlier than the end of t).
				h.buf = header.AppendRateLimitRefused(h.buf, r.Name, v.RetryAfter)
			} else {
				h.buf = header.AppendRateLimit(h.buf, r.Name, v.Remaining, v.Reset)
			}
			h.add(header.RateLimit, s)
		}
	}
	if v.Shadow != nil {
		s := len(h.buf)
		h.buf = header.AppendShadow(h.buf, v.Shadow.Name, v.ShadowRetryAfter)
		h.add(header.Shadow, s)
	}
}
