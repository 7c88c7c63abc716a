package envoytest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Envoy is a running Envoy process started by Start. Its methods are safe for
// concurrent use.
type Envoy struct {
	// Upstream is the backend Start created when Options.Upstream was empty
	// (nil otherwise). Stop closes it.
	Upstream *Upstream

	bin        string
	image      string   // docker mode: the image Envoy runs in
	container  string   // docker mode: the container's name
	mounts     []string // docker mode: files mounted read-only at their own paths
	pid        int      // docker mode: Envoy's host pid
	dir        string
	ownDir     bool
	bootstrap  string
	ldsPath    string
	logPath    string
	logFile    *os.File
	listenPort int
	adminAddr  string
	cmd        *exec.Cmd
	done       chan struct{} // closed when the process has exited
	waitErr    error         // valid after done
	client     *http.Client
	admin      *http.Client

	reconfMu   sync.Mutex // serializes Reconfigure; guards ldsVersion
	ldsVersion int

	mu        sync.Mutex // guards opts, stopped, savedLogs
	opts      Options    // normalized
	upstream  string
	stopped   bool
	savedLogs string
}

// StartError is returned by Start when Envoy exits or fails to become ready.
// Its Error text includes Envoy's error lines and log tail; Log has it all.
type StartError struct {
	Err error  // what went wrong: the exit status, or a timeout
	Log string // Envoy's complete log
}

func (e *StartError) Error() string {
	return fmt.Sprintf("envoytest: envoy did not start: %v\n%s", e.Err, logDigest(e.Log, 15))
}

func (e *StartError) Unwrap() error { return e.Err }

// ErrRejected is wrapped by the error Reconfigure returns when Envoy rejects
// the new listener (for example because the wasm plugin refused its
// configuration). Envoy then keeps serving the previous one.
var ErrRejected = errors.New("envoy rejected the listener update")

// logDigest returns the error-level lines of log (at most 30) and its last
// tail lines.
func logDigest(log string, tail int) string {
	lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
	var errs []string
	for _, l := range lines {
		if strings.Contains(l, "][critical][") || strings.Contains(l, "][error][") {
			errs = append(errs, l)
		}
	}
	if len(errs) > 30 {
		errs = errs[len(errs)-30:]
	}
	if len(lines) > tail {
		lines = lines[len(lines)-tail:]
	}
	for i, l := range lines {
		if len(l) > 300 {
			lines[i] = l[:300] + " …"
		}
	}
	var b strings.Builder
	if len(errs) > 0 {
		b.WriteString("--- envoy errors ---\n")
		b.WriteString(strings.Join(errs, "\n"))
		b.WriteString("\n")
	}
	b.WriteString("--- envoy log tail ---\n")
	b.WriteString(strings.Join(lines, "\n"))
	return b.String()
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start renders a bootstrap from o, starts Envoy and waits until its admin
// /ready answers 200 and the listener's port is known. ctx bounds only the
// start-up; the process runs until Stop. On failure Envoy is stopped and the
// error (a *StartError when Envoy itself failed) carries its log.
func Start(ctx context.Context, o Options) (*Envoy, error) {
	n, err := o.normalized()
	if err != nil {
		return nil, err
	}
	if n.Bin == "" {
		if n.Bin, err = Target(); err != nil {
			return nil, err
		}
	}
	e := &Envoy{bin: n.Bin, done: make(chan struct{}), client: NewClient(256)}
	if img, ok := imageOf(n.Bin); ok {
		if err := CheckImage(ctx, img); err != nil {
			return nil, err
		}
		e.image = img
	}
	e.admin = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4}}
	ok := false
	defer func() {
		if !ok {
			e.Stop()
		}
	}()
	if n.Dir == "" {
		if e.dir, err = os.MkdirTemp("", "envoytest-"); err != nil {
			return nil, err
		}
		e.ownDir = true
	} else {
		if e.dir, err = filepath.Abs(n.Dir); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(e.dir, 0o755); err != nil {
			return nil, err
		}
	}
	if n.AccessLogFormat != "" && n.AccessLogPath == "" {
		n.AccessLogPath = filepath.Join(e.dir, "access.log")
	}
	for _, w := range []*Wasm{n.Wasm, n.Wasm2, n.UpstreamWasm} {
		if w == nil {
			continue
		}
		if _, err := os.Stat(w.File); err != nil {
			return nil, fmt.Errorf("envoytest: wasm module: %w", err)
		}
		if !slices.Contains(e.mounts, w.File) {
			e.mounts = append(e.mounts, w.File)
		}
	}
	e.upstream = n.Upstream
	if e.upstream == "" && len(n.UpstreamEndpoints) > 0 {
		e.upstream = n.UpstreamEndpoints[0]
	}
	if e.upstream == "" {
		if e.Upstream, err = StartUpstream(); err != nil {
			return nil, err
		}
		e.upstream = e.Upstream.Addr()
	}
	e.listenPort = n.ListenerPort
	if n.DynamicListeners {
		if e.listenPort == 0 {
			if e.listenPort, err = FreePort(); err != nil {
				return nil, err
			}
		}
		e.ldsPath = filepath.Join(e.dir, "lds.yaml")
		e.ldsVersion = 1
		lds, err := renderLDS(n, e.listenPort, "1")
		if err != nil {
			return nil, err
		}
		if err := writeFileAtomic(e.ldsPath, []byte(lds)); err != nil {
			return nil, err
		}
	}
	boot, err := renderBootstrap(n, e.upstream, e.listenPort, e.ldsPath)
	if err != nil {
		return nil, err
	}
	e.bootstrap = filepath.Join(e.dir, "envoy.yaml")
	if err := os.WriteFile(e.bootstrap, []byte(boot), 0o644); err != nil {
		return nil, err
	}
	e.opts = n

	adminPath := filepath.Join(e.dir, "admin-address.txt")
	_ = os.Remove(adminPath)
	e.logPath = filepath.Join(e.dir, "envoy.log")
	if e.logFile, err = os.Create(e.logPath); err != nil {
		return nil, err
	}
	args := []string{
		"-c", e.bootstrap,
		"--concurrency", strconv.Itoa(n.Concurrency),
		"--use-dynamic-base-id",
		"--admin-address-path", adminPath,
		"--log-level", n.LogLevel,
		"--drain-time-s", strconv.Itoa(max(1, int((n.DrainTime+time.Second-1)/time.Second))),
		"--drain-strategy", "immediate",
	}
	comp := n.ComponentLogLevel
	if n.WasmDebug {
		if comp != "" {
			comp += ","
		}
		comp += "wasm:debug"
	}
	if comp != "" {
		args = append(args, "--component-log-level", comp)
	}
	args = append(args, n.ExtraArgs...)
	if e.image != "" {
		e.container = containerName()
		e.cmd = dockerRun(e.image, e.container, e.dir, e.mounts, args)
	} else {
		e.cmd = exec.Command(e.bin, args...)
	}
	e.cmd.Dir = e.dir
	var out io.Writer = e.logFile
	if n.LogOutput != nil {
		out = io.MultiWriter(e.logFile, n.LogOutput)
	}
	e.cmd.Stdout, e.cmd.Stderr = out, out
	setProcAttr(e.cmd)
	if err := e.cmd.Start(); err != nil {
		close(e.done)
		return nil, fmt.Errorf("envoytest: starting %s: %w", e.bin, err)
	}
	liveMu.Lock()
	live[e] = true
	liveMu.Unlock()
	go func() {
		e.waitErr = e.cmd.Wait()
		close(e.done)
	}()

	ctx, cancel := context.WithTimeout(ctx, n.StartTimeout)
	defer cancel()
	fail := func(err error) (*Envoy, error) {
		e.Stop()
		return nil, &StartError{Err: err, Log: e.Logs()}
	}
	// Admin address.
	for e.adminAddr == "" {
		if b, err := os.ReadFile(adminPath); err == nil && strings.TrimSpace(string(b)) != "" {
			e.adminAddr = strings.TrimSpace(string(b))
			break
		}
		if err := e.pause(ctx); err != nil {
			return fail(err)
		}
	}
	// Readiness.
	for {
		if code, _, err := e.adminGet(ctx, "/ready"); err == nil && code == http.StatusOK {
			break
		}
		if err := e.pause(ctx); err != nil {
			return fail(fmt.Errorf("waiting for /ready: %w", err))
		}
	}
	// Listener port.
	for {
		port, err := e.boundPort(ctx)
		if err == nil && port > 0 {
			e.listenPort = port
			break
		}
		if err := e.pause(ctx); err != nil {
			return fail(fmt.Errorf("waiting for listener %s: %w", ListenerName, err))
		}
	}
	if e.container != "" {
		if e.pid, err = containerPid(ctx, e.container); err != nil {
			return fail(err)
		}
		ranContainers.Add(1)
		imagesMu.Lock()
		imagesRan[e.image] = true
		imagesMu.Unlock()
	} else {
		ranProcesses.Add(1)
	}
	ok = true
	return e, nil
}

// pause waits a little, failing if the process exited or ctx ended.
func (e *Envoy) pause(ctx context.Context) error {
	select {
	case <-e.done:
		if e.waitErr != nil {
			return fmt.Errorf("envoy exited: %w", e.waitErr)
		}
		return errors.New("envoy exited with status 0")
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(25 * time.Millisecond):
		return nil
	}
}

func (e *Envoy) boundPort(ctx context.Context) (int, error) {
	code, body, err := e.adminGet(ctx, "/listeners?format=json")
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("/listeners: status %d", code)
	}
	var resp struct {
		ListenerStatuses []struct {
			Name         string `json:"name"`
			LocalAddress struct {
				SocketAddress struct {
					PortValue int `json:"port_value"`
				} `json:"socket_address"`
			} `json:"local_address"`
		} `json:"listener_statuses"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return 0, err
	}
	for _, l := range resp.ListenerStatuses {
		if l.Name == ListenerName {
			return l.LocalAddress.SocketAddress.PortValue, nil
		}
	}
	return 0, errors.New("listener not active yet")
}

func (e *Envoy) adminGet(ctx context.Context, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.adminAddr+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := e.admin.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// Admin GETs an admin endpoint such as "/stats?filter=wasm" or "/clusters"
// and returns its body; a status other than 200 is an error.
func (e *Envoy) Admin(ctx context.Context, path string) ([]byte, error) {
	code, b, err := e.adminGet(ctx, path)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return b, fmt.Errorf("envoytest: admin %s: status %d: %s", path, code, b)
	}
	return b, nil
}

// AccessLogPath is the file of Options.AccessLogFormat's access log ("" if
// none). Envoy writes it asynchronously (flushed about once a second).
func (e *Envoy) AccessLogPath() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.opts.AccessLogPath
}

// URL returns the listener's base URL, "http://127.0.0.1:<port>".
func (e *Envoy) URL() string { return "http://127.0.0.1:" + strconv.Itoa(e.listenPort) }

// Port returns the listener's port.
func (e *Envoy) Port() int { return e.listenPort }

// AdminURL returns the admin interface's base URL, "http://127.0.0.1:<port>".
func (e *Envoy) AdminURL() string { return "http://" + e.adminAddr }

// Pid returns Envoy's process id (in docker mode the host's pid of the
// container's Envoy).
func (e *Envoy) Pid() int {
	if e.container != "" {
		return e.pid
	}
	return e.cmd.Process.Pid
}

// Container returns the name of the container Envoy runs in ("" in process
// mode).
func (e *Envoy) Container() string { return e.container }

// Image returns the image Envoy runs in ("" in process mode).
func (e *Envoy) Image() string { return e.image }

// Dir returns the working directory holding envoy.yaml, lds.yaml and envoy.log.
func (e *Envoy) Dir() string { return e.dir }

// BootstrapPath returns the path of the rendered bootstrap.
func (e *Envoy) BootstrapPath() string { return e.bootstrap }

// Options returns the normalized options Envoy currently runs with
// (reflecting successful Reconfigure calls).
func (e *Envoy) Options() Options {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.opts
}

// Client returns an HTTP client shared by this Envoy's helpers, tuned for
// many concurrent connections (see NewClient).
func (e *Envoy) Client() *http.Client { return e.client }

// Exited reports whether the Envoy process has exited.
func (e *Envoy) Exited() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// Get sends a GET for path (e.g. "/checkout") with the given headers (may be
// nil) through Envoy's listener and returns the response with its body read
// and closed.
func (e *Envoy) Get(ctx context.Context, path string, h http.Header) (*http.Response, string, error) {
	return e.Do(ctx, http.MethodGet, path, h, nil)
}

// Do sends one request through Envoy's listener and returns the response with
// its body read and closed.
func (e *Envoy) Do(ctx context.Context, method, path string, h http.Header, body []byte) (*http.Response, string, error) {
	var r io.Reader
	if body != nil {
		r = strings.NewReader(string(body))
	}
	req, err := http.NewRequestWithContext(ctx, method, e.URL()+path, r)
	if err != nil {
		return nil, "", err
	}
	for k, vs := range h {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if host := h.Get("Host"); host != "" {
		req.Host = host
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// Stop stops Envoy (SIGTERM, then SIGKILL after 10s), waits for it, closes the
// Upstream Start created and removes the temporary directory Start created.
// It may be called more than once. It returns the process's exit error unless
// the process ended because of Stop's signal.
func (e *Envoy) Stop() error {
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return nil
	}
	e.stopped = true
	e.mu.Unlock()

	var exitErr error
	if e.cmd != nil && e.cmd.Process != nil {
		select {
		case <-e.done:
			exitErr = e.waitErr
		default:
			// In docker mode the attached `docker run` hands the signal to
			// the container's Envoy (--sig-proxy, the default).
			_ = e.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-e.done:
			case <-time.After(10 * time.Second):
				if e.container != "" {
					dockerSignal(e.container, "KILL")
				}
				_ = e.cmd.Process.Kill()
				<-e.done
			}
		}
	}
	if e.container != "" && e.waitErr != nil {
		// --rm removed it if Envoy exited cleanly (the client waits for
		// that); otherwise the client may have died before its container.
		dockerRemove(e.container)
	}
	liveMu.Lock()
	delete(live, e)
	liveMu.Unlock()
	if e.logFile != nil {
		_ = e.logFile.Close()
		if b, err := os.ReadFile(e.logPath); err == nil {
			e.mu.Lock()
			e.savedLogs = string(b)
			e.mu.Unlock()
		}
	}
	if e.Upstream != nil {
		_ = e.Upstream.Close()
	}
	e.client.CloseIdleConnections()
	e.admin.CloseIdleConnections()
	if e.ownDir && e.dir != "" {
		_ = os.RemoveAll(e.dir)
	}
	return exitErr
}
