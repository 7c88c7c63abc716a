package envoytest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Compose runs a docker-compose file for a test, under a project name of its
// own ("sluice-e2e-<pid>-<start time>"), so that it never touches a user's
// project of the same file and a later test run can remove what a killed
// one left behind.
type Compose struct {
	File    string // absolute path of the compose file
	Project string
	Env     []string // extra environment for docker-compose (variables the file uses)
}

// ComposeProjectPrefix starts the project name of every Compose.
const ComposeProjectPrefix = "sluice-e2e-"

// RequireCompose lets the test go on when docker-compose is installed and
// the Docker daemon answers with image present; otherwise it fails the test
// when CI is set and skips it otherwise.
func RequireCompose(t testing.TB, image string) {
	t.Helper()
	RequireDocker(t, image)
	if _, err := exec.LookPath("docker-compose"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set and docker-compose is missing (`make image` installs it): %v", err)
		}
		t.Skipf("skipping: docker-compose is missing (`make image` installs it): %v", err)
	}
}

// LockMachine takes an exclusive lock shared by every process on the machine
// (a file in the temporary directory), waiting at most wait, and releases it
// in t.Cleanup. Tests of compose files with fixed ports (the shipped ones)
// take it so that two test runs, from different worktrees, take turns.
func LockMachine(t testing.TB, name string, wait time.Duration) {
	t.Helper()
	path := filepath.Join(os.TempDir(), name+".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(wait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			f.Close()
			t.Fatalf("%s: still held by another test run after %v", path, wait)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Cleanup(func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	})
}

// WaitPortsFree waits until nothing listens on 127.0.0.1:<port> for each
// port (at most wait) and fails the test naming the busy ones otherwise.
func WaitPortsFree(t testing.TB, wait time.Duration, ports ...int) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		var busy []string
		for _, p := range ports {
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				busy = append(busy, strconv.Itoa(p))
				continue
			}
			ln.Close()
		}
		if len(busy) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ports %s on 127.0.0.1 are still in use after %v (the compose file needs them)", strings.Join(busy, ", "), wait)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// ComposeT prepares a Compose of file for the test and tears it down
// (`down -v -t 5`) in t.Cleanup, printing its logs first if the test failed.
// It removes the projects of dead test processes first. Call Up to start it.
func ComposeT(t testing.TB, file string, env ...string) *Compose {
	t.Helper()
	abs, err := filepath.Abs(file)
	if err != nil {
		t.Fatal(err)
	}
	reapComposeLeftovers()
	c := &Compose{File: abs, Env: env,
		Project: ComposeProjectPrefix + strings.ReplaceAll(owner, ".", "-") + "-" + strconv.FormatInt(seq.Add(1), 10)}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := c.Run(context.Background(), "logs", "--no-color", "--tail", "80")
			t.Logf("docker-compose logs (%s):\n%s", c.Project, out)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if out, err := c.Run(ctx, "down", "-v", "-t", "5"); err != nil {
			t.Errorf("docker-compose down: %v\n%s", err, out)
		}
	})
	return c
}

// Run runs docker-compose -p Project -f File args... and returns its
// combined output.
func (c *Compose) Run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker-compose", append([]string{"-p", c.Project, "-f", c.File}, args...)...)
	cmd.Env = append(os.Environ(), c.Env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	setProcAttr(cmd)
	err := cmd.Run()
	return out.String(), err
}

// Up runs `docker-compose up -d` and fails the test if it fails.
func (c *Compose) Up(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := c.Run(ctx, "up", "-d", "--no-build"); err != nil {
		t.Fatalf("docker-compose -f %s up -d: %v\n%s", c.File, err, out)
	}
}

// Containers returns the project's containers as "name image state" lines.
func (c *Compose) Containers(ctx context.Context) ([]string, error) {
	out, err := exec.CommandContext(ctx, "docker", "ps", "-a",
		"--filter", "label=com.docker.compose.project="+c.Project,
		"--format", "{{.Names}} {{.Image}} {{.State}}").Output()
	if err != nil {
		return nil, fmt.Errorf("docker ps: %v", err)
	}
	s := strings.TrimSpace(string(out))
	if s == "" {
		return nil, nil
	}
	return strings.Split(s, "\n"), nil
}

// reapComposeLeftovers removes the containers of Compose projects whose test
// process is dead.
func reapComposeLeftovers() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "ps", "-a", "--filter", "label=com.docker.compose.project",
		"--format", `{{.Names}} {{.Label "com.docker.compose.project"}}`).Output()
	if err != nil {
		return
	}
	var dead []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || !strings.HasPrefix(f[1], ComposeProjectPrefix) {
			continue
		}
		parts := strings.Split(strings.TrimPrefix(f[1], ComposeProjectPrefix), "-")
		if len(parts) < 2 {
			continue
		}
		pid, err := strconv.Atoi(parts[0])
		if err != nil || procStart(pid) != parts[1] {
			dead = append(dead, f[0])
		}
	}
	if len(dead) > 0 {
		_ = exec.CommandContext(ctx, "docker", append([]string{"rm", "-f"}, dead...)...).Run()
	}
}
