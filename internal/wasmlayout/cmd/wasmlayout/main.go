// Command wasmlayout prints where a Go wasip1 module's static data lies and
// the gap the Go runtime would clear before its first heap arena (see
// package wasmlayout). `make build` links the plugin, then links it again
// with the data segment where this prints it, when that moves it:
//
//	go run ./internal/wasmlayout/cmd/wasmlayout -data-addr file.wasm
//
// prints the linker's -D value (hex) that leaves no gap, or nothing when the
// module has none. With -max-gap N it fails when the gap is over N bytes.
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
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: wasmlayout [-data-addr] [-max-gap bytes] file.wasm")
		os.Exit(2)
	}
	mod, err := os.ReadFile(flag.Arg(0))
	if err == nil {
		err = run(mod, *dataAddr, *maxGap)
	}
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
