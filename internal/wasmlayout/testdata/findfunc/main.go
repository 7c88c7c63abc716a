// Command findfunc exercises what the Go runtime looks functions up by PC
// for (runtime.findfunc), and its heap grown by new arenas: stack scans by the collector, frames of
// runtime.Callers and a recovered panic's stack. TestFindFuncWithoutTable
// runs it, built with the runtime overlay and without findfunctab, and
// compares its output with the same program built as Go builds it.
package main

import (
	"fmt"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
)

type node struct {
	depth int
	next  *node
	pad   [64]byte
}

// deep keeps a pointer live in every frame while the collector runs at the
// bottom, so the stack scan reads each frame's map by its PC, then checks
// that nothing it holds was freed and reused.
//
//go:noinline
func deep(n int, prev *node) int {
	cur := &node{depth: n, next: prev}
	if n == 0 {
		for range 3 {
			runtime.GC()
			_ = make([]byte, 1<<16)
		}
		return callers()
	}
	got := deep(n-1, cur)
	if cur.depth != n || cur.next != prev {
		panic("a frame's pointer was not kept by the collector")
	}
	return got
}

// callers prints the functions of the stack by name, innermost first.
func callers() int {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(1, pcs)])
	n := 0
	for {
		f, more := frames.Next()
		fmt.Println("frame", f.Function)
		n++
		if !more {
			return n
		}
	}
}

//go:noinline
func fails(m map[string]int) (stack string) {
	defer func() {
		if r := recover(); r != nil {
			stack = fmt.Sprint(r) + "\n" + string(debug.Stack())
		}
	}()
	var a []int
	return fmt.Sprint(a[m["x"]+3])
}

// zeroed grows the heap by new arenas, one large allocation after
// another, each written over before it is dropped, and reports whether
// every allocation came back zeroed: memory the runtime takes for an arena
// or hands back through its free list must read as zero.
func zeroed() bool {
	var keep [][]byte
	for round := range 4 {
		for i := range 12 {
			b := make([]byte, (300+round*100+i*37)<<10)
			for _, c := range b {
				if c != 0 {
					return false
				}
			}
			for j := range b {
				b[j] = byte(j) | 1
			}
			if i%3 == 0 {
				keep = append(keep, b)
			}
		}
		keep = keep[:len(keep)/2]
		runtime.GC()
	}
	return len(keep) > 0
}

func main() {
	fmt.Println("zeroed", zeroed())
	fmt.Println("frames", deep(40, nil))
	for _, line := range strings.Split(fails(map[string]int{}), "\n") {
		if !strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, "goroutine ") {
			name, _, _ := strings.Cut(line, "({") // a function's line, less its arguments' values
			name, _, _ = strings.Cut(name, "(0x")
			fmt.Println("stack", name)
		}
	}
	fmt.Println("func", runtime.FuncForPC(reflect.ValueOf(deep).Pointer()).Name())
}
