package wasmlayout

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// A patch replaces text that must occur exactly once in one of the
// runtime's files.
type patch struct{ old, new string }

// runtimePatches are the overlay's changes to the Go 1.26 runtime, per
// file of src/runtime.
var runtimePatches = map[string][]patch{
	// findfunc finds a PC's function record without findfunctab: on wasm
	// a function's PCs share its index (pcOff), so a binary search of ftab,
	// the function table sorted by index, finds it. The search is a dozen
	// steps where the table lookup was one, and findfunc runs per frame of
	// a traceback or a stack scan, not per request.
	"symtab.go": {{
		old: findfuncIndex,
		new: findfuncIndex + `	if GOARCH == "wasm" { // Sluice: findfunctab is not in the module (internal/wasmlayout)
		idx, n := uint32(0), uint32(len(datap.ftab)-1)
		for n > 1 {
			half := n / 2
			if datap.ftab[idx+half].entryoff <= pcOff {
				idx, n = idx+half, n-half
			} else {
				n = half
			}
		}
		funcoff := datap.ftab[idx].funcoff
		return funcInfo{(*_func)(unsafe.Pointer(&datap.pclntable[funcoff])), datap}
	}
`,
	}},
	// The gap skipped to align a new heap arena is not cleared: it lay
	// above the break, and memory above the break is zero (fresh from
	// memory.grow, or cleared by sysFreeOS before the break came down).
	// Clearing it wrote every page of it: up to 448 KiB resident per VM and
	// arena. The free list keeps its invariant, a free block holds zeros.
	"mem_sbrk.go": {{
		old: `func memFree(ap unsafe.Pointer, n uintptr) {
	n = memRound(n)
	memclrNoHeapPointers(ap, n)
`,
		new: `func memFree(ap unsafe.Pointer, n uintptr) {
	n = memRound(n)
	if !memFreeZeroed { // Sluice: see sysReserveAlignedSbrk
		memclrNoHeapPointers(ap, n)
	}
`,
	}, {
		old: `			// Free the area we skipped over for alignment.
			memFree(r, l)
`,
		new: `			// Free the area we skipped over for alignment.
			// Sluice: it lay above the break, so it holds zeros already.
			memFreeZeroed = true
			memFree(r, l)
			memFreeZeroed = false
`,
	}, {
		old: "var memFreelist memHdrPtr // sorted in ascending order\n",
		new: "var memFreelist memHdrPtr // sorted in ascending order\n\n" +
			"// memFreeZeroed tells memFree that its block holds zeros (Sluice).\nvar memFreeZeroed bool\n",
	}},
}

// findfuncIndex is where findfunc has the PC's function index and is
// about to read findfunctab.
const findfuncIndex = `	pcOff, ok := datap.textOff(pc)
	if !ok {
		return funcInfo{}
	}
`

// RuntimeOverlay writes into dir copies of goroot's runtime files with
// runtimePatches applied, and returns the replacements for go build's
// -overlay (each original path to its copy). It fails when a file no
// longer reads as a patch expects, so that a new Go release is looked at
// before a module is built with it.
func RuntimeOverlay(goroot, dir string) (map[string]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	replace := map[string]string{}
	for file, patches := range runtimePatches {
		orig := filepath.Join(goroot, "src", "runtime", file)
		src, err := os.ReadFile(orig)
		if err != nil {
			return nil, err
		}
		text := string(src)
		for _, p := range patches {
			if n := strings.Count(text, p.old); n != 1 {
				return nil, fmt.Errorf("wasmlayout: %s holds the text the overlay patches %d times, want 1 (Go %s: see internal/wasmlayout/overlay.go)", orig, n, runtime.Version())
			}
			text = strings.Replace(text, p.old, p.new, 1)
		}
		copyPath := filepath.Join(dir, file)
		if err := os.WriteFile(copyPath, []byte(text), 0o644); err != nil {
			return nil, err
		}
		replace[orig] = copyPath
	}
	return replace, nil
}

// WriteOverlay writes dir/overlay.json, go build's -overlay file, with the
// runtime's replacement (RuntimeOverlay) and extra ones.
func WriteOverlay(goroot, dir string, extra map[string]string) (string, error) {
	replace, err := RuntimeOverlay(goroot, dir)
	if err != nil {
		return "", err
	}
	for k, v := range extra {
		replace[k] = v
	}
	b, err := json.Marshal(map[string]map[string]string{"Replace": replace})
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "overlay.json")
	return path, os.WriteFile(path, b, 0o644)
}
