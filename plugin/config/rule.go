// Rule parsing: one rule's fields, in the phases parseRule runs.

package config

import (
	"strings"
	"time"

	"github.com/sluicehq/sluice/plugin/internal/jsonlite"
	"github.com/sluicehq/sluice/plugin/internal/sprintf"
	"github.com/sluicehq/sluice/plugin/internal/textnum"
	"github.com/sluicehq/sluice/shared/limit"
)

// parseRule reads one rule in phases: what it is (scope, name, match, key,
// algorithm, limit), then how it counts (a concurrency rule, or a rate's
// window, burst and max_delay), then shadow and its identity.
func parseRule(field string, raw *jsonlite.Value) (Rule, error) {
	var r Rule
	m, err := object(field, raw, nil)
	if err != nil {
		return r, err
	}
	if err := known(field, m, "name", "match", "key", "algorithm", "limit", "window", "burst", "max_delay", "shadow", "scope", "min_limit", "max_limit", "cost", "max_keys", "classes"); err != nil {
		return r, err
	}
	f := fields{path: field, m: m}
	if err := ruleIdentity(f, &r); err != nil {
		return r, err
	}
	alg, err := ruleAlgorithm(f, r.Global)
	if err != nil {
		return r, err
	}
	if m.Has("cost") && !costAlgorithm(alg) {
		return r, errf(field+".cost", "not with %s: a cost applies to token_bucket, fixed_window, sliding_window and global rules (rates in units)", alg)
	}
	if raw := m.Get("classes"); raw != nil {
		if alg != limit.Concurrency && alg != limit.AdaptiveConcurrency {
			return r, errf(field+".classes", "not with %s: classes divide the slots of a concurrency or adaptive_concurrency rule", alg)
		}
		if r.Classes, err = parseClasses(field+".classes", raw, r.Match.IgnoreCase); err != nil {
			return r, err
		}
	}
	if alg == limit.AdaptiveConcurrency {
		return parseAdaptive(f, r)
	}
	for _, k := range []string{"min_limit", "max_limit"} {
		if m.Has(k) {
			return r, errf(f.name(k), "applies to adaptive_concurrency only (the other algorithms take limit)")
		}
	}
	if !m.Has("limit") {
		return r, errf(field+".limit", "required (requests per window, > 0)")
	}
	lim, _, err := f.count("limit")
	if err != nil {
		return r, err
	}
	if alg == limit.Concurrency {
		return parseConcurrency(f, r, lim)
	}
	return parseRate(f, r, alg, lim)
}

// parseRate finishes a rule that limits a rate (token_bucket,
// fixed_window, sliding_window, leaky_bucket; a global rule's
// fixed_window): limit requests per window, with its burst, max_delay,
// shadow and cost. The cost is read last, once the rule's limit is known.
func parseRate(f fields, r Rule, alg limit.Algorithm, lim int64) (Rule, error) {
	window, burst, err := ruleRate(f, alg, r.Global)
	if err != nil {
		return r, err
	}
	if r.MaxDelay, err = f.maxDelay(); err != nil {
		return r, err
	}
	if r.MaxDelay > 0 && alg == limit.SlidingWindow {
		return r, errf(f.path+".max_delay", "sliding_window cannot schedule future admissions; use token_bucket, leaky_bucket or fixed_window to throttle")
	}
	if err := f.flag("shadow", &r.Shadow); err != nil {
		return r, err
	}
	r.Limit, err = limit.New(alg, lim, window, burst)
	if err != nil {
		return r, errf(f.path+".window", "%v", err)
	}
	if raw := f.m.Get("cost"); raw != nil {
		if r.Cost, err = parseCost(f.path+".cost", raw, &r); err != nil {
			return r, err
		}
	}
	r.ID = ruleID(&r)
	return r, nil
}

// ruleIdentity reads what a rule applies to: scope (a global rule refuses
// what the rate-limit service cannot honour), name, match and key.
func ruleIdentity(f fields, r *Rule) error {
	if s, ok, err := f.oneOf("scope", "must be \"local\" or \"global\"", "local", "global"); err != nil {
		return err
	} else if ok {
		r.Global = s == "global"
	}
	if r.Global {
		// The service counts in fixed windows of one unit, and a call per
		// held request would defeat leasing: refuse what cannot be honoured.
		for _, k := range []string{"burst", "max_delay", "shadow"} {
			if f.m.Has(k) {
				return errf(f.name(k), "not allowed on a global rule (it counts in the rate-limit service's fixed windows)")
			}
		}
	}
	if !f.m.Has("name") {
		return errf(f.name("name"), "required")
	}
	if _, err := f.text("name", &r.Name); err != nil {
		return err
	}
	if !validName(r.Name) {
		return errf(f.name("name"), "%q must match [a-z0-9_-]+ (at most 64 characters)", r.Name)
	}
	if raw := f.m.Get("match"); raw != nil {
		if err := parseMatch(f.name("match"), raw, &r.Match); err != nil {
			return err
		}
	}
	if n, ok, err := f.whole("max_keys", MinMaxKeys, 100_000_000, "%d is out of range %d..100000000 (the rule's share of the state table: at least one bucket and its overflow state)", MinMaxKeys); err != nil {
		return err
	} else if ok {
		r.MaxKeys = int(n)
	}
	r.Key = []KeyPart{{Kind: KeyClientIP}}
	if raw := f.m.Get("key"); raw != nil {
		var parts []string
		if err := strs(raw, &parts); err != nil {
			return errf(f.name("key"), "must be a list of strings")
		}
		// An empty list is the rule-wide key: one budget shared by every
		// request the rule matches (the absent key stays client_ip).
		r.Key = r.Key[:0]
		for i, p := range parts {
			kp, err := parseKeyPart(sprintf.Sprintf("%s.key[%d]", f.path, i), p)
			if err != nil {
				return err
			}
			r.Key = append(r.Key, kp)
		}
	}
	return nil
}

// ruleAlgorithm reads the algorithm (token_bucket by default; a global
// rule's is fixed_window).
func ruleAlgorithm(f fields, global bool) (limit.Algorithm, error) {
	alg := limit.TokenBucket
	var s string
	if ok, err := f.text("algorithm", &s); err != nil {
		return alg, err
	} else if ok {
		a, ok := limit.ParseAlgorithm(s)
		if !ok {
			return alg, errf(f.name("algorithm"), "%q is not one of token_bucket, fixed_window, sliding_window, leaky_bucket, concurrency, adaptive_concurrency", s)
		}
		alg = a
		if global && a != limit.FixedWindow {
			return alg, errf(f.name("algorithm"), "a global rule counts in the rate-limit service's fixed windows: omit algorithm or write fixed_window, not %q", s)
		}
	}
	if global {
		alg = limit.FixedWindow
	}
	return alg, nil
}

// ruleRate reads a rate's window and burst.
func ruleRate(f fields, alg limit.Algorithm, global bool) (window time.Duration, burst int64, err error) {
	wraw := f.m.Get("window")
	if wraw == nil {
		return 0, 0, errf(f.name("window"), "required (a duration like \"1s\", \"1m\", \"250ms\")")
	}
	if global {
		window, err = globalWindow(f.name("window"), wraw)
	} else {
		window, err = duration(f.name("window"), wraw)
	}
	if err != nil {
		return 0, 0, err
	}
	if window <= 0 {
		return 0, 0, errf(f.name("window"), "must be > 0, got %s", window)
	}
	burst, ok, err := f.count("burst")
	if err != nil {
		return 0, 0, err
	}
	if ok && (alg == limit.FixedWindow || alg == limit.SlidingWindow) {
		return 0, 0, errf(f.name("burst"), "applies to token_bucket and leaky_bucket only (a %s admits limit per window)", alg)
	}
	return window, burst, nil
}

// parseConcurrency finishes a concurrency rule: limit is the number of
// requests in flight at once, so there is no window (and no burst); a
// window would suggest a rate that the rule does not enforce, so it is
// refused rather than ignored.
func parseConcurrency(f fields, r Rule, lim int64) (Rule, error) {
	var err error
	if lim > limit.MaxConcurrency {
		return r, errf(f.name("limit"), "must be <= %d requests in flight for concurrency, got %d", limit.MaxConcurrency, lim)
	}
	if f.m.Has("window") {
		return r, errf(f.name("window"), "not allowed with concurrency: the rule limits requests in flight at once (limit), not requests per window; remove window")
	}
	if f.m.Has("burst") {
		return r, errf(f.name("burst"), "not allowed with concurrency: limit is the number of requests in flight at once")
	}
	if r.MaxDelay, err = f.maxDelay(); err != nil {
		return r, err
	}
	if err := f.flag("shadow", &r.Shadow); err != nil {
		return r, err
	}
	if r.Limit, err = limit.NewConcurrency(lim); err != nil {
		return r, errf(f.name("limit"), "%v", err)
	}
	r.ID = ruleID(&r)
	return r, nil
}

// parseAdaptive finishes an adaptive_concurrency rule: nobody sets its
// limit, so limit, window and burst are refused (each would suggest a
// number the rule does not enforce); min_limit and max_limit bound what it
// learns.
func parseAdaptive(f fields, r Rule) (Rule, error) {
	for _, k := range []string{"limit", "window", "burst"} {
		if f.m.Has(k) {
			return r, errf(f.name(k), "not allowed with adaptive_concurrency: the rule learns how many requests may be in flight from the upstream's latency; bound it with min_limit and max_limit instead")
		}
	}
	bounds := [2]int64{1, 1000}
	for i, k := range []string{"min_limit", "max_limit"} {
		n, ok, err := f.whole(k, 1, limit.MaxConcurrency, "%d is out of range 1..%d requests in flight", limit.MaxConcurrency)
		if err != nil {
			return r, err
		}
		if ok {
			bounds[i] = n
		}
	}
	if bounds[0] > bounds[1] {
		if !f.m.Has("max_limit") {
			return r, errf(f.name("min_limit"), "%d is over the default max_limit 1000: set max_limit too", bounds[0])
		}
		return r, errf(f.name("max_limit"), "must be >= min_limit (%d), got %d", bounds[0], bounds[1])
	}
	var err error
	if r.MaxDelay, err = f.maxDelay(); err != nil {
		return r, err
	}
	if err := f.flag("shadow", &r.Shadow); err != nil {
		return r, err
	}
	if r.Limit, err = limit.NewAdaptive(bounds[0], bounds[1]); err != nil {
		return r, errf(f.name("max_limit"), "%v", err)
	}
	r.ID = ruleID(&r)
	return r, nil
}

func parseKeyPart(field, s string) (KeyPart, error) {
	switch s {
	case "client_ip":
		return KeyPart{Kind: KeyClientIP}, nil
	case "path":
		return KeyPart{Kind: KeyPath}, nil
	case "method":
		return KeyPart{Kind: KeyMethod}, nil
	}
	if name, ok := strings.CutPrefix(s, "header:"); ok {
		name = textnum.TrimSpace(name)
		if name == "" || name == ":" || !validHeaderName(name) {
			return KeyPart{}, errf(field, "%q: header name is empty or not a valid HTTP header name", s)
		}
		return KeyPart{Kind: KeyHeader, Header: lowerASCII(name)}, nil
	}
	return KeyPart{}, errf(field, "%q is not one of client_ip, path, method, header:<name>", s)
}

func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func validHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			// ':' is allowed only as a pseudo-header prefix.
			if !(c == ':' && i == 0) {
				return false
			}
		}
	}
	return true
}
