// Command apidump checks the exported API of released packages against its
// golden copy, DIR/testdata/api.txt: `apidump DIR...` fails on a difference
// and prints it; `apidump -w DIR...` writes the golden copies (after an
// intended change, which the diff of api.txt then shows in review).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sluicehq/sluice/internal/apidump"
)

func main() {
	write := flag.Bool("w", false, "write the golden files instead of checking them")
	flag.Parse()
	failed := false
	for _, dir := range flag.Args() {
		if err := run(dir, *write); err != nil {
			fmt.Fprintln(os.Stderr, err)
			failed = true
		}
	}
	if failed {
		fmt.Fprintln(os.Stderr, "apidump: the exported API changed; if intended, run `make api` and commit testdata/api.txt")
		os.Exit(1)
	}
}

func run(dir string, write bool) error {
	lines, err := apidump.Dir(dir)
	if err != nil {
		return fmt.Errorf("%s: %v", dir, err)
	}
	got := strings.Join(lines, "\n") + "\n"
	golden := filepath.Join(dir, "testdata", "api.txt")
	if write {
		if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
			return err
		}
		return os.WriteFile(golden, []byte(got), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		return fmt.Errorf("%s: %v", dir, err)
	}
	if d := apidump.Diff(strings.Split(string(want), "\n"), lines); d != "" {
		return fmt.Errorf("%s: exported API differs from %s:\n%s", dir, golden, d)
	}
	return nil
}
