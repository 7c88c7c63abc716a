// Command cost shows the rule field cost against a real Envoy with the
// Sluice plugin: a login endpoint limited on failures only, and an
// LLM-style endpoint limited in tokens per API key per minute, the tokens
// read from the upstream's response.
//
//	make build envoy && go run ./examples/cost
//
// It starts a small backend on loopback (POST /login answers 401 unless
// the password is "hunter2"; POST /v1/complete answers with the tokens it
// "used" in X-Tokens-Used, from the prompt's length) and Envoy in front of
// it with sluice.json, then plays three clients and prints each response:
//
//   - alice logs in correctly 10 times: never limited (correct logins
//     cost nothing);
//   - mallory guesses passwords: 5 failures pass, then every login of
//     hers is refused, a correct one too, with Retry-After;
//   - key "team-a" sends prompts to /v1/complete on a budget of 2,000
//     tokens a minute: admitted while its balance is positive; the answer
//     that overdraws it leaves a debt, and the refusal's Retry-After
//     covers it.
//
// The API key is what the client sends, so a client could invent keys to
// get fresh budgets: llm_per_ip (requests per client address, generous)
// bounds that, as `sluice validate` advises for rules keyed only by
// client-chosen values.
//
// See docs/cost.md.
package main

import (
	"context"
	_ "embed"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

//go:embed sluice.json
var sluiceConfig string

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "cost: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	root, err := envoytest.RepoRoot()
	if err != nil {
		return fmt.Errorf("run me from the Sluice repository: %w", err)
	}
	wasm := filepath.Join(root, "build", "sluice.wasm")
	if _, err := os.Stat(wasm); err != nil {
		return fmt.Errorf("the plugin is missing (make build): %w", err)
	}
	bin, err := envoytest.FindEnvoy()
	if err != nil {
		return fmt.Errorf("%w (make envoy installs it)", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	backend := &http.Server{Handler: http.HandlerFunc(serve)}
	go backend.Serve(ln)
	defer backend.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e, err := envoytest.Start(ctx, envoytest.Options{
		Bin: bin, Upstream: ln.Addr().String(), Concurrency: 2,
		Wasm: &envoytest.Wasm{File: wasm, Config: sluiceConfig},
	})
	if err != nil {
		return err
	}
	defer e.Stop()
	fmt.Printf("Envoy %s with Sluice (examples/cost/sluice.json) in front of the backend %s\n\n", e.URL(), ln.Addr())
	send := func(who, path string, h http.Header, body string) int {
		resp, _, err := e.Do(ctx, "POST", path, h, []byte(body))
		if err != nil {
			fmt.Printf("  %-8s %s: %v\n", who, path, err)
			return 0
		}
		line := fmt.Sprintf("  %-8s %-12s %d  remaining=%s", who, path, resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"))
		if t := resp.Header.Get("X-Tokens-Used"); t != "" {
			line += "  tokens=" + t
		}
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			line += "  retry-after=" + ra + "s"
		}
		fmt.Println(line)
		return resp.StatusCode
	}
	login := func(who, ip, password string) int {
		return send(who, "/login", http.Header{"X-Forwarded-For": {ip}, "X-Password": {password}}, "")
	}
	fmt.Println("login_failures: 5 failed logins per client per 15 minutes; correct logins cost nothing")
	for i := 0; i < 10; i++ {
		login("alice", "203.0.113.10", "hunter2")
	}
	for i := 0; i < 7; i++ {
		login("mallory", "198.51.100.66", fmt.Sprintf("guess%d", i))
	}
	login("mallory", "198.51.100.66", "hunter2")
	login("alice", "203.0.113.10", "hunter2")

	fmt.Println("\nllm_tokens: 2,000 tokens per API key per minute, counted from X-Tokens-Used")
	for i := 0; i < 6; i++ {
		prompt := strings.Repeat("tell me more ", 60*(i+1))
		if send("team-a", "/v1/complete", http.Header{"X-Api-Key": {"team-a"}}, prompt) == 429 {
			break
		}
	}
	send("team-b", "/v1/complete", http.Header{"X-Api-Key": {"team-b"}}, "hello")
	return nil
}

// serve is the backend: a login that knows one password, and a completion
// endpoint that reports the tokens it used (one per 4 bytes of prompt, and
// 100 for the answer).
func serve(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/login":
		if r.Header.Get("X-Password") != "hunter2" {
			http.Error(w, "wrong password", http.StatusUnauthorized)
			return
		}
		fmt.Fprintln(w, "welcome")
	case "/v1/complete":
		n, _ := r.Body.Read(make([]byte, 1<<16))
		w.Header().Set("X-Tokens-Used", strconv.Itoa(n/4+100))
		fmt.Fprintln(w, "a completion")
	default:
		http.NotFound(w, r)
	}
}
