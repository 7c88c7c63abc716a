package engine

import (
	"github.com/sluicehq/sluice/plugin/config"
)

// Decision is what happened to a request, as the access log tells it
// (the plugin's sluice_decision property).
type Decision uint8

const (
	Allowed        Decision = iota // forwarded, no rule objected
	Rejected                       // refused by a rule
	Delayed                        // held (max_delay or a concurrency queue), then forwarded
	ShadowRejected                 // forwarded; a shadow rule would have refused it
	OnErrorAllowed                 // state or the service failed, on_error: allow let it through
	OnErrorDenied                  // state or the service failed, on_error: deny refused it
	undecided
)

var decisionWords = [...]string{
	Allowed:        "allowed",
	Rejected:       "rejected",
	Delayed:        "delayed",
	ShadowRejected: "shadow_rejected",
	OnErrorAllowed: "on_error_allowed",
	OnErrorDenied:  "on_error_denied",
}

// String is the decision's word in the access log.
func (d Decision) String() string {
	if int(d) < len(decisionWords) {
		return decisionWords[d]
	}
	return ""
}

// maxViolated bounds the rules a verdict names as having refused its
// request (the problem body's violated-policies): the first ones in
// configuration order. A fixed array keeps a Verdict free of pointers
// into the engine's buffers and of garbage.
const maxViolated = 16

// violatedSet is the rules (configuration indices, ascending) that refused
// a request, at most maxViolated of them.
type violatedSet struct {
	_   [0]func() // not comparable: no equality function in the module
	n   uint8
	idx [maxViolated]uint16
}

// violate records that rule i refused the request.
func (v *Verdict) violate(i int) {
	s := &v.Violated
	if i < 0 || i > 0xffff {
		return
	}
	if s.n == 0 {
		s.idx[0], s.n = uint16(i), 1 // the first: most refusals name one rule
		return
	}
	k := int(s.n)
	for k > 0 && int(s.idx[k-1]) >= i {
		if int(s.idx[k-1]) == i {
			return
		}
		k--
	}
	if int(s.n) == maxViolated {
		if k == maxViolated {
			return // later than every rule kept
		}
		s.n-- // drop the last, keep the first ones
	}
	copy(s.idx[k+1:s.n+1], s.idx[k:s.n])
	s.idx[k] = uint16(i)
	s.n++
}

// Violations is the rules that refused a request (Verdict.Violated) as a
// value to keep and compare: the plugin sends the last rejection's body
// again while the rules it names are the same. Compared with
// Verdict.ViolatedAs (not comparable: no equality function in the module).
type Violations struct {
	_   [0]func()
	set violatedSet
}

// Violations returns the rules that refused v.
func (v *Verdict) Violations() Violations { return Violations{set: v.Violated} }

// ViolatedAs reports whether the rules that refused v are those a names.
func (v *Verdict) ViolatedAs(a *Violations) bool { return v.Violated.equal(&a.set) }

func (s *violatedSet) equal(o *violatedSet) bool {
	n := s.n
	switch {
	case n != o.n:
		return false
	case n == 0:
		return true
	case s.idx[0] != o.idx[0]:
		return false // most refusals name one rule: no loop for them
	}
	for i := uint8(1); i < n; i++ {
		if s.idx[i] != o.idx[i] {
			return false
		}
	}
	return true
}

// Refuser is the rule that refused a rejected request: the first rule (in
// configuration order) that refused it, else the rule the headers report.
func (v *Verdict) Refuser(cfg *config.Config) *config.Rule {
	if v.Violated.n > 0 {
		if i := int(v.Violated.idx[0]); i < len(cfg.Rules) {
			return &cfg.Rules[i]
		}
	}
	return v.Report
}

// ViolatedNames appends the names of the rules that refused v, in
// configuration order (the problem body's violated-policies), or for a
// rejection that does not say, the reported rule's.
func (v *Verdict) ViolatedNames(cfg *config.Config, dst []string) []string {
	for _, i := range v.Violated.idx[:v.Violated.n] {
		if int(i) < len(cfg.Rules) {
			dst = append(dst, cfg.Rules[i].Name)
		}
	}
	if len(dst) == 0 && v.Outcome == Reject && v.Report != nil {
		dst = append(dst, v.Report.Name)
	}
	return dst
}

// Decision says what happened to v's request and which rule made it
// happen (nil for Allowed, and when no rule is to name). ok is false while
// the request is still undecided (Outcome Call or Queue).
func (v *Verdict) Decision(cfg *config.Config) (d Decision, rule *config.Rule, ok bool) {
	switch {
	case v.Outcome == Call || v.Outcome == Queue:
		return undecided, nil, false
	case v.Outcome == Reject:
		r := v.Refuser(cfg)
		if v.Err != nil && v.ErrRule != nil && v.ErrRule == r {
			return OnErrorDenied, r, true
		}
		return Rejected, r, true
	case v.Err != nil:
		return OnErrorAllowed, v.ErrRule, true
	case v.Outcome == Delay || v.Delayer != nil:
		if v.Delayer != nil {
			return Delayed, v.Delayer, true
		}
		return Delayed, v.Report, true
	case v.Shadow != nil:
		return ShadowRejected, v.Shadow, true
	}
	return Allowed, nil, true
}
