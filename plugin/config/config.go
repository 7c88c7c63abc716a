// Package config parses and validates the Sluice plugin configuration: the
// JSON document of the Envoy wasm filter's `configuration` field.
//
// Parsing is strict: unknown fields, wrong types, bad durations and
// duplicate names are errors, and every error names the field it is about
// (`rules[1].window: ...`), because the plugin refuses to start on an
// invalid configuration and the operator must be able to fix it from one log
// line.
package config

import (
	"bytes"
	"hash/fnv"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/plugin/internal/ipaddr"
	"github.com/sluicehq/sluice/plugin/internal/jsonlite"
	"github.com/sluicehq/sluice/plugin/internal/sprintf"
	"github.com/sluicehq/sluice/sdk/header"
	"github.com/sluicehq/sluice/shared/limit"
)

// Config is a validated plugin configuration.
type Config struct {
	Rules    []Rule
	ClientIP ClientIP
	// Exempt lists client ranges that are never limited.
	Exempt []ipaddr.Prefix
	// Headers selects the rate-limit header families on responses.
	Headers header.Mode
	// Status is the HTTP status of a rejection (default 429).
	Status uint32
	// MaxKeys bounds the number of client states kept in shared data.
	MaxKeys int
	// OnErrorDeny rejects requests when shared data cannot be used, or the
	// rate-limit service of global rules cannot answer in time; the default
	// (false, "allow") lets them through.
	OnErrorDeny bool
	// TextBody answers a rejection with a short text/plain body instead of
	// the problem+json document ("body": "text").
	TextBody bool
	// Global is the rate-limit service of global rules (nil when the
	// configuration has no "global" object).
	Global *Global
	// Index finds the rules that may match a request (built by Parse; a
	// Config built otherwise gets one from BuildIndex).
	Index *Index
	// OtherMetrics: rule_metrics leaves some rules without metrics of
	// their own (Rule.NoMetrics); they are counted together.
	OtherMetrics bool
	// Pool is the part of max_keys that a configuration of more than
	// PoolFrom rules keeps as a spill pool (0 otherwise): a rule without
	// its own max_keys whose share is full keeps new clients' states
	// there (see shareTable).
	Pool int
}

// Global names the rate-limit service that keeps the budgets of global
// rules (Envoy's rate-limit API, e.g. envoyproxy/ratelimit on Redis).
type Global struct {
	// Cluster is the Envoy cluster (HTTP/2) of the service.
	Cluster string
	// Domain is the service's domain; its configuration must declare it.
	Domain string
	// Timeout bounds each call; a request never waits longer for it.
	Timeout time.Duration
}

// Global defaults and bounds.
const (
	DefaultDomain        = "sluice"
	DefaultGlobalTimeout = 50 * time.Millisecond
	MaxGlobalTimeout     = 10 * time.Second
)

// HasGlobal reports whether a rule is global.
func (c *Config) HasGlobal() bool {
	for i := range c.Rules {
		if c.Rules[i].Global {
			return true
		}
	}
	return false
}

// ClientIP says how the client address is found.
type ClientIP struct {
	// XFFTrustedHops > 0 takes the N-th address from the right of
	// X-Forwarded-For as it reaches the filter (every entry counted)
	// instead of the connection's source address.
	XFFTrustedHops int
	// IPv6Prefix groups IPv6 clients by this many leading bits.
	IPv6Prefix int
}

// Rule is one validated rate-limit rule.
type Rule struct {
	Name  string
	Match Match
	Key   []KeyPart
	Limit limit.Limit
	// MaxDelay is the longest a request may be held instead of rejected.
	MaxDelay time.Duration
	// Shadow rules count and report but never reject or delay.
	Shadow bool
	// MaxKeys is the rule's own max_keys (0: not set); Share is the number
	// of client states the rule may keep, its part of the top-level
	// max_keys (see shareTable).
	MaxKeys int
	Share   int
	// Global rules ("scope": "global") count in the rate-limit service's
	// fixed windows, one budget across the fleet; Window is then 1s, 1m,
	// 1h or 24h and the algorithm fixed_window.
	Global bool
	// Cost is what the rule charges a request (the zero Cost: one unit
	// at admission); see cost.go.
	Cost Cost
	// NoMetrics: rule_metrics does not list the rule, so its decisions
	// are counted with the other unlisted rules', not in metrics of its
	// own.
	NoMetrics bool
	// ID identifies the rule's semantics: two rules with the same ID count
	// the same way, so client state survives a configuration update that
	// leaves the rule unchanged, and a changed rule starts clean.
	ID uint64
	// Classes are a concurrency rule's priority classes, highest first;
	// requests none selects are in the implicit default class (classes.go).
	Classes []Class
}

// KeyKind is one part of a client key.
type KeyKind uint8

const (
	KeyClientIP KeyKind = iota
	KeyPath
	KeyMethod
	KeyHeader
)

// KeyPart is one element of a rule's key.
type KeyPart struct {
	Kind   KeyKind
	Header string // lower-case header name for KeyHeader
}

// Defaults.
const (
	DefaultMaxKeys = 100000
	// MinMaxKeys is the smallest max_keys: one bucket of the state table
	// (8 client slots and an overflow slot).
	MinMaxKeys        = 9
	DefaultStatus     = 429
	DefaultIPv6Prefix = 64
	// maxCount is the largest limit or burst (states count in 32 bits).
	maxCount = 1<<32 - 1
	// MaxRules bounds the rules of one configuration. A request costs
	// what the rules that match it cost (the Index finds them without a
	// scan); what grows with the rules is start-up (parsing, one region
	// and its layout record per rule, the per-rule metrics: see
	// rule_metrics) and each rule's share of max_keys.
	MaxRules = 2048
)

// FieldError is a configuration error about one field.
type FieldError struct {
	Field string // e.g. "rules[1].window"
	Msg   string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

func errf(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: sprintf.Sprintf(format, args...)}
}

// Parse parses and validates a configuration document. An empty document
// is an error: a rate limiter without rules is a misconfiguration.
func Parse(doc []byte) (*Config, error) {
	top, err := decode(doc)
	if err != nil {
		return nil, err
	}
	if err := known("", top, "rules", "client_ip", "exempt_cidrs", "headers", "status", "max_keys", "on_error", "global", "body", "rule_metrics"); err != nil {
		return nil, err
	}
	c := &Config{
		Headers:  header.Both,
		Status:   DefaultStatus,
		MaxKeys:  DefaultMaxKeys,
		ClientIP: ClientIP{IPv6Prefix: DefaultIPv6Prefix},
	}
	if c.Rules, err = parseRules(top.Get("rules")); err != nil {
		return nil, err
	}
	if err := parseTop(fields{m: top}, c); err != nil {
		return nil, err
	}
	if err := shareTable(c); err != nil {
		return nil, err
	}
	c.Index = BuildIndex(c)
	if c.Global == nil {
		for i := range c.Rules {
			if c.Rules[i].Global {
				return nil, errf("global", "required: rules[%d] has scope global, so the rate-limit service must be named ({\"cluster\": ..., \"domain\": ..., \"timeout\": ...})", i)
			}
		}
	}
	return c, nil
}

// decode reads the document as JSON, or as a google.protobuf.Struct in its
// wire encoding, and checks that it is an object.
func decode(doc []byte) (*jsonlite.Value, error) {
	raw := doc
	doc = bytes.TrimSpace(doc)
	if len(doc) == 0 {
		return nil, errf("", "configuration is empty: at least one rule is required (\"rules\")")
	}
	v, err := jsonlite.Decode(doc)
	if err != nil {
		// Not JSON: a google.protobuf.Struct configuration arrives in its
		// wire encoding. That begins with 0x0a (the tag of its one field)
		// and a length, which TrimSpace may take for white space (hence
		// raw), and a length of 91 or 123 reads as '[' or '{': a document
		// that looks like JSON is read as a Struct only if it has rules or
		// holds the tag of a field entry's value (0x12), a control byte
		// that JSON text never holds.
		if sv, serr := structToValue(raw); serr == nil && (doc[0] != '{' && doc[0] != '[' || sv.Has("rules") || bytes.IndexByte(raw, 0x12) >= 0) {
			v, err = sv, nil
		}
	}
	return object("", &v, err)
}

// parseRules reads the rules: at least one, at most MaxRules, unique names.
func parseRules(rv *jsonlite.Value) ([]Rule, error) {
	if rv == nil {
		return nil, errf("rules", "required: at least one rule")
	}
	if rv.Kind != jsonlite.Array {
		return nil, errf("rules", "must be a list of rules")
	}
	raws := rv.Elems
	if len(raws) == 0 {
		return nil, errf("rules", "at least one rule is required")
	}
	if len(raws) > MaxRules {
		return nil, errf("rules", "at most %d rules, got %d", MaxRules, len(raws))
	}
	var rules []Rule
	seen := map[string]int{}
	for i := range raws {
		field := sprintf.Sprintf("rules[%d]", i)
		rule, err := parseRule(field, &raws[i])
		if err != nil {
			return nil, err
		}
		if j, dup := seen[rule.Name]; dup {
			return nil, errf(field+".name", "duplicate rule name %q (also rules[%d])", rule.Name, j)
		}
		seen[rule.Name] = i
		rules = append(rules, rule)
	}
	return rules, nil
}

// parseTop reads the top-level settings other than the rules.
func parseTop(f fields, c *Config) error {
	if raw := f.m.Get("client_ip"); raw != nil {
		if err := parseClientIP(raw, &c.ClientIP); err != nil {
			return err
		}
	}
	if raw := f.m.Get("exempt_cidrs"); raw != nil {
		var err error
		if c.Exempt, err = parseExempt(raw); err != nil {
			return err
		}
	}
	if raw := f.m.Get("headers"); raw != nil {
		s, ok := raw.Str()
		if !ok {
			return errf("headers", "must be a string: legacy, draft, both or none")
		}
		m, ok := header.ParseMode(s)
		if !ok || s == "" {
			return errf("headers", "%q is not one of legacy, draft, both, none", s)
		}
		c.Headers = m
	}
	if n, ok, err := f.whole("status", 400, 599, "%d is not an HTTP error status (400..599)"); err != nil {
		return err
	} else if ok {
		c.Status = uint32(n)
	}
	if n, ok, err := f.whole("max_keys", MinMaxKeys, 100_000_000, "%d is out of range %d..100000000 (the state table's smallest unit holds %d states)", MinMaxKeys, MinMaxKeys); err != nil {
		return err
	} else if ok {
		c.MaxKeys = int(n)
	}
	if s, ok, err := f.oneOf("on_error", "must be \"allow\" or \"deny\"", "allow", "deny"); err != nil {
		return err
	} else if ok {
		c.OnErrorDeny = s == "deny"
	}
	if s, ok, err := f.oneOf("body", "must be \"problem+json\" (the default) or \"text\"", "problem+json", "text"); err != nil {
		return err
	} else if ok {
		c.TextBody = s == "text"
	}
	if raw := f.m.Get("rule_metrics"); raw != nil {
		if err := parseRuleMetrics(raw, c); err != nil {
			return err
		}
	}
	if raw := f.m.Get("global"); raw != nil {
		g, err := parseGlobal(raw)
		if err != nil {
			return err
		}
		c.Global = g
	}
	return nil
}

// parseRuleMetrics reads rule_metrics: the names of the rules that keep
// metrics of their own (sluice.rule.<name>.*); the others are counted
// together (sluice.rules_other.*). Absent: every rule has its own.
func parseRuleMetrics(raw *jsonlite.Value, c *Config) error {
	var names []string
	if err := strs(raw, &names); err != nil {
		return errf("rule_metrics", "must be a list of rule names (the rules that keep metrics of their own)")
	}
	byName := make(map[string]int, len(c.Rules))
	for i := range c.Rules {
		byName[c.Rules[i].Name] = i
		c.Rules[i].NoMetrics = true
	}
	for k, n := range names {
		i, ok := byName[n]
		if !ok {
			return errf(sprintf.Sprintf("rule_metrics[%d]", k), "no rule is named %q", n)
		}
		c.Rules[i].NoMetrics = false
	}
	for i := range c.Rules {
		c.OtherMetrics = c.OtherMetrics || c.Rules[i].NoMetrics
	}
	return nil
}

// parseExempt reads exempt_cidrs: CIDRs or single addresses.
func parseExempt(raw *jsonlite.Value) ([]ipaddr.Prefix, error) {
	list, ok := raw.Strings()
	if !ok {
		return nil, errf("exempt_cidrs", "must be a list of CIDR strings")
	}
	var exempt []ipaddr.Prefix
	for i, s := range list {
		if strings.ContainsRune(s, '%') {
			return nil, errf(sprintf.Sprintf("exempt_cidrs[%d]", i), "%q: IPv6 zones are not allowed in a CIDR", s)
		}
		p, ok := ipaddr.ParsePrefix(strings.TrimSpace(s))
		if !ok {
			a, aok := ipaddr.ParseAddr(strings.TrimSpace(s))
			if !aok {
				return nil, errf(sprintf.Sprintf("exempt_cidrs[%d]", i), "%q is not a CIDR (like 10.0.0.0/8 or 2001:db8::/32)", s)
			}
			p = ipaddr.PrefixFrom(a, a.BitLen())
		}
		// Client addresses are compared unmapped (::ffff:10.1.2.3 is
		// 10.1.2.3), so an IPv4-mapped range is its IPv4 range:
		// ::ffff:10.0.0.0/104 exempts 10.0.0.0/8.
		if a := p.Addr(); a.Unmap().Is4() && a.Is6() && p.Bits() >= 96 {
			p = ipaddr.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		exempt = append(exempt, p.Masked())
	}
	return exempt, nil
}

func parseGlobal(raw *jsonlite.Value) (*Global, error) {
	m, err := object("global", raw, nil)
	if err != nil {
		return nil, err
	}
	if err := known("global", m, "cluster", "domain", "timeout"); err != nil {
		return nil, err
	}
	f := fields{path: "global", m: m}
	g := &Global{Domain: DefaultDomain, Timeout: DefaultGlobalTimeout}
	if !m.Has("cluster") {
		return nil, errf("global.cluster", "required: the Envoy cluster (HTTP/2) of the rate-limit service")
	}
	if _, err := f.text("cluster", &g.Cluster); err != nil {
		return nil, err
	}
	if !serviceName(g.Cluster) {
		return nil, errf("global.cluster", "%q is not a cluster name (non-empty, at most 200 characters, no control characters, no surrounding white space)", g.Cluster)
	}
	if ok, err := f.text("domain", &g.Domain); err != nil {
		return nil, err
	} else if ok && !serviceName(g.Domain) {
		return nil, errf("global.domain", "%q is not a domain (non-empty, at most 200 characters, no control characters, no surrounding white space)", g.Domain)
	}
	if raw := m.Get("timeout"); raw != nil {
		if g.Timeout, err = duration("global.timeout", raw); err != nil {
			return nil, err
		}
		if g.Timeout < time.Millisecond || g.Timeout > MaxGlobalTimeout {
			return nil, errf("global.timeout", "%s is out of range 1ms..10s (a request waits at most this long for the service)", g.Timeout)
		}
	}
	return g, nil
}

// serviceName reports whether s can be global.cluster or global.domain:
// 1 to 200 characters (as schema.json's maxLength counts them), none of
// them a control character (no Envoy cluster name or rate-limit domain
// has one), and no white space at either end.
func serviceName(s string) bool {
	n := utf8.RuneCountInString(s)
	return n > 0 && n <= 200 && strings.TrimSpace(s) == s && strings.IndexFunc(s, unicode.IsControl) < 0
}

func parseClientIP(raw *jsonlite.Value, ci *ClientIP) error {
	m, err := object("client_ip", raw, nil)
	if err != nil {
		return err
	}
	if err := known("client_ip", m, "xff_trusted_hops", "ipv6_prefix"); err != nil {
		return err
	}
	f := fields{path: "client_ip", m: m}
	if n, ok, err := f.whole("xff_trusted_hops", 0, 64, "%d is out of range 0..64"); err != nil {
		return err
	} else if ok {
		ci.XFFTrustedHops = int(n)
	}
	if n, ok, err := f.whole("ipv6_prefix", 1, 128, "%d is out of range 1..128"); err != nil {
		return err
	} else if ok {
		ci.IPv6Prefix = int(n)
	}
	return nil
}

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
		name = strings.TrimSpace(name)
		if name == "" || name == ":" || !validHeaderName(name) {
			return KeyPart{}, errf(field, "%q: header name is empty or not a valid HTTP header name", s)
		}
		return KeyPart{Kind: KeyHeader, Header: strings.ToLower(name)}, nil
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

// ruleID hashes everything that changes how a rule counts. The name is
// included: renaming a rule is a new rule.
//
// The text hashed is the one fmt.Fprintf wrote before the plugin dropped
// fmt (TestRuleIDUnchanged), so that IDs, and the client state they keep,
// survive an upgrade.
func ruleID(r *Rule) uint64 {
	h := fnv.New64a()
	h.Write([]byte(sprintf.Sprintf("%s|%t|%s|%q|%q|%v|", r.Name, r.Global, r.Limit.Algorithm(), r.Match.PathPrefix, r.Match.PathExact, r.Match.Methods)))
	for _, k := range r.Key {
		h.Write([]byte(sprintf.Sprintf("%d:%s,", int(k.Kind), k.Header)))
	}
	h.Write([]byte(sprintf.Sprintf("|%d|%d|%d", r.Limit.Limit(), r.Limit.Window(), r.Limit.Burst())))
	// Like the cost, what a rule could not say before is hashed only when
	// set, so that the IDs of rules without it are kept.
	if r.Match.IgnoreCase {
		h.Write([]byte("|ci"))
	}
	for _, rt := range r.Match.Routes {
		h.Write([]byte(sprintf.Sprintf("|route|%q", rt)))
	}
	hashClasses(h, r)
	if c := &r.Cost; c.Set() {
		// Only rules with a cost hash it: the IDs of the others are kept.
		h.Write([]byte(sprintf.Sprintf("|cost|%s|%s|%d", c.RequestHeader, c.ResponseHeader, c.Max)))
		for _, s := range c.OnStatus {
			h.Write([]byte(sprintf.Sprintf(",%d", int(s))))
		}
	}
	return h.Sum64()
}

// globalWindow accepts the windows of the rate-limit service, spelt "1s",
// "1m", "1h" or "1d" (white space around allowed): one unit of its
// counters. Equivalent spellings ("60s") are refused so that the schema can
// say exactly what is accepted.
func globalWindow(field string, raw *jsonlite.Value) (time.Duration, error) {
	var s string
	if err := str(raw, &s); err != nil {
		return 0, errf(field, "must be one of \"1s\", \"1m\", \"1h\", \"1d\" (a global rule counts in the rate-limit service's fixed windows)")
	}
	switch strings.TrimSpace(s) {
	case "1s":
		return time.Second, nil
	case "1m":
		return time.Minute, nil
	case "1h":
		return time.Hour, nil
	case "1d":
		return 24 * time.Hour, nil
	}
	return 0, errf(field, "%q: a global rule counts in the rate-limit service's fixed windows: \"1s\", \"1m\", \"1h\" or \"1d\"", s)
}

// object checks that raw, the result of decoding with err, is a JSON
// object. A syntax error is reported with encoding/json's wording and
// offset, as before the plugin had its own decoder.
func object(field string, raw *jsonlite.Value, err error) (*jsonlite.Value, error) {
	if err == nil && raw.Kind == jsonlite.Object {
		return raw, nil
	}
	what := field
	if what == "" {
		what = "configuration"
	}
	if se, ok := err.(*jsonlite.SyntaxError); ok {
		return nil, errf(field, "%s is not valid JSON: %s (at byte %d)", what, se.Msg, se.Offset)
	}
	if err != nil { // cut short, or more after the value
		return nil, errf(field, "%s is not valid JSON: %v", what, err)
	}
	return nil, errf(field, "%s must be a JSON object", what)
}

// known reports the first field of m (in sorted order) that is not allowed.
func known(field string, m *jsonlite.Value, allowed ...string) error {
	var unknown []string
	for _, k := range m.Keys() {
		ok := false
		for _, a := range allowed {
			if k == a {
				ok = true
				break
			}
		}
		if !ok {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	// The first in sorted order (without package sort, which would add
	// code to the module for this one use).
	name := unknown[0]
	for _, k := range unknown[1:] {
		if k < name {
			name = k
		}
	}
	// The key is the document's: one that would not print as itself (a
	// newline, other control characters) is quoted, so that the error
	// stays the one line of a log entry.
	for _, r := range name {
		if !strconv.IsPrint(r) {
			name = strconv.Quote(name)
			break
		}
	}
	if field != "" {
		name = field + "." + name
	}
	return errf(name, "unknown field (known: %s)", strings.Join(allowed, ", "))
}

// errType is a value of the wrong JSON type (the callers name the field and
// the type expected).
var errType = &FieldError{Msg: "wrong type"}

// str reads a JSON string into dst.
func str(raw *jsonlite.Value, dst *string) error {
	s, ok := raw.Str()
	if !ok {
		return errType
	}
	*dst = s
	return nil
}

// strs reads a list of strings into dst (a null element is "", as
// encoding/json has it).
func strs(raw *jsonlite.Value, dst *[]string) error {
	l, ok := raw.Strings()
	if !ok {
		return errType
	}
	*dst = l
	return nil
}

// boolean reads true or false into dst.
func boolean(raw *jsonlite.Value, dst *bool) error {
	b, ok := raw.Bool()
	if !ok {
		return errType
	}
	*dst = b
	return nil
}

// integer accepts JSON numbers that are whole (Envoy's Struct form turns
// every number into a double, so 10.0 is 10, and 4.29e2 is 429). Whether a
// number is whole is judged on its literal, as JSON Schema's "integer"
// does: 1.00000000000000001 is not, though it rounds to the float64 1.
func integer(field string, raw *jsonlite.Value) (int64, error) {
	if raw.Kind == jsonlite.String {
		return 0, errf(field, "must be a number, not a string")
	}
	if raw.Kind != jsonlite.Number {
		return 0, errf(field, "must be a whole number")
	}
	n := raw.Text
	if i, err := strconv.ParseInt(n, 10, 64); err == nil {
		return i, nil
	}
	i, ok := wholeValue(n)
	if !ok {
		return 0, errf(field, "%s is not a whole number", n)
	}
	return i, nil
}

// wholeValue is the value of the JSON number literal n (-?int(.frac)?
// (e[+-]?exp)?) when it is whole, its digits without trailing zeros times
// 10^k with k >= 0, and at most 2^53 in magnitude (what a float64 holds
// exactly). It is computed on the literal's digits, not through
// strconv.ParseFloat, whose tables and code weigh about 20 KB of module.
func wholeValue(n string) (int64, bool) {
	mant, exp := n, 0
	if i := strings.IndexAny(n, "eE"); i >= 0 {
		e, err := strconv.Atoi(n[i+1:])
		if err != nil {
			return 0, false
		}
		mant, exp = n[:i], max(-1<<20, min(e, 1<<20)) // past these, only 0 is whole and small
	}
	neg := strings.HasPrefix(mant, "-")
	whole, frac, _ := strings.Cut(strings.TrimPrefix(mant, "-"), ".")
	digits := strings.TrimLeft(whole+frac, "0")
	exp -= len(frac)
	trimmed := strings.TrimRight(digits, "0")
	exp += len(digits) - len(trimmed)
	if trimmed == "" {
		return 0, true
	}
	if exp < 0 || len(trimmed)+exp > 16 { // 2^53 has 16 digits
		return 0, false
	}
	var v int64
	for _, c := range trimmed {
		v = v*10 + int64(c-'0')
	}
	for range exp {
		v *= 10
	}
	if v > 1<<53 {
		return 0, false
	}
	if neg {
		v = -v
	}
	return v, true
}

// duration accepts a Go duration string ("1m", "250ms"). A bare number is
// refused: "10" could mean seconds or nanoseconds.
func duration(field string, raw *jsonlite.Value) (time.Duration, error) {
	var s string
	if err := str(raw, &s); err != nil {
		return 0, errf(field, "must be a duration string like \"1s\", \"1m\" or \"250ms\"")
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, errf(field, "%q is not a duration (use a Go duration like \"1s\", \"1m\", \"250ms\")", s)
	}
	return d, nil
}

// fields is one JSON object of the configuration with the path that names
// its members in errors ("rules[1]"; "" at the top). Its methods read one
// optional member each, report whether it is present, and check its type
// and range with the error every field of that kind gives.
type fields struct {
	path string
	m    *jsonlite.Value
}

// name is the path of member key ("rules[1].window").
func (f fields) name(key string) string {
	if f.path == "" {
		return key
	}
	return f.path + "." + key
}

// number reads a whole number.
func (f fields) number(key string) (int64, bool, error) {
	raw := f.m.Get(key)
	if raw == nil {
		return 0, false, nil
	}
	n, err := integer(f.name(key), raw)
	return n, true, err
}

// whole reads a whole number in lo..hi; out of range, the error is
// outOfRange formatted with the number, then args.
func (f fields) whole(key string, lo, hi int64, outOfRange string, args ...any) (int64, bool, error) {
	n, ok, err := f.number(key)
	if !ok || err != nil {
		return 0, ok, err
	}
	if n < lo || n > hi {
		return 0, true, &FieldError{Field: f.name(key), Msg: sprintf.Sprintf(outOfRange, append([]any{n}, args...)...)}
	}
	return n, true, nil
}

// count reads a limit or burst: a whole number in 1..maxCount.
func (f fields) count(key string) (int64, bool, error) {
	n, ok, err := f.number(key)
	if !ok || err != nil {
		return 0, ok, err
	}
	if n <= 0 {
		return 0, true, errf(f.name(key), "must be > 0, got %d", n)
	}
	if n > maxCount {
		return 0, true, errf(f.name(key), "must be <= %d, got %d", maxCount, n)
	}
	return n, true, nil
}

// text reads a string into dst.
func (f fields) text(key string, dst *string) (bool, error) {
	raw := f.m.Get(key)
	if raw == nil {
		return false, nil
	}
	if err := str(raw, dst); err != nil {
		return true, errf(f.name(key), "must be a string")
	}
	return true, nil
}

// oneOf reads a string that must be one of choices; anything else, of
// any type, is the error msg.
func (f fields) oneOf(key, msg string, choices ...string) (string, bool, error) {
	raw := f.m.Get(key)
	if raw == nil {
		return "", false, nil
	}
	if s, ok := raw.Str(); ok {
		for _, c := range choices {
			if s == c {
				return s, true, nil
			}
		}
	}
	return "", true, &FieldError{Field: f.name(key), Msg: msg}
}

// flag reads true or false into dst.
func (f fields) flag(key string, dst *bool) error {
	if raw := f.m.Get(key); raw != nil {
		if err := boolean(raw, dst); err != nil {
			return errf(f.name(key), "must be true or false")
		}
	}
	return nil
}

// maxDelay reads a rule's max_delay: 0 (absent) to 60s.
func (f fields) maxDelay() (time.Duration, error) {
	raw := f.m.Get("max_delay")
	if raw == nil {
		return 0, nil
	}
	d, err := duration(f.name("max_delay"), raw)
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, errf(f.name("max_delay"), "must be >= 0, got %s", d)
	}
	if d > 60*time.Second {
		return 0, errf(f.name("max_delay"), "%s is longer than 60s: holding requests that long ties up connections; reject with Retry-After instead", d)
	}
	return d, nil
}

// HeadersName returns the configuration name of c.Headers.
func (c *Config) HeadersName() string {
	switch c.Headers {
	case header.Legacy:
		return "legacy"
	case header.Draft:
		return "draft"
	case header.None:
		return "none"
	}
	return "both"
}
