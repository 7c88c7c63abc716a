package wasmexports

import (
	"bytes"
	"context"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
)

// module builds a valid module with n functions of type () -> (), exported
// under names (names[i] exports function i % n), a memory export "mem" and
// a custom section after the exports.
func module(n int, names ...string) []byte {
	sec := func(id byte, body []byte) []byte {
		return append(appendU32([]byte{id}, uint32(len(body))), body...)
	}
	m := append([]byte(nil), magic...)
	m = append(m, sec(1, []byte{1, 0x60, 0, 0})...)
	fn := appendU32(nil, uint32(n))
	for range n {
		fn = append(fn, 0)
	}
	m = append(m, sec(3, fn)...)
	m = append(m, sec(5, []byte{1, 0, 1})...) // one memory, min 1 page
	ex := appendU32(nil, uint32(len(names)+1))
	for i, name := range names {
		ex = appendU32(ex, uint32(len(name)))
		ex = append(ex, name...)
		ex = append(ex, 0)
		ex = appendU32(ex, uint32(i%n))
	}
	ex = append(ex, 3, 'm', 'e', 'm', 2, 0)
	m = append(m, sec(7, ex)...)
	code := appendU32(nil, uint32(n))
	for range n {
		code = append(code, 2, 0, 0x0b)
	}
	m = append(m, sec(10, code)...)
	return append(m, sec(0, []byte{4, 'n', 'o', 't', 'e', 'h', 'i'})...)
}

// exported compiles mod with wazero (so the result is a valid module) and
// returns its exported function names, sorted.
func exported(t *testing.T, mod []byte) []string {
	t.Helper()
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	c, err := rt.CompileModule(ctx, mod)
	if err != nil {
		t.Fatalf("the edited module does not compile: %v", err)
	}
	var names []string
	for name := range c.ExportedFunctions() {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

func TestEditDropsAndRenames(t *testing.T) {
	// Many exports, so that the section size needs a two-byte LEB128 before
	// and maybe one byte after.
	var names []string
	for i := range 12 {
		names = append(names, "proxy_on_callback_with_a_long_name_"+string(rune('a'+i)))
	}
	names = append(names, "proxy_on_delete", "sluice_on_stream_end")
	in := module(5, names...)
	before := exported(t, in)
	if len(before) != len(names) {
		t.Fatalf("module() exports %d functions, want %d", len(before), len(names))
	}
	drop := append([]string{"proxy_on_delete"}, names[:10]...)
	out, err := Edit(in, drop, map[string]string{"sluice_on_stream_end": "proxy_on_delete"})
	if err != nil {
		t.Fatal(err)
	}
	got := exported(t, out)
	want := []string{names[10], names[11], "proxy_on_delete"}
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Fatalf("exports after the edit: %v, want %v", got, want)
	}
	// The renamed export keeps its function (index 13 % 5 = 3), the memory
	// export stays, the custom section after the exports is intact.
	exps, err := List(out)
	if err != nil {
		t.Fatal(err)
	}
	var sawMem bool
	for _, e := range exps {
		if e.Name == "proxy_on_delete" && (e.Kind != 0 || e.Index != 3) {
			t.Errorf("renamed export: %+v, want function 3", e)
		}
		sawMem = sawMem || (e.Name == "mem" && e.Kind == 2)
	}
	if !sawMem {
		t.Errorf("the memory export was lost: %+v", exps)
	}
	if !bytes.HasSuffix(out, []byte("notehi")) {
		t.Error("the custom section after the exports was not kept")
	}
	// The input is not modified.
	if !slices.Equal(exported(t, in), before) {
		t.Error("Edit modified its input")
	}
}

func TestEditNoChangeIsIdentity(t *testing.T) {
	in := module(2, "a", "b")
	out, err := Edit(in, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(in, out) {
		t.Error("an edit that changes nothing must give the same bytes")
	}
}

func TestEditRefusesMistakes(t *testing.T) {
	in := module(2, "a", "b", "c")
	for _, tc := range []struct {
		name   string
		drop   []string
		rename map[string]string
		want   string
	}{
		{"drop a missing export", []string{"nope"}, nil, `cannot drop "nope": not exported`},
		{"rename a missing export", nil, map[string]string{"nope": "x"}, `cannot rename "nope"`},
		{"rename onto a kept export", nil, map[string]string{"a": "b"}, `two exports would be named "b"`},
		{"drop and rename one name", []string{"a"}, map[string]string{"a": "x"}, "both dropped and renamed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Edit(in, tc.drop, tc.rename)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
	// Renaming onto a dropped name is how the stream end takes over
	// proxy_on_delete: allowed.
	if _, err := Edit(in, []string{"b"}, map[string]string{"a": "b"}); err != nil {
		t.Errorf("rename onto a dropped name: %v", err)
	}
}

func TestMalformedModules(t *testing.T) {
	good := module(1, "a")
	for _, tc := range []struct {
		name string
		mod  []byte
	}{
		{"empty", nil},
		{"not wasm", []byte("\x7fELF\x02\x01\x01\x00")},
		{"section past the end", append(append([]byte(nil), magic...), 7, 0x10, 0)},
		{"truncated", good[:len(good)-20]},
		{"endless LEB128", append(append([]byte(nil), magic...), 7, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Edit(tc.mod, []string{"a"}, nil); err == nil {
				t.Fatal("no error")
			}
			if _, err := List(tc.mod); err == nil {
				t.Fatal("List: no error")
			}
		})
	}
	if _, err := Edit(module(1), nil, nil); err != nil {
		t.Errorf("a module exporting only its memory: %v", err)
	}
}

func FuzzEdit(f *testing.F) {
	f.Add(module(2, "a", "b"), "a")
	f.Fuzz(func(t *testing.T, mod []byte, drop string) {
		// Never panics; whatever it accepts it can read back.
		out, err := Edit(mod, []string{drop}, nil)
		if err != nil {
			return
		}
		if _, err := List(out); err != nil {
			t.Fatalf("Edit produced what List refuses: %v", err)
		}
	})
}
