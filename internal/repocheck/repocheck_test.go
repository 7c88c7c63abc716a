package repocheck

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func root(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// walk calls f for every file of the checkout, outside the folders that are
// not the repository's own (the Envoy venv, build output, git's).
func walk(t *testing.T, f func(rel string)) {
	r := root(t)
	err := filepath.WalkDir(r, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(r, p)
		// Skipped whether folders or not: in a git worktree .git is a file,
		// and a checkout may link .venv or build from another.
		if rel == ".venv" || rel == "build" || rel == ".git" || strings.HasSuffix(rel, "/target") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.IsDir() {
			f(filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// moduleOf returns the folder of the go.mod that holds rel's package.
func moduleOf(t *testing.T, relDir string) string {
	for d := relDir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(root(t), d, "go.mod")); err == nil {
			return filepath.ToSlash(d)
		}
		if d == "." {
			t.Fatalf("no go.mod above %s", relDir)
		}
	}
}

var fuzzFunc = regexp.MustCompile(`(?m)^func (Fuzz\w+)\(`)

// TestMakeFuzzRunsEveryFuzzer: each Fuzz function of the repository is in
// the Makefile's FUZZERS (MODULE:PACKAGE:Name), and each entry exists.
func TestMakeFuzzRunsEveryFuzzer(t *testing.T) {
	var found []string
	walk(t, func(rel string) {
		if !strings.HasSuffix(rel, "_test.go") {
			return
		}
		src, err := os.ReadFile(filepath.Join(root(t), rel))
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Dir(rel)
		mod := moduleOf(t, dir)
		pkg, _ := filepath.Rel(mod, dir)
		for _, m := range fuzzFunc.FindAllStringSubmatch(string(src), -1) {
			found = append(found, mod+":./"+strings.TrimPrefix(filepath.ToSlash(pkg), "./")+":"+m[1])
		}
	})
	listed := makeFuzzers(t)
	for i, f := range found {
		found[i] = strings.Replace(f, ":./.:", ":.:", 1)
	}
	slices.Sort(found)
	slices.Sort(listed)
	for _, f := range found {
		if !slices.Contains(listed, f) {
			t.Errorf("fuzzer %s is not in the Makefile's FUZZERS: make fuzz leaves it out", f)
		}
	}
	for _, l := range listed {
		if !slices.Contains(found, l) {
			t.Errorf("FUZZERS lists %s, which no test file defines", l)
		}
	}
	if len(found) == 0 {
		t.Fatal("no fuzzer found in the repository")
	}
}

// makeFuzzers reads the FUZZERS variable of the Makefile.
func makeFuzzers(t *testing.T) []string {
	src, err := os.ReadFile(filepath.Join(root(t), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	i := strings.Index(s, "\nFUZZERS :=")
	if i < 0 {
		t.Fatal("Makefile has no FUZZERS")
	}
	var out []string
	for _, line := range strings.Split(s[i+len("\nFUZZERS :="):], "\n") {
		out = append(out, strings.Fields(strings.TrimSuffix(strings.TrimSpace(line), `\`))...)
		if !strings.HasSuffix(strings.TrimSpace(line), `\`) {
			break
		}
	}
	return out
}

// TestNothingRefersOutsideTheCheckout: no file of the repository cites the
// workspace's own notes (CONTRACT.md, NOTES.md, ../shared), which readers
// of the repository do not have.
func TestNothingRefersOutsideTheCheckout(t *testing.T) {
	outside := regexp.MustCompile("CONTRACT\\.md|NOTES\\.md|(^|[\\s(\"'`])\\.\\./shared/|/work/")
	self := "internal/repocheck/repocheck_test.go"
	walk(t, func(rel string) {
		if rel == self || strings.HasSuffix(rel, ".wasm") || strings.HasSuffix(rel, ".sum") {
			return
		}
		src, err := os.ReadFile(filepath.Join(root(t), rel))
		if err != nil {
			t.Fatal(err)
		}
		if loc := outside.FindIndex(src); loc != nil {
			line := 1 + strings.Count(string(src[:loc[0]]), "\n")
			t.Errorf("%s:%d refers outside the repository: %q", rel, line, src[loc[0]:loc[1]])
		}
	})
}

// TestNoLongFiles: a non-test Go file of the plugin, the SDK, the shared
// packages, the commands and the internal packages holds one concept, and
// one concept reads in at most 700 lines; past that, split it by concept so
// that each file's name says what is in it.
func TestNoLongFiles(t *testing.T) {
	const most = 700
	var long []string
	walk(t, func(rel string) {
		top, _, _ := strings.Cut(filepath.ToSlash(rel), "/")
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") ||
			!slices.Contains([]string{"plugin", "sdk", "shared", "cmd", "internal"}, top) {
			return
		}
		b, err := os.ReadFile(filepath.Join(root(t), rel))
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), "\n"); n > most {
			long = append(long, rel+" ("+strconv.Itoa(n)+")")
		}
	})
	if len(long) > 0 {
		t.Errorf("non-test Go files over %d lines: %v", most, long)
	}
}
