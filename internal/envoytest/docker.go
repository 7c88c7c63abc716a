package envoytest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Container mode. Users run Sluice in Envoy's Docker image, so the harness
// can run every Envoy it starts in a container of the image `make image`
// builds instead of as a process:
//
//	SLUICE_ENVOY=docker go test ./e2e/...
//
// Envoy then runs as `docker run --network host IMAGE <the same arguments>`:
// host networking keeps every address the generated bootstrap names (the
// 127.0.0.1 listener and admin, the upstreams) meaning what it means for a
// process, and the working directory (bootstrap, LDS file, admin address
// file) and the wasm modules are bind-mounted at their own absolute paths, so
// generated configurations work unchanged. Envoy runs as the caller's user, so
// the files it writes stay removable, and with --use-dynamic-base-id, so
// containers and processes can share the host network. Logs come through the
// attached `docker run`; Pid is the container's Envoy as the host sees it, so
// ResidentMemory reads its RSS.
const (
	// ModeEnv selects where Envoy runs: "process" (the default) or "docker".
	ModeEnv = "SLUICE_ENVOY"
	// ImageEnv overrides the image of docker mode.
	ImageEnv = "SLUICE_ENVOY_IMAGE"
	// DefaultImage is what `make image` builds: Envoy 1.40.0 as entrypoint,
	// the plugin at /etc/envoy/sluice.wasm.
	DefaultImage = "sluice-envoy:1.40.0"
	// DockerPrefix in Options.Bin (and in what Target and RequireEnvoy return
	// in docker mode) means "run this image": "docker:sluice-envoy:1.40.0".
	DockerPrefix = "docker:"
	// ContainerPrefix starts the name of every container the harness runs;
	// they also carry the label OwnerLabel=<pid>.<start time> of the test
	// process, which removes leftovers of dead processes.
	ContainerPrefix = "sluice-envoytest-"
	OwnerLabel      = "sluice.envoytest.owner"
)

// Mode returns "docker" when $SLUICE_ENVOY is "docker" (or "container"),
// else "process".
func Mode() string {
	switch strings.ToLower(os.Getenv(ModeEnv)) {
	case "docker", "container":
		return "docker"
	}
	return "process"
}

// Image returns the image of docker mode: $SLUICE_ENVOY_IMAGE or DefaultImage.
func Image() string {
	if img := os.Getenv(ImageEnv); img != "" {
		return img
	}
	return DefaultImage
}

// Target returns what the current mode runs: FindEnvoy's binary in process
// mode; in docker mode DockerPrefix+Image() once Docker answers and the image
// exists (run `make image`).
func Target() (string, error) {
	if Mode() != "docker" {
		return FindEnvoy()
	}
	if err := CheckImage(context.Background(), Image()); err != nil {
		return "", err
	}
	return DockerPrefix + Image(), nil
}

// imageOf returns the image named by a Bin of the form docker:IMAGE.
func imageOf(bin string) (string, bool) {
	if img, ok := strings.CutPrefix(bin, DockerPrefix); ok && img != "" {
		return img, true
	}
	return "", false
}

var (
	checkMu   sync.Mutex
	checkedOK = map[string]bool{}
)

// CheckImage returns nil when the docker command works, the daemon answers
// and image exists locally; the error says how to get there otherwise.
func CheckImage(ctx context.Context, image string) error {
	checkMu.Lock()
	defer checkMu.Unlock()
	if checkedOK[image] {
		return nil
	}
	if _, err := exec.LookPath("docker"); err != nil {
		return errors.New("envoytest: docker mode: the docker command is missing (`make image` installs docker.io and starts dockerd)")
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "version", "--format", "{{.Server.Version}}").CombinedOutput(); err != nil {
		return fmt.Errorf("envoytest: docker mode: the Docker daemon does not answer (.ci/docker starts it): %v: %s", err, bytes.TrimSpace(out))
	}
	if out, err := exec.CommandContext(ctx, "docker", "image", "inspect", "-f", "{{.Id}}", image).CombinedOutput(); err != nil {
		return fmt.Errorf("envoytest: docker mode: image %s is missing (run `make image`): %v: %s", image, err, bytes.TrimSpace(out))
	}
	checkedOK[image] = true
	reapOnce.Do(reapLeftovers)
	return nil
}

// ImageInfo describes image for logs: "sluice-envoy:1.40.0 sha256:0123456789ab".
func ImageInfo(ctx context.Context, image string) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", "image", "inspect", "-f", "{{.Id}}", image).Output()
	if err != nil {
		return "", fmt.Errorf("envoytest: docker image inspect %s: %v", image, err)
	}
	id := strings.TrimSpace(string(out))
	if len(id) > 19 {
		id = id[:19]
	}
	return image + " " + id, nil
}

// owner identifies this process for the container label: its pid and its
// start time (so a recycled pid is not taken for the owner).
var owner = func() string {
	return strconv.Itoa(os.Getpid()) + "." + procStart(os.Getpid())
}()

// procStart returns the start time of process pid (field 22 of
// /proc/<pid>/stat) or "" when it does not exist (or there is no /proc).
func procStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

var (
	reapOnce sync.Once
	seq      atomic.Int64
)

// reapLeftovers removes the containers of test processes that died without
// stopping them (a test binary killed by its timeout, or by a signal).
func reapLeftovers() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "ps", "-a", "--filter", "label="+OwnerLabel,
		"--format", `{{.Names}} {{.Label "`+OwnerLabel+`"}}`).Output()
	if err != nil {
		return
	}
	var dead []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || !strings.HasPrefix(f[0], ContainerPrefix) {
			continue
		}
		pid, start, _ := strings.Cut(f[1], ".")
		n, err := strconv.Atoi(pid)
		if err != nil || procStart(n) != start {
			dead = append(dead, f[0])
		}
	}
	if len(dead) > 0 {
		_ = exec.CommandContext(ctx, "docker", append([]string{"rm", "-f"}, dead...)...).Run()
	}
}

var (
	ranContainers atomic.Int64
	ranProcesses  atomic.Int64
	imagesMu      sync.Mutex
	imagesRan     = map[string]bool{}
)

// Summary says how many Envoys this process started (ready) and where, e.g.
// "envoytest: 41 Envoys ran in containers of sluice-envoy:1.40.0 sha256:01a675198f12, 0 as processes".
// TestMain prints it so that test output shows what the e2e tests ran against.
func Summary() string {
	imagesMu.Lock()
	var imgs []string
	for img := range imagesRan {
		if info, err := ImageInfo(context.Background(), img); err == nil {
			img = info
		}
		imgs = append(imgs, img)
	}
	imagesMu.Unlock()
	sort.Strings(imgs)
	where := "containers"
	if len(imgs) > 0 {
		where += " of " + strings.Join(imgs, ", ")
	}
	return fmt.Sprintf("envoytest: %d Envoys ran in %s, %d as processes (%s=%s)",
		ranContainers.Load(), where, ranProcesses.Load(), ModeEnv, Mode())
}

var (
	liveMu sync.Mutex
	live   = map[*Envoy]bool{}
)

// StopAll stops every Envoy this process started that is still running.
// Call it at the end of TestMain so that no container outlives the test
// binary even when a test forgot Stop (containers, unlike processes, are not
// killed with their parent).
func StopAll() {
	liveMu.Lock()
	es := make([]*Envoy, 0, len(live))
	for e := range live {
		es = append(es, e)
	}
	liveMu.Unlock()
	for _, e := range es {
		_ = e.Stop()
	}
}

// dockerRun returns the `docker run` command that runs image with Envoy's
// arguments args, working directory dir (mounted read-write) and the files
// mounts (mounted read-only), each at its own absolute path.
func dockerRun(image, name, dir string, mounts []string, args []string) *exec.Cmd {
	a := []string{"run", "--rm", "--name", name,
		"--label", OwnerLabel + "=" + owner,
		"--network", "host",
		"--user", strconv.Itoa(os.Getuid()) + ":" + strconv.Itoa(os.Getgid()),
		// Logs come through the attached client; the daemon keeps no copy.
		"--log-driver", "none",
	}
	if dir != "" {
		a = append(a, "-v", dir+":"+dir, "-w", dir)
	}
	for _, m := range mounts {
		if dir != "" && strings.HasPrefix(m, dir+string(filepath.Separator)) {
			continue // inside the mounted directory already
		}
		a = append(a, "-v", m+":"+m+":ro")
	}
	a = append(a, image)
	a = append(a, args...)
	return exec.Command("docker", a...)
}

func containerName() string {
	return fmt.Sprintf("%s%d-%d", ContainerPrefix, os.Getpid(), seq.Add(1))
}

// containerPid returns the host pid of the container's main process (Envoy).
func containerPid(ctx context.Context, name string) (int, error) {
	out, err := exec.CommandContext(ctx, "docker", "inspect", "-f", "{{.State.Pid}}", name).Output()
	if err != nil {
		return 0, fmt.Errorf("envoytest: docker inspect %s: %v", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("envoytest: docker inspect %s: pid %q", name, bytes.TrimSpace(out))
	}
	return pid, nil
}

// dockerSignal sends sig to the container (errors ignored: it may be gone).
func dockerSignal(name, sig string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = exec.CommandContext(ctx, "docker", "kill", "--signal", sig, name).Run()
}

func dockerRemove(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = exec.CommandContext(ctx, "docker", "rm", "-f", name).Run()
}

var absPathRE = regexp.MustCompile(`/[^\s"',\]\}\[\{]+`)

// referencedFiles returns the existing regular files whose absolute paths
// appear in config (wasm modules, LDS files...), sorted, so that validating a
// configuration in a container can mount what it names.
func referencedFiles(config string) []string {
	seen := map[string]bool{}
	for _, p := range absPathRE.FindAllString(config, -1) {
		p = filepath.Clean(p)
		if seen[p] {
			continue
		}
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			seen[p] = true
		}
	}
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}
