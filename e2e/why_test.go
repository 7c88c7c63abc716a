package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// shippedLogFormat returns the access-log line of envoy/envoy.yaml (the one
// the docs show): the tests below run with exactly that line.
func shippedLogFormat(t *testing.T) string {
	t.Helper()
	b := repoFile(t, "envoy", "envoy.yaml")
	var doc struct {
		StaticResources struct {
			Listeners []struct {
				FilterChains []struct {
					Filters []struct {
						TypedConfig struct {
							AccessLog []struct {
								TypedConfig struct {
									LogFormat struct {
										TextFormatSource struct {
											InlineString string `yaml:"inline_string"`
										} `yaml:"text_format_source"`
									} `yaml:"log_format"`
								} `yaml:"typed_config"`
							} `yaml:"access_log"`
						} `yaml:"typed_config"`
					} `yaml:"filters"`
				} `yaml:"filter_chains"`
			} `yaml:"listeners"`
		} `yaml:"static_resources"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for _, l := range doc.StaticResources.Listeners {
		for _, fc := range l.FilterChains {
			for _, f := range fc.Filters {
				for _, a := range f.TypedConfig.AccessLog {
					if s := a.TypedConfig.LogFormat.TextFormatSource.InlineString; s != "" {
						return s
					}
				}
			}
		}
	}
	t.Fatal("envoy/envoy.yaml has no access-log text format")
	return ""
}

// TestAccessLogLineDocumented: docs/operations.md shows the line
// envoy/envoy.yaml ships, byte for byte.
func TestAccessLogLineDocumented(t *testing.T) {
	shipped := repoFile(t, "envoy", "envoy.yaml")
	docs := repoFile(t, "docs", "operations.md")
	line := ""
	for _, l := range strings.Split(string(shipped), "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "inline_string:") && strings.Contains(l, "sluice_decision") {
			line = l
		}
	}
	if line == "" || !strings.Contains(string(docs), line) {
		t.Errorf("docs/operations.md does not show envoy/envoy.yaml's access-log line %q", line)
	}
}

// accessLineRE reads the shipped line: request line, status, the two
// Sluice fields at the end.
var accessLineRE = regexp.MustCompile(`"[A-Z]+ (\S+) [^"]*" (\d+) .* sluice_decision=(\S*) sluice_rule=(\S*)(?: sluice_class=(\S*))?$`)

// whyConfig has one rule per decision the access log tells; the global
// rule's service is a port nobody listens on, so every call fails and
// on_error decides.
const whyConfig = `{
  "rules": [
    {"name": "strict", "match": {"path_prefix": "/strict"}, "limit": 1, "window": "1h"},
    {"name": "outer", "match": {"path_prefix": "/both"}, "limit": 1, "window": "1h"},
    {"name": "inner", "match": {"path_prefix": "/both/inner"}, "limit": 1, "window": "1h"},
    {"name": "watch", "match": {"path_prefix": "/shadow"}, "limit": 1, "window": "1h", "shadow": true},
    {"name": "slow", "match": {"path_prefix": "/slow"}, "limit": 2, "window": "1s", "burst": 1, "max_delay": "3s"},
    {"name": "slots", "match": {"path_prefix": "/slots"}, "algorithm": "concurrency", "limit": 1, "max_delay": "5s", "key": ["path"]},
    {"name": "fleet", "match": {"path_prefix": "/fleet"}, "scope": "global", "limit": 100, "window": "1m"}
  ],
  "global": {"cluster": "ratelimit", "timeout": "100ms"},
  "on_error": "%s"%s
}`

type accessLine struct {
	status         int
	decision, rule string
}

// startWhy starts Envoy with whyConfig (on_error and extra top-level
// members given) and the access log.
func startWhy(t *testing.T, onError, extra string) *envoytest.Envoy {
	t.Helper()
	dead, err := envoytest.FreePort() // nobody listens here
	if err != nil {
		t.Fatal(err)
	}
	return startSluice(t, 2, fmt.Sprintf(whyConfig, onError, extra), func(o *envoytest.Options) {
		o.AccessLogFormat = shippedLogFormat(t)
		o.Clusters = map[string]string{"ratelimit": "127.0.0.1:" + strconv.Itoa(dead)}
		o.HTTP2Clusters = []string{"ratelimit"}
	})
}

// accessLog waits until the access log has a line for every path of want
// (Envoy flushes it about once a second) and returns them by path.
func accessLog(t *testing.T, e *envoytest.Envoy, paths ...string) map[string]accessLine {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(e.AccessLogPath())
		got := map[string]accessLine{}
		for _, l := range strings.Split(string(b), "\n") {
			m := accessLineRE.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			st, _ := strconv.Atoi(m[2])
			got[m[1]] = accessLine{st, m[3], m[4]}
		}
		missing := ""
		for _, p := range paths {
			if _, ok := got[p]; !ok {
				missing = p
			}
		}
		if missing == "" {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("no access-log line for %s after 30s; the log:\n%s", missing, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func get(t *testing.T, e *envoytest.Envoy, path string) (*http.Response, string) {
	t.Helper()
	resp, body, err := e.Get(t.Context(), path, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp, body
}

// TestAccessLogTellsWhy: every decision, as Envoy's access log prints it
// from the filter state the plugin sets (%FILTER_STATE(wasm.sluice_*:PLAIN)%).
func TestAccessLogTellsWhy(t *testing.T) {
	e := startWhy(t, "allow", "")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	get(t, e, "/strict/1")
	get(t, e, "/strict/2")
	get(t, e, "/free")
	get(t, e, "/shadow/1")
	get(t, e, "/shadow/2")
	// slow: burst 1, 2/s, max_delay 3s: the second is held about 500ms.
	get(t, e, "/slow/1")
	if resp, _ := get(t, e, "/slow/2"); resp.StatusCode != 200 {
		t.Errorf("/slow/2: status %d, want 200 after a delay", resp.StatusCode)
	}
	get(t, e, "/fleet/1")

	// slots: one in flight; the second waits in the queue until the first
	// is answered.
	e.Upstream.SetDelay(400 * time.Millisecond)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _, _ = e.Get(ctx, "/slots?n=1", nil)
	}()
	time.Sleep(100 * time.Millisecond)
	get(t, e, "/slots?n=2")
	<-done
	e.Upstream.SetDelay(0)

	got := accessLog(t, e, "/strict/1", "/strict/2", "/free", "/shadow/1", "/shadow/2", "/slow/1", "/slow/2", "/fleet/1", "/slots?n=1", "/slots?n=2")
	want := map[string]accessLine{
		"/strict/1":  {200, "allowed", ""},
		"/strict/2":  {429, "rejected", "strict"},
		"/free":      {200, "allowed", ""},
		"/shadow/1":  {200, "allowed", ""},
		"/shadow/2":  {200, "shadow_rejected", "watch"},
		"/slow/1":    {200, "allowed", ""},
		"/slow/2":    {200, "delayed", "slow"},
		"/fleet/1":   {200, "on_error_allowed", "fleet"},
		"/slots?n=1": {200, "allowed", ""},
		"/slots?n=2": {200, "delayed", "slots"},
	}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s: access log says %+v, want %+v", p, got[p], w)
		}
	}
}

// TestProblemBody: a rejection's body is the draft's quota-exceeded
// problem naming every rule that refused, and RateLimit's t is
// Retry-After.
func TestProblemBody(t *testing.T) {
	e := startWhy(t, "allow", "")
	get(t, e, "/both/inner/1") // takes outer's and inner's one request
	resp, body := get(t, e, "/both/inner/2")
	if resp.StatusCode != 429 {
		t.Fatalf("status %d, want 429", resp.StatusCode)
	}
	if ct := resp.Header.Values("Content-Type"); len(ct) != 1 || ct[0] != "application/problem+json" {
		t.Errorf("Content-Type %q, want one application/problem+json", ct)
	}
	var doc struct {
		Type       string   `json:"type"`
		Title      string   `json:"title"`
		Status     int      `json:"status"`
		Violated   []string `json:"violated-policies"`
		RetryAfter int      `json:"retry-after"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || ra < 3000 {
		t.Errorf("Retry-After %q, want about an hour", resp.Header.Get("Retry-After"))
	}
	if doc.Type != "https://iana.org/assignments/http-problem-types#quota-exceeded" || doc.Title == "" || doc.Status != 429 ||
		strings.Join(doc.Violated, ",") != "outer,inner" || doc.RetryAfter != ra {
		t.Errorf("problem %+v (body %s), want quota-exceeded naming outer and inner, retry-after %d", doc, body, ra)
	}
	if got, want := resp.Header.Get("RateLimit"), `;r=0;t=`+strconv.Itoa(ra); !strings.HasSuffix(got, want) {
		t.Errorf("RateLimit %q, want t = Retry-After (%s)", got, want)
	}
	lines := accessLog(t, e, "/both/inner/2")
	if l := lines["/both/inner/2"]; l.decision != "rejected" || l.rule != "outer" {
		t.Errorf("access log %+v, want rejected by outer (the first that refused)", l)
	}
}

// TestOnErrorDeniedAndTextBody: with on_error deny the failed call
// refuses the request, the access log says on_error_denied, and "body":
// "text" keeps the short text body.
func TestOnErrorDeniedAndTextBody(t *testing.T) {
	e := startWhy(t, "deny", `, "body": "text"`)
	resp, body := get(t, e, "/fleet/1")
	if resp.StatusCode != 429 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") ||
		!strings.Contains(body, "Too Many Requests") {
		t.Errorf("on_error deny: %d %q %q, want 429 with the text body", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	get(t, e, "/strict/1") // spends the strict rule's budget
	resp, body = get(t, e, "/strict/2")
	if resp.StatusCode != 429 || strings.Contains(body, "{") {
		t.Errorf("text body: %d %q", resp.StatusCode, body)
	}
	lines := accessLog(t, e, "/fleet/1", "/strict/2")
	if l := lines["/fleet/1"]; l != (accessLine{429, "on_error_denied", "fleet"}) {
		t.Errorf("/fleet/1: access log %+v, want 429 on_error_denied fleet", l)
	}
	if l := lines["/strict/2"]; l != (accessLine{429, "rejected", "strict"}) {
		t.Errorf("/strict/2: access log %+v", l)
	}
}
