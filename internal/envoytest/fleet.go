package envoytest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// The fleet parts: Redis and Envoy's rate-limit service
// (envoyproxy/ratelimit), which keep the budgets of global rules. `make
// test` installs both (redis-server from Debian, the service with go
// install into build/bin); the tests start them on loopback with
// kernel-chosen ports and temporary directories, and stop them at the end.

// FindRedis returns the redis-server binary: $REDIS_SERVER, else PATH.
func FindRedis() (string, error) {
	return envOrPath("REDIS_SERVER", "redis-server", "make test installs it: apt-get install -y redis-server")
}

// envOrPath returns $env, else the program name found on PATH; the error
// says how to get it (install).
func envOrPath(env, name, install string) (string, error) {
	if p := os.Getenv(env); p != "" {
		return p, nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found (%s; or set %s)", name, install, env)
	}
	return p, nil
}

// FindRLS returns the rate-limit service binary: $RLS_BIN, else
// build/bin/service_cmd in the repository (where `make` installs it).
func FindRLS() (string, error) {
	if p := os.Getenv("RLS_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("RLS_BIN=%s: %v (make test installs the rate-limit service there)", p, err)
		}
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	p := filepath.Join(root, "build", "bin", "service_cmd")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("rate-limit service not found at %s (make test installs it with go install github.com/envoyproxy/ratelimit/src/service_cmd; or set RLS_BIN)", p)
	}
	return p, nil
}

// RequireFleet returns redis-server and the rate-limit service, failing
// the test when one is missing and CI is set, skipping it otherwise.
func RequireFleet(t testing.TB) (redis, rls string) {
	t.Helper()
	var err error
	if redis, err = FindRedis(); err == nil {
		rls, err = FindRLS()
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set and a fleet part is missing: %v", err)
		}
		t.Skipf("skipping: %v", err)
	}
	return redis, rls
}

// Redis is a redis-server child process on 127.0.0.1.
type Redis struct {
	bin, dir string
	port     int
	cmd      *exec.Cmd
	done     chan struct{}
}

// StartRedis starts redis-server on a free loopback port, without
// persistence, in dir.
func StartRedis(ctx context.Context, bin, dir string) (*Redis, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	r := &Redis{bin: bin, dir: dir, port: port}
	return r, r.Start(ctx)
}

// Addr is host:port.
func (r *Redis) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// Start (re)starts the server on its port (after Stop: Redis back).
func (r *Redis) Start(ctx context.Context) error {
	log, err := os.OpenFile(filepath.Join(r.dir, "redis.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	r.cmd = exec.Command(r.bin, "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", r.dir)
	r.cmd.Stdout, r.cmd.Stderr = log, log
	setProcAttr(r.cmd)
	if err := r.cmd.Start(); err != nil {
		log.Close()
		return err
	}
	r.done = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); log.Close(); close(done) }(r.cmd, r.done)
	return waitTCP(ctx, r.Addr(), r.done)
}

// Stop kills the server (Redis down) and waits for it to exit.
func (r *Redis) Stop() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	<-r.done
	r.cmd = nil
}

// RLS is envoyproxy/ratelimit's service_cmd, a child process on loopback.
type RLS struct {
	GRPCAddr string
	HTTPAddr string
	cmd      *exec.Cmd
	done     chan struct{}
	log      string
}

// StartRLS starts the service against redis (host:port) with the given
// configuration files (name → YAML) in a runtime directory under dir.
func StartRLS(ctx context.Context, bin, dir, redis string, configs map[string]string) (*RLS, error) {
	return StartRLSWith(ctx, bin, dir, configs, "REDIS_URL="+redis)
}

// StartRLSWith is StartRLS with the Redis settings, and any other, in env
// (NAME=value, over the defaults): REDIS_URL at least.
func StartRLSWith(ctx context.Context, bin, dir string, configs map[string]string, env ...string) (*RLS, error) {
	cfgDir := filepath.Join(dir, "runtime", "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return nil, err
	}
	for name, y := range configs {
		if err := os.WriteFile(filepath.Join(cfgDir, name), []byte(y), 0o644); err != nil {
			return nil, err
		}
	}
	var ports [3]int
	for i := range ports {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	s := &RLS{GRPCAddr: "127.0.0.1:" + strconv.Itoa(ports[1]), HTTPAddr: "127.0.0.1:" + strconv.Itoa(ports[0]), log: filepath.Join(dir, "ratelimit.log")}
	log, err := os.Create(s.log)
	if err != nil {
		return nil, err
	}
	s.cmd = exec.Command(bin)
	s.cmd.Env = append(os.Environ(),
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(ports[0]),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(ports[1]),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(ports[2]),
		"USE_STATSD=false", "LOG_LEVEL=error",
		"REDIS_SOCKET_TYPE=tcp",
		"RUNTIME_ROOT="+filepath.Join(dir, "runtime"), "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
	)
	s.cmd.Env = append(s.cmd.Env, env...)
	s.cmd.Stdout, s.cmd.Stderr = log, log
	setProcAttr(s.cmd)
	if err := s.cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	s.done = make(chan struct{})
	go func() { _ = s.cmd.Wait(); log.Close(); close(s.done) }()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		resp, err := http.Get("http://" + s.HTTPAddr + "/healthcheck")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("rate-limit service exited at start: %s", s.Logs())
		case <-ctx.Done():
			s.Stop()
			return nil, fmt.Errorf("rate-limit service not healthy: %v: %s", ctx.Err(), s.Logs())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return s, waitTCP(ctx, s.GRPCAddr, s.done)
}

// Logs returns the service's output.
func (s *RLS) Logs() string {
	b, _ := os.ReadFile(s.log)
	return string(b)
}

// Stop kills the service and waits for it to exit.
func (s *RLS) Stop() {
	if s.cmd.Process != nil {
		_ = s.Thaw()
		_ = s.cmd.Process.Kill()
	}
	<-s.done
}

func waitTCP(ctx context.Context, addr string, done chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("%s: process exited", addr)
		case <-ctx.Done():
			return fmt.Errorf("%s: %v", addr, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// FleetT starts, for a test, Redis and the rate-limit service with the
// given configuration files, both stopped in t.Cleanup.
func FleetT(t testing.TB, configs map[string]string) (*Redis, *RLS) {
	t.Helper()
	redisBin, rlsBin := RequireFleet(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := StartRedis(ctx, redisBin, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	s, err := StartRLS(ctx, rlsBin, dir, r.Addr(), configs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("rate-limit service log:\n%s", s.Logs())
		}
	})
	return r, s
}

// Freeze stops the service process (SIGSTOP): it keeps its sockets but
// answers nothing, like a service that hangs. Thaw resumes it.
func (s *RLS) Freeze() error { return s.cmd.Process.Signal(syscall.SIGSTOP) }

// Thaw resumes a frozen service (SIGCONT).
func (s *RLS) Thaw() error { return s.cmd.Process.Signal(syscall.SIGCONT) }
