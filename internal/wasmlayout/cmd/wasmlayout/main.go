// Command wasmlayout prints where a Go wasip1 module's static data lies and
// the gap the Go runtime would clear before its first heap arena (see
// package wasmlayout). `make build` links the plugin, then links it again
// with the data segment where this prints it, when that moves it:
//
//	go run ./internal/wasmlayout/cmd/wasmlayout -data-addr file.wasm
//
// prints the linker's -D value (hex) that leaves no gap, or nothing when the
// module has none. With -max-gap N it fails when the gap is over N bytes.
//
// The build also links the plugin without runtime.findfunctab:
//
//	go run ./internal/wasmlayout/cmd/wasmlayout -overlay DIR -goroot GOROOT
//
// writes the runtime's findfunc that does without the table and prints the
// -overlay file to build with, and
//
//	go run ./internal/wasmlayout/cmd/wasmlayout -drop-findfunctab file.wasm
//
// rewrites a module so built with the table left out of its data segments.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/sluicehq/sluice/internal/wasmlayout"
)

func main() {
	dataAddr := flag.Bool("data-addr", false, "print the -D value that leaves no arena gap (nothing when there is none)")
	maxGap := flag.Int64("max-gap", -1, "fail when the arena gap is over this many bytes")
	overlay := flag.String("overlay", "", "write the runtime overlay into this directory and print its -overlay file")
	goroot := flag.String("goroot", "", "the GOROOT the module is built with (with -overlay)")
	drop := flag.Bool("drop-findfunctab", false, "rewrite file.wasm without runtime.findfunctab in its data")
	flag.Parse()
	if *overlay != "" {
		path, err := wasmlayout.WriteOverlay(*goroot, *overlay, nil)
		exitOn(err)
		fmt.Println(path)
		return
	}
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: wasmlayout [-data-addr] [-max-gap bytes] [-drop-findfunctab] file.wasm | -overlay dir -goroot goroot")
		os.Exit(2)
	}
	mod, err := os.ReadFile(flag.Arg(0))
	exitOn(err)
	if *drop {
		out, err := wasmlayout.WithoutFuncTab(mod)
		exitOn(err)
		exitOn(os.WriteFile(flag.Arg(0), out, 0o644))
		return
	}
	exitOn(run(mod, *dataAddr, *maxGap))
}

func exitOn(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(mod []byte, dataAddr bool, maxGap int64) error {
	l, err := wasmlayout.Read(mod)
	if err != nil {
		return err
	}
	gap := wasmlayout.ArenaGap(l.End)
	switch {
	case dataAddr:
		if gap > 0 {
			fmt.Printf("%#x\n", l.DataAddr())
		}
	case maxGap >= 0:
		if gap > uint64(maxGap) {
			return fmt.Errorf("the runtime would clear %d bytes before its first heap arena (static data %#x-%#x), over %d", gap, l.DataStart, l.End, maxGap)
		}
	default:
		fmt.Printf("data %#x-%#x, initial memory %d pages, arena gap %d bytes\n", l.DataStart, l.End, l.InitialPages, gap)
	}
	return nil
}
