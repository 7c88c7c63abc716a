package config

import (
	"slices"

	"github.com/sluicehq/sluice/plugin/internal/jsonlite"
	"github.com/sluicehq/sluice/plugin/internal/sprintf"
	"github.com/sluicehq/sluice/plugin/internal/textnum"
	"github.com/sluicehq/sluice/shared/limit"
)

// Cost is what a rule charges a request when it is not one unit at
// admission (the rule field "cost"); the rule's limit is then in these
// units.
type Cost struct {
	// RequestHeader: charged at admission, the value of this request
	// header (lower-case name).
	RequestHeader string
	// ResponseHeader: charged once the upstream's response headers arrive,
	// the value of this response header (lower-case name).
	ResponseHeader string
	// OnStatus: charged after the response, and only when its status is
	// one of these (empty: every status).
	OnStatus []uint32
	// Max caps one request's charge; a value over it costs Max.
	Max int64
}

// AfterResponse reports whether the rule charges once the response
// arrives (response_header or on_status) rather than at admission.
func (c *Cost) AfterResponse() bool {
	return c.ResponseHeader != "" || len(c.OnStatus) > 0
}

// Set reports whether the rule has a cost (otherwise one unit per
// request, at admission).
func (c *Cost) Set() bool { return c.RequestHeader != "" || c.AfterResponse() }

// ChargesStatus reports whether a response of this status is charged.
func (c *Cost) ChargesStatus(status uint32) bool {
	return len(c.OnStatus) == 0 || slices.Contains(c.OnStatus, status)
}

// costAlgorithm says whether a cost other than one per request has a
// meaning for algorithm a: the rates in units. A leaky bucket spaces
// requests (a request is its unit) and a concurrency rule counts requests
// in flight.
func costAlgorithm(a limit.Algorithm) bool {
	return a == limit.TokenBucket || a == limit.FixedWindow || a == limit.SlidingWindow
}

// parseCost reads rule r's "cost" (r.Limit is set): field is
// "rules[i].cost".
func parseCost(field string, raw *jsonlite.Value, r *Rule) (Cost, error) {
	m, err := object(field, raw, nil)
	if err != nil {
		return Cost{}, err
	}
	if err := known(field, m, "request_header", "response_header", "on_status", "max"); err != nil {
		return Cost{}, err
	}
	var c Cost
	for _, f := range []struct {
		name string
		dst  *string
	}{{"request_header", &c.RequestHeader}, {"response_header", &c.ResponseHeader}} {
		if hraw := m.Get(f.name); hraw != nil {
			if *f.dst, err = costHeader(field+"."+f.name, hraw); err != nil {
				return Cost{}, err
			}
		}
	}
	if sraw := m.Get("on_status"); sraw != nil {
		if c.OnStatus, err = onStatus(field+".on_status", sraw); err != nil {
			return Cost{}, err
		}
	}
	switch {
	case c.RequestHeader == "" && !c.AfterResponse():
		return Cost{}, errf(field, "say what to charge: request_header (at admission), or response_header and/or on_status (after the response)")
	case c.RequestHeader != "" && c.AfterResponse():
		return Cost{}, errf(field+".request_header", "not together with response_header or on_status: a rule charges either at admission (request_header) or after the response")
	}
	capacity := r.Limit.Burst()
	if r.Limit.Algorithm() != limit.TokenBucket {
		capacity = r.Limit.Limit()
	}
	c.Max = capacity
	if xraw := m.Get("max"); xraw != nil {
		if c.Max, err = integer(field+".max", xraw); err != nil {
			return Cost{}, err
		}
		// A max over the rule's capacity is accepted: with request_header,
		// a request declaring more than the capacity never passes (it is
		// refused, as one request larger than the bucket), which sluice
		// validate warns about (NeverPasses). Refusing it would make a
		// pushed configuration that lowers the limit fail, and a start with it.
		if c.Max < 1 || c.Max > maxCount {
			return Cost{}, errf(field+".max", "%d is out of range 1..%d", c.Max, int64(maxCount))
		}
	}
	if c.AfterResponse() && r.MaxDelay > 0 {
		return Cost{}, errf(field[:len(field)-len(".cost")]+".max_delay", "not with a cost charged after the response: such a rule admits while the balance is positive, there is nothing to wait for")
	}
	return c, nil
}

// costHeader reads a header name of cost (no pseudo-header: ":status" is
// what on_status is for).
func costHeader(field string, raw *jsonlite.Value) (string, error) {
	var s string
	if err := str(raw, &s); err != nil {
		return "", errf(field, "must be a header name (a string)")
	}
	name := textnum.TrimSpace(s)
	if name == "" || name[0] == ':' || !validHeaderName(name) {
		return "", errf(field, "%q is not an HTTP header name", s)
	}
	return lowerASCII(name), nil
}

// onStatus reads the list of charged statuses: distinct HTTP statuses.
func onStatus(field string, raw *jsonlite.Value) ([]uint32, error) {
	if raw.Kind != jsonlite.Array {
		return nil, errf(field, "must be a list of HTTP statuses, like [401, 403]")
	}
	if len(raw.Elems) == 0 {
		return nil, errf(field, "must not be empty (omit it to charge every status)")
	}
	out := make([]uint32, 0, len(raw.Elems))
	for i := range raw.Elems {
		f := sprintf.Sprintf("%s[%d]", field, i)
		n, err := integer(f, &raw.Elems[i])
		if err != nil {
			return nil, err
		}
		if n < 100 || n > 599 {
			return nil, errf(f, "%d is not an HTTP status (100..599)", n)
		}
		for j, s := range out {
			if s == uint32(n) {
				return nil, errf(f, "%d is listed twice (also on_status[%d])", n, j)
			}
		}
		out = append(out, uint32(n))
	}
	return out, nil
}

// NeverPasses returns, for a rule charged at admission (cost.request_header)
// whose cost.max is over what the rule holds, that capacity: requests
// declaring more than it are always refused. It returns 0 otherwise.
func (r *Rule) NeverPasses() int64 {
	if r.Cost.RequestHeader == "" {
		return 0
	}
	capacity := r.Limit.Burst()
	if r.Limit.Algorithm() != limit.TokenBucket {
		capacity = r.Limit.Limit()
	}
	if r.Cost.Max > capacity {
		return capacity
	}
	return 0
}
