// Package wasmexports edits the export section of a WebAssembly module:
// it removes named exports and renames others, leaving every function and
// every other section as it is.
//
// Why: a proxy-wasm host (proxy-wasm-cpp-host in Envoy) looks its callbacks
// up by export name once and skips any callback the module does not export.
// The Go SDK exports every callback of the ABI, so Envoy enters the Go module
// for callbacks a plugin never uses, each entry costing thousands of
// instructions. Dropping the exports after the link removes those entries
// without touching the pinned SDK.
package wasmexports

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
)

const exportSection = 7

var magic = []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}

// Export is one entry of the export section.
type Export struct {
	Name  string
	Kind  byte   // 0 function, 1 table, 2 memory, 3 global
	Index uint32 // in the index space of Kind
}

// List returns the module's exports in order.
func List(module []byte) ([]Export, error) {
	_, body, _, err := findExports(module)
	if err != nil {
		return nil, err
	}
	if body == nil {
		return nil, nil
	}
	return parseExports(body)
}

// Edit returns a copy of module whose export section lacks the exports named
// in drop and has the exports named as keys of rename renamed to the
// values. Every name in drop and rename must be exported (a misspelt name
// is an error, not a silent no-op), a rename must not collide with an
// export that stays, and a name cannot be both dropped and renamed.
func Edit(module []byte, drop []string, rename map[string]string) ([]byte, error) {
	start, body, end, err := findExports(module)
	if err != nil {
		return nil, err
	}
	if body == nil {
		return nil, errors.New("wasmexports: the module has no export section")
	}
	exps, err := parseExports(body)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, e := range exps {
		have[e.Name] = true
	}
	dropSet := map[string]bool{}
	for _, n := range drop {
		if !have[n] {
			return nil, fmt.Errorf("wasmexports: cannot drop %q: not exported", n)
		}
		dropSet[n] = true
	}
	for from := range rename {
		if !have[from] {
			return nil, fmt.Errorf("wasmexports: cannot rename %q: not exported", from)
		}
		if dropSet[from] {
			return nil, fmt.Errorf("wasmexports: %q is both dropped and renamed", from)
		}
	}
	var kept []Export
	for _, e := range exps {
		if dropSet[e.Name] {
			continue
		}
		if to, ok := rename[e.Name]; ok {
			e.Name = to
		}
		kept = append(kept, e)
	}
	seen := map[string]bool{}
	for _, e := range kept {
		if seen[e.Name] {
			return nil, fmt.Errorf("wasmexports: two exports would be named %q", e.Name)
		}
		seen[e.Name] = true
	}
	var sec []byte
	sec = appendU32(sec, uint32(len(kept)))
	for _, e := range kept {
		sec = appendU32(sec, uint32(len(e.Name)))
		sec = append(sec, e.Name...)
		sec = append(sec, e.Kind)
		sec = appendU32(sec, e.Index)
	}
	out := make([]byte, 0, len(module))
	out = append(out, module[:start]...)
	out = append(out, exportSection)
	out = appendU32(out, uint32(len(sec)))
	out = append(out, sec...)
	out = append(out, module[end:]...)
	return out, nil
}

// findExports returns where the export section starts (its id byte) and
// ends in module, and its contents; body is nil when there is none.
func findExports(m []byte) (start int, body []byte, end int, err error) {
	if len(m) < len(magic) || !bytes.Equal(m[:len(magic)], magic) {
		return 0, nil, 0, errors.New("wasmexports: not a WebAssembly 1.0 binary module")
	}
	p := len(magic)
	for p < len(m) {
		id := m[p]
		size, n, err := readU32(m[p+1:])
		if err != nil {
			return 0, nil, 0, fmt.Errorf("wasmexports: section at byte %d: %w", p, err)
		}
		bodyAt := p + 1 + n
		if uint64(bodyAt)+uint64(size) > uint64(len(m)) {
			return 0, nil, 0, fmt.Errorf("wasmexports: section %d at byte %d runs past the end", id, p)
		}
		next := bodyAt + int(size)
		if id == exportSection {
			return p, m[bodyAt:next], next, nil
		}
		p = next
	}
	return 0, nil, 0, nil
}

func parseExports(b []byte) ([]Export, error) {
	count, n, err := readU32(b)
	if err != nil {
		return nil, fmt.Errorf("wasmexports: export count: %w", err)
	}
	b = b[n:]
	// Each export takes at least 3 bytes: do not trust count for the
	// allocation.
	exps := make([]Export, 0, min(int(count), len(b)/3))
	for i := uint32(0); i < count; i++ {
		l, n, err := readU32(b)
		if err != nil || uint64(n)+uint64(l)+1 > uint64(len(b)) {
			return nil, fmt.Errorf("wasmexports: export %d: truncated name", i)
		}
		name := string(b[n : n+int(l)])
		b = b[n+int(l):]
		kind := b[0]
		idx, n2, err := readU32(b[1:])
		if err != nil {
			return nil, fmt.Errorf("wasmexports: export %d (%s): index: %w", i, name, err)
		}
		b = b[1+n2:]
		exps = append(exps, Export{Name: name, Kind: kind, Index: idx})
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("wasmexports: %d stray bytes after the exports", len(b))
	}
	if slices.ContainsFunc(exps, func(e Export) bool { return e.Kind > 3 }) {
		return nil, errors.New("wasmexports: unknown export kind")
	}
	return exps, nil
}

// readU32 decodes an unsigned LEB128 number of at most 32 bits.
func readU32(b []byte) (uint32, int, error) {
	var v uint64
	for i := 0; i < 5; i++ {
		if i >= len(b) {
			return 0, 0, errors.New("truncated number")
		}
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			if v > 0xffffffff {
				return 0, 0, errors.New("number too large")
			}
			return uint32(v), i + 1, nil
		}
	}
	return 0, 0, errors.New("number too long")
}

func appendU32(b []byte, v uint32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
