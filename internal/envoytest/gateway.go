package envoytest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Envoy Gateway in standalone mode: provider Custom, resources read from a
// directory of YAML files, infrastructure Host (Envoy Gateway runs Envoy as
// a local process and configures it over xDS). `make test` builds Envoy
// Gateway into build/bin (`make envoy-gateway`) and installs Debian's
// docker-registry for the OCI image source.

// GatewayPorts are the ports Envoy Gateway binds whatever its
// configuration (xDS 18000, wasm server 18002, health 8081, admin 19000,
// metrics 19001) and its Envoy's readiness listener (19003): one instance
// per machine.
var GatewayPorts = []int{18000, 18002, 8081, 19000, 19001, 19003}

// FindEnvoyGateway returns the envoy-gateway binary: $EG_BIN, else
// build/bin/envoy-gateway in the repository (where `make envoy-gateway`
// installs it).
func FindEnvoyGateway() (string, error) {
	if p := os.Getenv("EG_BIN"); p != "" {
		if !isExecutable(p) {
			return "", fmt.Errorf("EG_BIN=%s is not an executable file", p)
		}
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	p := filepath.Join(root, "build", "bin", "envoy-gateway")
	if !isExecutable(p) {
		return "", fmt.Errorf("Envoy Gateway not found at %s (`make envoy-gateway` builds it; or set EG_BIN)", p)
	}
	return p, nil
}

// FindRegistry returns the OCI registry server: $DOCKER_REGISTRY, else
// Debian's docker-registry on PATH.
func FindRegistry() (string, error) {
	return envOrPath("DOCKER_REGISTRY", "docker-registry", "`make envoy-gateway` installs it: apt-get install -y docker-registry")
}

// RequireGatewayParts returns envoy-gateway, the registry server and the
// Envoy binary (a process: Envoy Gateway runs it), and checks that the
// Docker daemon answers (the image is built with docker build). A missing
// part fails the test when CI is set and skips it otherwise.
func RequireGatewayParts(t testing.TB) (eg, registry, envoy string) {
	t.Helper()
	var err error
	if eg, err = FindEnvoyGateway(); err == nil {
		if registry, err = FindRegistry(); err == nil {
			if envoy, err = FindEnvoy(); err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				if out, derr := exec.CommandContext(ctx, "docker", "version", "--format", "{{.Server.Version}}").CombinedOutput(); derr != nil {
					err = fmt.Errorf("the Docker daemon does not answer (`make docker` starts it): %v: %s", derr, out)
				}
				cancel()
			}
		}
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set and a part of the Envoy Gateway test is missing: %v", err)
		}
		t.Skipf("skipping: %v", err)
	}
	return eg, registry, envoy
}

// Expand replaces every ${NAME} of s by vars[NAME] and fails on a name
// vars does not define (what `envsubst` would leave empty).
func Expand(s string, vars map[string]string) (string, error) {
	var missing []string
	out := os.Expand(s, func(name string) string {
		v, ok := vars[name]
		if !ok {
			missing = append(missing, name)
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("no value for ${%s}", strings.Join(missing, "}, ${"))
	}
	return out, nil
}

// group is a process started in a session of its own (setsid), with the
// descendants it started: Stop ends them all, even those that moved to
// another process group.
type group struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // the exit status, once done is closed

	mu   sync.Mutex
	kids map[int]string // descendant pid → its start time (so a reused pid is never killed)
}

func startGroup(cmd *exec.Cmd, log string) (*group, error) {
	f, err := os.OpenFile(log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	g := &group{cmd: cmd, done: make(chan struct{}), kids: map[int]string{}}
	go func() { g.err = cmd.Wait(); f.Close(); close(g.done) }()
	go func() {
		for {
			select {
			case <-g.done:
				return
			case <-time.After(200 * time.Millisecond):
				g.track()
			}
		}
	}()
	return g, nil
}

// track records the live descendants of the process.
func (g *group) track() {
	parent := map[int]int{}
	eachProc("stat", func(pid int, b []byte) {
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 {
			if f := strings.Fields(s[i+1:]); len(f) > 1 {
				parent[pid], _ = strconv.Atoi(f[1])
			}
		}
	})
	root := g.cmd.Process.Pid
	g.mu.Lock()
	defer g.mu.Unlock()
	for changed := true; changed; {
		changed = false
		for pid, pp := range parent {
			if _, known := g.kids[pid]; known {
				continue
			}
			if _, kid := g.kids[pp]; pp == root || kid {
				if st := procStart(pid); st != "" {
					g.kids[pid] = st
					changed = true
				}
			}
		}
	}
}

// Pids returns the process and the descendants seen so far.
func (g *group) Pids() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	pids := []int{g.cmd.Process.Pid}
	for pid := range g.kids {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	return pids
}

// Stop sends SIGTERM, waits up to grace for the process to exit, then kills
// its process group and every descendant it recorded that still runs.
func (g *group) Stop(grace time.Duration) {
	g.track()
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(grace):
	}
	_ = syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL)
	<-g.done
	g.mu.Lock()
	defer g.mu.Unlock()
	for pid, start := range g.kids {
		if procStart(pid) == start {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	// Wait (bounded) for the descendants to be gone: the next test run
	// needs their fixed ports.
	deadline := time.Now().Add(10 * time.Second)
	for pid, start := range g.kids {
		for procStart(pid) == start && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// Registry is an OCI registry (Debian's docker-registry, the CNCF
// distribution server) on a loopback port, storing in a test directory.
type Registry struct {
	Addr string // 127.0.0.1:port
	g    *group
	log  string
}

// StartRegistry starts the registry server bin on a free loopback port.
func StartRegistry(ctx context.Context, bin, dir string) (*Registry, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	r := &Registry{Addr: "127.0.0.1:" + strconv.Itoa(port), log: filepath.Join(dir, "registry.log")}
	cfg := fmt.Sprintf("version: 0.1\nlog: {level: warn}\nstorage: {filesystem: {rootdirectory: %s}}\nhttp: {addr: %q}\n",
		filepath.Join(dir, "registry"), r.Addr)
	cfgFile := filepath.Join(dir, "registry.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	if r.g, err = startGroup(exec.Command(bin, "serve", cfgFile), r.log); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		resp, err := http.Get("http://" + r.Addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return r, nil
			}
		}
		select {
		case <-r.g.done:
			return nil, fmt.Errorf("the registry exited at start: %s", r.Logs())
		case <-ctx.Done():
			r.Stop()
			return nil, fmt.Errorf("the registry did not answer on %s: %s", r.Addr, r.Logs())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Logs returns the registry's output.
func (r *Registry) Logs() string { b, _ := os.ReadFile(r.log); return string(b) }

// Stop ends the registry.
func (r *Registry) Stop() { r.g.Stop(5 * time.Second) }

// Gateway is Envoy Gateway in standalone mode, with the directories of its
// Host infrastructure and the resource directory it watches.
type Gateway struct {
	ConfigHome, DataHome, StateHome, RuntimeDir string
	Resources                                   string // the directory of resources it reads
	Config                                      string // the EnvoyGateway configuration file

	g   *group
	log string
}

// GatewayOptions: Bin is envoy-gateway, Envoy the binary it runs as version
// EnvoyVersion (linked into DATAHOME/envoy-versions/VERSION/bin/envoy so
// nothing is downloaded), Dir the test directory, and Config the text of an
// EnvoyGateway configuration in which ${EG_RESOURCES}, ${EG_CONFIG_HOME},
// ${EG_DATA_HOME}, ${EG_STATE_HOME} and ${EG_RUNTIME_DIR} are replaced.
type GatewayOptions struct {
	Bin, Envoy, EnvoyVersion, Dir, Config string
	// Resources are written to the resource directory before the start:
	// file name → content.
	Resources map[string]string
}

// gatewayOwnerEnv marks the processes of an Envoy Gateway started by a
// test with the test process ("pid.starttime"): Envoy Gateway dies with the
// test (Pdeathsig) but the Envoy it started would not, so the next run
// removes what a killed one left.
const gatewayOwnerEnv = "SLUICE_EG_OWNER"

// ReapGatewayLeftovers kills the processes of Envoy Gateways (and their
// Envoys) whose test process is gone. Call it holding the machine lock.
func ReapGatewayLeftovers() []int {
	var killed []int
	eachProc("environ", func(pid int, env []byte) {
		for _, kv := range strings.Split(string(env), "\x00") {
			owner, ok := strings.CutPrefix(kv, gatewayOwnerEnv+"=")
			if !ok {
				continue
			}
			opid, start, _ := strings.Cut(owner, ".")
			if n, err := strconv.Atoi(opid); err != nil || procStart(n) != start {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				killed = append(killed, pid)
			}
		}
	})
	return killed
}

// eachProc calls fn with every process's /proc/<pid>/<file> it can read.
func eachProc(file string, fn func(pid int, b []byte)) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/" + file); err == nil {
			fn(pid, b)
		}
	}
}

// StartGateway runs `envoy-gateway certgen --local`, then starts
// `envoy-gateway server` in a session of its own. HOME is the test
// directory, so its wasm cache ($HOME/.eg/wasm) starts empty.
func StartGateway(ctx context.Context, o GatewayOptions) (*Gateway, error) {
	g := &Gateway{
		ConfigHome: filepath.Join(o.Dir, "config"), DataHome: filepath.Join(o.Dir, "data"),
		StateHome: filepath.Join(o.Dir, "state"), RuntimeDir: filepath.Join(o.Dir, "run"),
		Resources: filepath.Join(o.Dir, "resources"), Config: filepath.Join(o.Dir, "envoy-gateway.yaml"),
		log: filepath.Join(o.Dir, "envoy-gateway.log"),
	}
	link := filepath.Join(g.DataHome, "envoy-versions", o.EnvoyVersion, "bin", "envoy")
	for _, d := range []string{g.ConfigHome, g.StateHome, g.RuntimeDir, g.Resources, filepath.Join(o.Dir, "staging"), filepath.Dir(link)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.Symlink(o.Envoy, link); err != nil {
		return nil, err
	}
	cfg, err := Expand(o.Config, map[string]string{"EG_RESOURCES": g.Resources, "EG_CONFIG_HOME": g.ConfigHome,
		"EG_DATA_HOME": g.DataHome, "EG_STATE_HOME": g.StateHome, "EG_RUNTIME_DIR": g.RuntimeDir})
	if err != nil {
		return nil, fmt.Errorf("the EnvoyGateway configuration: %v", err)
	}
	if err := os.WriteFile(g.Config, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	for name, content := range o.Resources {
		if err := g.Apply(name, content); err != nil {
			return nil, err
		}
	}
	env := append(os.Environ(), "HOME="+o.Dir,
		gatewayOwnerEnv+"="+strconv.Itoa(os.Getpid())+"."+procStart(os.Getpid()))
	certgen := exec.CommandContext(ctx, o.Bin, "certgen", "--local", "--config-home", g.ConfigHome)
	certgen.Env = env
	if out, err := certgen.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("envoy-gateway certgen --local: %v: %s", err, out)
	}
	server := exec.Command(o.Bin, "server", "--config-path", g.Config)
	server.Env = env
	if g.g, err = startGroup(server, g.log); err != nil {
		return nil, err
	}
	return g, nil
}

// Apply writes a resource file into the resource directory atomically (a
// rename), so Envoy Gateway never reads half a file.
func (g *Gateway) Apply(name, content string) error {
	tmp := filepath.Join(filepath.Dir(g.Resources), "staging", name)
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(g.Resources, name))
}

// Delete removes a resource file.
func (g *Gateway) Delete(name string) error { return os.Remove(filepath.Join(g.Resources, name)) }

// Exited reports whether Envoy Gateway has exited.
func (g *Gateway) Exited() bool {
	select {
	case <-g.g.done:
		return true
	default:
		return false
	}
}

// Pids returns Envoy Gateway's pid and those of the processes it started.
func (g *Gateway) Pids() []int { return g.g.Pids() }

// Stop ends Envoy Gateway (SIGTERM stops its Envoy) and, after a grace
// period, kills whatever of its processes still runs.
func (g *Gateway) Stop() { g.g.Stop(15 * time.Second) }

// Logs returns Envoy Gateway's output (Envoy's own log included).
func (g *Gateway) Logs() string { b, _ := os.ReadFile(g.log); return string(b) }

var adminAddrRE = regexp.MustCompile(`^[0-9.]+:[0-9]+$`)

// EnvoyAdmin returns the address of the admin interface of the Envoy that
// Envoy Gateway runs (a random port, written to
// RUNTIMEDIR/<run>/admin-address.txt), or "" before it started.
func (g *Gateway) EnvoyAdmin() string {
	files, _ := filepath.Glob(filepath.Join(g.RuntimeDir, "*", "admin-address.txt"))
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && adminAddrRE.MatchString(strings.TrimSpace(string(b))) {
			return strings.TrimSpace(string(b))
		}
	}
	return ""
}

// EnvoyStats returns the Envoy's counters and gauges whose name matches
// filter (a regular expression).
func (g *Gateway) EnvoyStats(filter string) (map[string]uint64, error) {
	addr := g.EnvoyAdmin()
	if addr == "" {
		return nil, errors.New("the Envoy of Envoy Gateway has not written its admin address")
	}
	resp, err := http.Get("http://" + addr + "/stats?filter=" + filter)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var b strings.Builder
	if _, err := io.Copy(&b, resp.Body); err != nil {
		return nil, err
	}
	return ParseStats(b.String()), nil
}
