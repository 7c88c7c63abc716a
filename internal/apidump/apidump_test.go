package apidump

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const src = `package p

// T is documented.
type T struct {
	Exported int // a comment
	hidden   string
}

type hiddenT struct{ X int }

func (hiddenT) M() {}

// F is exported.
func F(a int) (string, error) { return "", nil }

func (t *T) Method() { _ = t.hidden }

const (
	A int = 1
	b     = 2
)

var V, w = 1, 2
`

func TestDirKeepsOnlyTheExportedAPI(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p_test.go"), []byte("package p\nfunc TestX() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Dir(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"const A int",
		"func (t *T) Method()",
		"func F(a int) (string, error)",
		"type T struct { Exported int }",
		"var V",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("Dir:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestDiffShowsRemovedAndAdded(t *testing.T) {
	d := Diff([]string{"func A()", "func B()", ""}, []string{"func B()", "func C()"})
	if d != "- func A()\n+ func C()\n" {
		t.Fatalf("Diff = %q", d)
	}
	if d := Diff([]string{"func A()", ""}, []string{"func A()"}); d != "" {
		t.Fatalf("equal sets: Diff = %q", d)
	}
}
