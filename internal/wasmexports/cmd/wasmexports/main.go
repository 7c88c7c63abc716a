// Command wasmexports removes and renames exports of a WebAssembly module in
// place (see package wasmexports). `make build` runs it on build/sluice.wasm:
//
//	go run ./internal/wasmexports/cmd/wasmexports -drop a,b -rename x=y file.wasm
//
// With -list it prints the exports instead.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/sluicehq/sluice/internal/wasmexports"
)

func main() {
	drop := flag.String("drop", "", "comma-separated exports to remove")
	rename := flag.String("rename", "", "comma-separated old=new export renames")
	list := flag.Bool("list", false, "print the exports and exit")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: wasmexports [-list] [-drop a,b] [-rename old=new,...] file.wasm")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *drop, *rename, *list); err != nil {
		fmt.Fprintln(os.Stderr, "wasmexports:", err)
		os.Exit(1)
	}
}

func run(file, drop, rename string, list bool) error {
	mod, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	if list {
		exps, err := wasmexports.List(mod)
		if err != nil {
			return err
		}
		for _, e := range exps {
			fmt.Printf("%d %s\n", e.Kind, e.Name)
		}
		return nil
	}
	ren := map[string]string{}
	for _, r := range splitList(rename) {
		from, to, ok := strings.Cut(r, "=")
		if !ok || from == "" || to == "" {
			return fmt.Errorf("-rename %q: want old=new", r)
		}
		ren[from] = to
	}
	out, err := wasmexports.Edit(mod, splitList(drop), ren)
	if err != nil {
		return err
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, out, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
