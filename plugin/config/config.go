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
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/sluicehq/sluice/plugin/internal/ipaddr"
	"github.com/sluicehq/sluice/plugin/internal/jsonlite"
	"github.com/sluicehq/sluice/plugin/internal/sprintf"
	"github.com/sluicehq/sluice/plugin/internal/textnum"
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
	_ [0]func() // not comparable: no equality function in the module
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
	_      [0]func() // not comparable: no equality function in the module
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

// Not inlined: a copy at each call site costs more wasm code than
// the call (docs/design/memory.md, "Inlining").
//
//go:noinline
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
	i, j := textnum.SpaceBounds(unsafe.String(unsafe.SliceData(doc), len(doc)))
	doc = doc[i:j] // bytes.TrimSpace(doc)
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
	rules := make([]Rule, 0, len(raws)) // no copies of a growing list
	seen := make(map[string]int, len(raws))
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
		if strings.IndexByte(s, '%') >= 0 { // not ContainsRune: its UTF-8 path is ~3 KB of module
			return nil, errf(sprintf.Sprintf("exempt_cidrs[%d]", i), "%q: IPv6 zones are not allowed in a CIDR", s)
		}
		p, ok := ipaddr.ParsePrefix(textnum.TrimSpace(s))
		if !ok {
			a, aok := ipaddr.ParseAddr(textnum.TrimSpace(s))
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
	return n > 0 && n <= 200 && textnum.TrimSpace(s) == s && strings.IndexFunc(s, unicode.IsControl) < 0
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

// ruleID hashes everything that changes how a rule counts. The name is
// included: renaming a rule is a new rule.
//
// The text hashed is the one fmt.Fprintf wrote before the plugin dropped
// fmt (TestRuleIDUnchanged), so that IDs, and the client state they keep,
// survive an upgrade.
func ruleID(r *Rule) uint64 {
	h := fnv.New64a()
	// One buffer for every piece: a thousand rules are parsed at once, and
	// what parsing leaves behind stays in the VM's memory for life.
	b := sprintf.Appendf(make([]byte, 0, 128), "%s|%t|%s|%q|%q|%v|", r.Name, r.Global, r.Limit.Algorithm(), r.Match.PathPrefix, r.Match.PathExact, r.Match.Methods)
	for _, k := range r.Key {
		b = sprintf.Appendf(b, "%d:%s,", int(k.Kind), k.Header)
	}
	b = sprintf.Appendf(b, "|%d|%d|%d", r.Limit.Limit(), r.Limit.Window(), r.Limit.Burst())
	h.Write(b)
	// Like the cost, what a rule could not say before is hashed only when
	// set, so that the IDs of rules without it are kept.
	if r.Match.IgnoreCase {
		h.Write([]byte("|ci"))
	}
	for _, rt := range r.Match.Routes {
		h.Write(sprintf.Appendf(b[:0], "|route|%q", rt))
	}
	hashClasses(h, r)
	if c := &r.Cost; c.Set() {
		// Only rules with a cost hash it: the IDs of the others are kept.
		b = sprintf.Appendf(b[:0], "|cost|%s|%s|%d", c.RequestHeader, c.ResponseHeader, c.Max)
		for _, s := range c.OnStatus {
			b = sprintf.Appendf(b, ",%d", int(s))
		}
		h.Write(b)
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
	switch textnum.TrimSpace(s) {
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
