package wasmlayout

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
)

// TestFindFuncWithoutTable builds testdata/findfunc as Go builds it and as
// make build builds the plugin (the runtime overlay, findfunctab left out
// of the data), runs both, and wants the same output: the collector's
// stack scans keep every frame's pointers, and Callers, a panic's stack
// and FuncForPC name the same functions.
func TestFindFuncWithoutTable(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two wasm modules")
	}
	dir := t.TempDir()
	plain := buildFindFunc(t, dir, "plain.wasm", "")
	goroot := goEnv(t, "GOROOT")
	ov, err := WriteOverlay(goroot, filepath.Join(dir, "overlay"), nil)
	if err != nil {
		t.Fatal(err)
	}
	patched := buildFindFunc(t, dir, "patched.wasm", ov)
	without, err := WithoutFuncTab(patched)
	if err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string][]byte{"as linked": patched, "without the table": without} {
		ft, err := LocateFuncTab(m)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if want := name == "as linked"; ft.Present != want {
			t.Errorf("%s: findfunctab in the data segments = %v, want %v", name, ft.Present, want)
		}
		if ft.Size < 320*1000 {
			t.Errorf("%s: findfunctab of %d bytes, want at least 320 per function", name, ft.Size)
		}
	}
	if len(without) >= len(patched) {
		t.Errorf("the module without the table is %d bytes, as linked %d", len(without), len(patched))
	}
	want := runCommand(t, plain)
	for _, line := range []string{"zeroed true", "frames 45", "frame main.deep", "frame main.main", "func main.deep",
		"stack runtime error: index out of range [3] with length 0", "stack main.fails\n", "stack main.fails.func1()"} {
		if !strings.Contains(want, line) {
			t.Fatalf("the program built as Go builds it printed\n%s\nwithout the line %q", want, line)
		}
	}
	if got := runCommand(t, without); got != want {
		t.Errorf("built without findfunctab the program printed\n%s\nas Go builds it\n%s", got, want)
	}
}

func goEnv(t *testing.T, key string) string {
	out, err := exec.Command("go", "env", key).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", key, err)
	}
	return strings.TrimSpace(string(out))
}

func buildFindFunc(t *testing.T, dir, name, overlay string) []byte {
	out := filepath.Join(dir, name)
	args := []string{"build", "-trimpath", "-ldflags=-s -w", "-o", out}
	if overlay != "" {
		args = append(args, "-overlay", overlay)
	}
	cmd := exec.Command("go", append(args, "./testdata/findfunc")...)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	m, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// runCommand runs a wasip1 command and returns what it printed.
func runCommand(t *testing.T, module []byte) string {
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	var out bytes.Buffer
	_, err := r.InstantiateWithConfig(ctx, module, wazero.NewModuleConfig().WithStdout(&out).WithStderr(&out).WithArgs("findfunc"))
	var exit *sys.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 0) {
		t.Fatalf("running the program: %v\n%s", err, out.Bytes())
	}
	return out.String()
}
