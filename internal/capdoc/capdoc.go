// Package capdoc reads the capabilities that docs/operations.md
// ("Capability restriction") says the plugin needs, for the tests that
// check the list against the module and run Envoy with it.
package capdoc

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// Read returns the words of the first fenced text block after the heading
// "Capability restriction" of docs/operations.md under the repository root.
func Read(root string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		return nil, err
	}
	_, rest, ok := strings.Cut(string(b), "\n## Capability restriction\n")
	if !ok {
		return nil, errors.New("docs/operations.md has no section Capability restriction")
	}
	_, rest, ok1 := strings.Cut(rest, "```text\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok1 || !ok2 {
		return nil, errors.New("docs/operations.md, Capability restriction: no fenced text block")
	}
	return strings.Fields(block), nil
}
