// Package apidump prints the exported API of a Go package as sorted lines
// (declarations without bodies, comments or unexported fields), so that a
// golden copy of it can be diffed: an accidental breaking change to a
// released module (the SDK's) then shows as a changed or missing line.
package apidump

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/printer"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
)

// Dir returns the exported API of the package in dir (its non-test files
// for this platform), one declaration per line, sorted.
func Dir(dir string) ([]string, error) {
	pkg, err := build.ImportDir(dir, 0)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var lines []string
	for _, name := range pkg.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			lines = append(lines, decl(fset, d)...)
		}
	}
	sort.Strings(lines)
	return lines, nil
}

// decl renders the exported parts of one top-level declaration.
func decl(fset *token.FileSet, d ast.Decl) []string {
	switch d := d.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() || (d.Recv != nil && !exportedRecv(d.Recv)) {
			return nil
		}
		d.Body, d.Doc = nil, nil
		return []string{render(fset, d)}
	case *ast.GenDecl:
		var out []string
		for _, s := range d.Specs {
			out = append(out, spec(fset, d.Tok, s)...)
		}
		return out
	}
	return nil
}

// spec renders an exported type, constant or variable.
func spec(fset *token.FileSet, tok token.Token, s ast.Spec) []string {
	switch s := s.(type) {
	case *ast.TypeSpec:
		if !s.Name.IsExported() {
			return nil
		}
		s.Doc, s.Comment = nil, nil
		dropUnexported(s.Type)
		return []string{"type " + render(fset, s)}
	case *ast.ValueSpec:
		var out []string
		for _, n := range s.Names {
			if !n.IsExported() {
				continue
			}
			line := tok.String() + " " + n.Name
			if s.Type != nil {
				line += " " + render(fset, s.Type)
			}
			out = append(out, line)
		}
		return out
	}
	return nil
}

// dropUnexported removes the unexported fields of a struct type and the
// unexported methods of an interface: they are not part of the API.
func dropUnexported(t ast.Expr) {
	var fl *ast.FieldList
	switch t := t.(type) {
	case *ast.StructType:
		fl = t.Fields
	case *ast.InterfaceType:
		fl = t.Methods
	default:
		return
	}
	kept := fl.List[:0]
	for _, f := range fl.List {
		f.Doc, f.Comment = nil, nil
		if len(f.Names) == 0 || ast.IsExported(f.Names[0].Name) {
			kept = append(kept, f)
		}
	}
	fl.List = kept
}

func exportedRecv(recv *ast.FieldList) bool {
	t := recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return false
		}
	}
}

// render prints a node on one line: newlines and runs of blanks become one
// space, so a reformatting never reads as an API change.
func render(fset *token.FileSet, n any) string {
	var b bytes.Buffer
	cfg := printer.Config{Mode: printer.RawFormat}
	if err := cfg.Fprint(&b, fset, n); err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

// Diff lists the lines of want missing from got ("- ") and the lines of got
// not in want ("+ "), empty lines ignored; "" when the two sets are equal.
func Diff(want, got []string) string {
	in := func(set []string) map[string]bool {
		m := map[string]bool{}
		for _, l := range set {
			if l != "" {
				m[l] = true
			}
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	for _, l := range want {
		if l != "" && !g[l] {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range got {
		if l != "" && !w[l] {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}
