package envoytest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Highly available Redis under the rate-limit service: a master, a replica
// and three Sentinels, or a Redis Cluster of three masters, all Debian's
// redis-server 7.0 on loopback with kernel-chosen ports.

// Proc is a redis-server process (a data node or a Sentinel) on
// 127.0.0.1, started with args (its port included).
type Proc struct {
	Port int
	bin  string
	args []string
	dir  string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

// Addr is host:port.
func (p *Proc) Addr() string { return "127.0.0.1:" + strconv.Itoa(p.Port) }

// Start starts the process and waits until its port accepts connections.
func (p *Proc) Start(ctx context.Context) error {
	log, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	p.cmd = exec.Command(p.bin, p.args...)
	p.cmd.Dir = p.dir
	p.cmd.Stdout, p.cmd.Stderr = log, log
	setProcAttr(p.cmd)
	if err := p.cmd.Start(); err != nil {
		log.Close()
		return err
	}
	p.done = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); log.Close(); close(done) }(p.cmd, p.done)
	return waitTCP(ctx, p.Addr(), p.done)
}

// Kill kills the process with SIGKILL (a machine lost) and waits for it.
func (p *Proc) Kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	p.cmd = nil
}

// Logs returns the process's output.
func (p *Proc) Logs() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

func newProc(bin, dir, name string, args ...string) (*Proc, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	d := filepath.Join(dir, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return nil, err
	}
	a := append([]string{}, args...)
	a = append(a, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", d)
	return &Proc{Port: port, bin: bin, args: a, dir: d, log: filepath.Join(d, name+".log")}, nil
}

// dataNode is a redis-server without persistence.
func dataNode(bin, dir, name string, extra ...string) (*Proc, error) {
	return newProc(bin, dir, name, append([]string{"--save", "", "--appendonly", "no"}, extra...)...)
}

// RedisDo sends one command to the Redis at addr and returns its reply:
// a status, integer or bulk string as one element, an array flattened
// (nested arrays too), nil for a null reply.
func RedisDo(addr string, args ...string) ([]string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return nil, err
	}
	return readReply(bufio.NewReader(c))
}

func readReply(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return nil, errors.New("redis: empty reply")
	}
	switch line[0] {
	case '*':
		n, _ := strconv.Atoi(line[1:])
		var out []string
		for i := 0; i < n; i++ {
			s, err := readReply(r)
			if err != nil {
				return nil, err
			}
			out = append(out, s...)
		}
		return out, nil
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return []string{string(buf[:n])}, nil
	case '-':
		return nil, fmt.Errorf("redis: %s", line[1:])
	}
	return []string{line[1:]}, nil
}

// field returns the value after key in a flat list of pairs.
func field(kv []string, key string) string {
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == key {
			return kv[i+1]
		}
	}
	return ""
}

// SentinelSet is a Redis master, its replica and three Sentinels watching
// them (quorum 2, a master down after 1 s).
type SentinelSet struct {
	Name      string // the master's name at the Sentinels
	Master    *Proc
	Replica   *Proc
	Sentinels []*Proc
}

// FindSentinel returns the Sentinel program: $REDIS_SENTINEL, else
// redis-sentinel on PATH (Debian's redis-sentinel package).
func FindSentinel() (string, error) {
	return envOrPath("REDIS_SENTINEL", "redis-sentinel", "make test installs it: apt-get install -y redis-sentinel")
}

// StartSentinelT starts a SentinelSet for t (stopped in t.Cleanup) and
// waits until every Sentinel knows the replica and its two peers, so that
// a failover can happen when the test kills the master.
func StartSentinelT(t testing.TB) *SentinelSet {
	t.Helper()
	redisBin, _ := RequireFleet(t)
	sentinelBin, err := FindSentinel()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skipf("skipping: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	s, err := startSentinelSet(ctx, redisBin, sentinelBin, t.TempDir())
	if s != nil {
		t.Cleanup(func() {
			for _, p := range append([]*Proc{s.Master, s.Replica}, s.Sentinels...) {
				if p != nil {
					p.Kill()
				}
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func startSentinelSet(ctx context.Context, redisBin, sentinelBin, dir string) (*SentinelSet, error) {
	s := &SentinelSet{Name: "sluice"}
	var err error
	if s.Master, err = dataNode(redisBin, dir, "master"); err != nil {
		return s, err
	}
	if err := s.Master.Start(ctx); err != nil {
		return s, err
	}
	if s.Replica, err = dataNode(redisBin, dir, "replica", "--replicaof", "127.0.0.1", strconv.Itoa(s.Master.Port)); err != nil {
		return s, err
	}
	if err := s.Replica.Start(ctx); err != nil {
		return s, err
	}
	for i := 0; i < 3; i++ {
		p, err := newSentinel(sentinelBin, dir, i, s.Name, s.Master.Port)
		if err != nil {
			return s, err
		}
		s.Sentinels = append(s.Sentinels, p)
		if err := p.Start(ctx); err != nil {
			return s, err
		}
	}
	return s, s.waitKnown(ctx)
}

// newSentinel writes a Sentinel's configuration (Sentinel rewrites it, so
// it is a file of its own) and returns the process, not started.
func newSentinel(bin, dir string, i int, name string, masterPort int) (*Proc, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	d := filepath.Join(dir, fmt.Sprintf("sentinel-%d", i))
	if err := os.MkdirAll(d, 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(d, "sentinel.conf")
	body := fmt.Sprintf(`port %d
bind 127.0.0.1
dir %s
sentinel monitor %s 127.0.0.1 %d 2
sentinel down-after-milliseconds %s 1000
sentinel failover-timeout %s 10000
sentinel parallel-syncs %s 1
`, port, d, name, masterPort, name, name, name)
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		return nil, err
	}
	return &Proc{Port: port, bin: bin, args: []string{conf}, dir: d, log: filepath.Join(d, "sentinel.log")}, nil
}

// waitKnown waits until every Sentinel reports the replica and two other
// Sentinels for the master.
func (s *SentinelSet) waitKnown(ctx context.Context) error {
	for {
		known := 0
		var last []string
		for _, p := range s.Sentinels {
			m, err := RedisDo(p.Addr(), "SENTINEL", "MASTER", s.Name)
			last = m
			if err == nil && field(m, "num-slaves") == "1" && field(m, "num-other-sentinels") == "2" {
				known++
			}
		}
		if known == len(s.Sentinels) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sentinels do not know the replica and each other: %v (last: %v)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// URL is REDIS_URL for envoyproxy/ratelimit with REDIS_TYPE=sentinel: the
// master's name, then every Sentinel.
func (s *SentinelSet) URL() string {
	parts := []string{s.Name}
	for _, p := range s.Sentinels {
		parts = append(parts, p.Addr())
	}
	return strings.Join(parts, ",")
}

// MasterAddr is the master the Sentinels name now (the first that
// answers).
func (s *SentinelSet) MasterAddr() (string, error) {
	var err error
	for _, p := range s.Sentinels {
		var r []string
		if r, err = RedisDo(p.Addr(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.Name); err == nil && len(r) == 2 {
			return r[0] + ":" + r[1], nil
		}
	}
	return "", fmt.Errorf("no sentinel names a master: %v", err)
}

// Cluster is a Redis Cluster of three masters (no replicas).
type Cluster struct {
	Nodes []*Proc
}

// StartClusterT starts a Cluster for t (stopped in t.Cleanup) and waits
// until every node says the cluster is ok.
func StartClusterT(t testing.TB) *Cluster {
	t.Helper()
	redisBin, _ := RequireFleet(t)
	cli, err := envOrPath("REDIS_CLI", "redis-cli", "apt-get install -y redis-tools (redis-server depends on it)")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	c := &Cluster{}
	t.Cleanup(func() {
		for _, p := range c.Nodes {
			p.Kill()
		}
	})
	dir := t.TempDir()
	for i := 0; i < 3; i++ {
		bus, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		p, err := dataNode(redisBin, dir, fmt.Sprintf("node-%d", i), "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-port", strconv.Itoa(bus), "--cluster-node-timeout", "2000")
		if err != nil {
			t.Fatal(err)
		}
		c.Nodes = append(c.Nodes, p)
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"--cluster", "create"}
	for _, p := range c.Nodes {
		args = append(args, p.Addr())
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, p := range c.Nodes {
		for {
			r, err := RedisDo(p.Addr(), "CLUSTER", "INFO")
			if err == nil && len(r) == 1 && strings.Contains(r[0], "cluster_state:ok") {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("cluster not ok at %s: %v %v", p.Addr(), r, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return c
}

// URL is REDIS_URL for envoyproxy/ratelimit with REDIS_TYPE=cluster: every
// node.
func (c *Cluster) URL() string {
	var parts []string
	for _, p := range c.Nodes {
		parts = append(parts, p.Addr())
	}
	return strings.Join(parts, ",")
}

// RLST starts, for t, the rate-limit service with the given configuration
// files and environment (REDIS_TYPE, REDIS_URL and so on, over the
// defaults), in a directory of its own, stopped in t.Cleanup.
func RLST(t testing.TB, configs map[string]string, env ...string) *RLS {
	t.Helper()
	_, rlsBin := RequireFleet(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := StartRLSWith(ctx, rlsBin, t.TempDir(), configs, env...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("rate-limit service log:\n%s", tailLines(s.Logs(), 40))
		}
	})
	return s
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Kill kills Envoy with SIGKILL (a machine lost) and waits for it to exit;
// Stop then only cleans up (the exit was asked for: no error).
func (e *Envoy) Kill() {
	if e.container != "" {
		dockerSignal(e.container, "KILL")
	}
	if e.cmd != nil && e.cmd.Process != nil {
		_ = e.cmd.Process.Kill()
		<-e.done
		e.waitErr = nil
	}
}
