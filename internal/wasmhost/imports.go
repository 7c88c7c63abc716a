package wasmhost

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// ValueType is a WebAssembly value type in a function signature.
type ValueType byte

// WebAssembly value types.
const (
	I32 ValueType = 0x7f
	I64 ValueType = 0x7e
	F32 ValueType = 0x7d
	F64 ValueType = 0x7c
)

func (v ValueType) String() string {
	switch v {
	case I32:
		return "i32"
	case I64:
		return "i64"
	case F32:
		return "f32"
	case F64:
		return "f64"
	}
	return fmt.Sprintf("type(0x%x)", byte(v))
}

// ImportKind is the kind of an import (function, table, memory, global).
type ImportKind byte

// Import kinds as encoded in the import section.
const (
	KindFunc   ImportKind = 0
	KindTable  ImportKind = 1
	KindMemory ImportKind = 2
	KindGlobal ImportKind = 3
)

func (k ImportKind) String() string {
	switch k {
	case KindFunc:
		return "func"
	case KindTable:
		return "table"
	case KindMemory:
		return "memory"
	case KindGlobal:
		return "global"
	}
	return fmt.Sprintf("kind(%d)", byte(k))
}

// Import is one import of a module, or one function a host provides.
// Params and Results are set for functions only.
type Import struct {
	Module  string
	Name    string
	Kind    ImportKind
	Params  []ValueType
	Results []ValueType
}

// QualifiedName returns "module.name", the form Envoy uses in its messages.
func (i Import) QualifiedName() string { return i.Module + "." + i.Name }

// Signature returns "(i32,i64)->i32" for a function import.
func (i Import) Signature() string {
	var b strings.Builder
	b.WriteByte('(')
	for n, p := range i.Params {
		if n > 0 {
			b.WriteByte(',')
		}
		b.WriteString(p.String())
	}
	b.WriteString(")->")
	switch len(i.Results) {
	case 0:
		b.WriteString("()")
	case 1:
		b.WriteString(i.Results[0].String())
	default:
		b.WriteByte('(')
		for n, r := range i.Results {
			if n > 0 {
				b.WriteByte(',')
			}
			b.WriteString(r.String())
		}
		b.WriteByte(')')
	}
	return b.String()
}

// String returns "module.name(params)->results" for functions and
// "module.name (kind)" otherwise.
func (i Import) String() string {
	if i.Kind != KindFunc {
		return i.QualifiedName() + " (" + i.Kind.String() + ")"
	}
	return i.QualifiedName() + i.Signature()
}

func sameTypes(a, b []ValueType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Export is one export of a module.
type Export struct {
	Name string
	Kind ImportKind
}

// ModuleInfo is what ParseModule extracts from a module's binary.
type ModuleInfo struct {
	Imports []Import
	Exports []Export
	// ABI is the Proxy-Wasm ABI version, found the way cpp-host finds it:
	// the first exported function named proxy_abi_version_X_Y_Z.
	ABI ABIVersion
}

// HasExport reports whether the module exports a function named name.
func (m *ModuleInfo) HasExport(name string) bool {
	for _, e := range m.Exports {
		if e.Name == name && e.Kind == KindFunc {
			return true
		}
	}
	return false
}

// ModuleImports lists the imports of a WebAssembly module binary, in the
// order of its import section.
func ModuleImports(wasm []byte) ([]Import, error) {
	info, err := ParseModule(wasm)
	if err != nil {
		return nil, err
	}
	return info.Imports, nil
}

// ParseModule reads the type, import and export sections of a WebAssembly
// module binary. It does not validate the rest of the module.
func ParseModule(wasm []byte) (*ModuleInfo, error) {
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" {
		return nil, errors.New("wasmhost: not a WebAssembly binary (bad magic)")
	}
	if wasm[4] != 1 || wasm[5] != 0 || wasm[6] != 0 || wasm[7] != 0 {
		return nil, errors.New("wasmhost: unsupported WebAssembly binary version")
	}
	r := &reader{b: wasm, pos: 8}
	var types []Import // only Params/Results used
	info := &ModuleInfo{}
	type pendingFunc struct {
		idx     int
		typeIdx uint32
	}
	var pending []pendingFunc
	for r.pos < len(r.b) {
		id := r.byte()
		size := r.u32()
		if r.err != nil {
			return nil, r.err
		}
		end := r.pos + int(size)
		if end > len(r.b) || end < r.pos {
			return nil, errors.New("wasmhost: truncated section")
		}
		sec := &reader{b: r.b[:end], pos: r.pos}
		switch id {
		case 1: // type
			n := sec.u32()
			for i := uint32(0); i < n && sec.err == nil; i++ {
				if form := sec.byte(); form != 0x60 {
					return nil, fmt.Errorf("wasmhost: unexpected type form 0x%x", form)
				}
				var t Import
				np := sec.u32()
				for j := uint32(0); j < np && sec.err == nil; j++ {
					t.Params = append(t.Params, ValueType(sec.byte()))
				}
				nr := sec.u32()
				for j := uint32(0); j < nr && sec.err == nil; j++ {
					t.Results = append(t.Results, ValueType(sec.byte()))
				}
				types = append(types, t)
			}
		case 2: // import
			n := sec.u32()
			for i := uint32(0); i < n && sec.err == nil; i++ {
				imp := Import{Module: sec.name(), Name: sec.name(), Kind: ImportKind(sec.byte())}
				switch imp.Kind {
				case KindFunc:
					pending = append(pending, pendingFunc{idx: len(info.Imports), typeIdx: sec.u32()})
				case KindTable:
					sec.byte() // reftype
					sec.limits()
				case KindMemory:
					sec.limits()
				case KindGlobal:
					sec.byte() // valtype
					sec.byte() // mutability
				default:
					return nil, fmt.Errorf("wasmhost: unknown import kind %d", imp.Kind)
				}
				info.Imports = append(info.Imports, imp)
			}
		case 7: // export
			n := sec.u32()
			for i := uint32(0); i < n && sec.err == nil; i++ {
				e := Export{Name: sec.name(), Kind: ImportKind(sec.byte())}
				sec.u32() // index
				info.Exports = append(info.Exports, e)
				if info.ABI == ABIUnknown && e.Kind == KindFunc {
					switch e.Name {
					case "proxy_abi_version_0_1_0":
						info.ABI = ABI010
					case "proxy_abi_version_0_2_0":
						info.ABI = ABI020
					case "proxy_abi_version_0_2_1":
						info.ABI = ABI021
					}
				}
			}
		}
		if sec.err != nil {
			return nil, sec.err
		}
		r.pos = end
	}
	for _, p := range pending {
		if int(p.typeIdx) >= len(types) {
			return nil, fmt.Errorf("wasmhost: import %s uses unknown type %d", info.Imports[p.idx].QualifiedName(), p.typeIdx)
		}
		info.Imports[p.idx].Params = types[p.typeIdx].Params
		info.Imports[p.idx].Results = types[p.typeIdx].Results
	}
	return info, nil
}

type reader struct {
	b   []byte
	pos int
	err error
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.pos >= len(r.b) {
		r.err = errors.New("wasmhost: unexpected end of module")
		return 0
	}
	c := r.b[r.pos]
	r.pos++
	return c
}

func (r *reader) u32() uint32 {
	var v uint32
	for shift := uint(0); shift < 35; shift += 7 {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		v |= uint32(c&0x7f) << shift
		if c&0x80 == 0 {
			return v
		}
	}
	r.err = errors.New("wasmhost: bad LEB128 integer")
	return 0
}

func (r *reader) name() string {
	n := int(r.u32())
	if r.err != nil {
		return ""
	}
	if r.pos+n > len(r.b) || n < 0 {
		r.err = errors.New("wasmhost: truncated name")
		return ""
	}
	s := string(r.b[r.pos : r.pos+n])
	r.pos += n
	return s
}

func (r *reader) limits() {
	flags := r.byte()
	r.u32()
	if flags&1 != 0 {
		r.u32()
	}
}

// envoyImports builds the table of functions Envoy 1.40 links into a module
// (cpp-host src/wasm.cc registerCallbacks, include/proxy-wasm/exports.h).
// Word parameters are i32 on wasm32; uint64_t/int64_t parameters are i64.
func envoyImports(abi ABIVersion) []Import {
	var out []Import
	fn := func(module, name string, params []ValueType, results ...ValueType) {
		out = append(out, Import{Module: module, Name: name, Kind: KindFunc, Params: params, Results: results})
	}
	w := func(n int) []ValueType { // n i32 params
		p := make([]ValueType, n)
		for i := range p {
			p[i] = I32
		}
		return p
	}
	// Always registered (not capability-restricted).
	fn("env", "pthread_equal", w(2), I32)
	fn("env", "emscripten_notify_memory_growth", w(1))
	// FOR_ALL_WASI_FUNCTIONS, registered under both module names.
	for _, m := range []string{"wasi_unstable", "wasi_snapshot_preview1"} {
		for _, f := range wasiSignatures {
			fn(m, f.name, f.params, f.results...)
		}
	}
	// FOR_ALL_HOST_FUNCTIONS.
	fn("env", "proxy_log", w(3), I32)
	fn("env", "proxy_get_status", w(3), I32)
	fn("env", "proxy_set_property", w(4), I32)
	fn("env", "proxy_get_property", w(4), I32)
	fn("env", "proxy_send_local_response", w(8), I32)
	fn("env", "proxy_get_shared_data", w(5), I32)
	fn("env", "proxy_set_shared_data", w(5), I32)
	fn("env", "proxy_register_shared_queue", w(3), I32)
	fn("env", "proxy_resolve_shared_queue", w(5), I32)
	fn("env", "proxy_dequeue_shared_queue", w(3), I32)
	fn("env", "proxy_enqueue_shared_queue", w(3), I32)
	fn("env", "proxy_get_header_map_value", w(5), I32)
	fn("env", "proxy_add_header_map_value", w(5), I32)
	fn("env", "proxy_replace_header_map_value", w(5), I32)
	fn("env", "proxy_remove_header_map_value", w(3), I32)
	fn("env", "proxy_get_header_map_pairs", w(3), I32)
	fn("env", "proxy_set_header_map_pairs", w(3), I32)
	fn("env", "proxy_get_header_map_size", w(2), I32)
	fn("env", "proxy_get_buffer_status", w(3), I32)
	fn("env", "proxy_get_buffer_bytes", w(5), I32)
	fn("env", "proxy_set_buffer_bytes", w(5), I32)
	fn("env", "proxy_http_call", w(10), I32)
	fn("env", "proxy_grpc_call", w(12), I32)
	fn("env", "proxy_grpc_stream", w(9), I32)
	fn("env", "proxy_grpc_close", w(1), I32)
	fn("env", "proxy_grpc_cancel", w(1), I32)
	fn("env", "proxy_grpc_send", w(4), I32)
	fn("env", "proxy_set_tick_period_milliseconds", w(1), I32)
	fn("env", "proxy_get_current_time_nanoseconds", w(1), I32)
	fn("env", "proxy_define_metric", w(4), I32)
	fn("env", "proxy_increment_metric", []ValueType{I32, I64}, I32)
	fn("env", "proxy_record_metric", []ValueType{I32, I64}, I32)
	fn("env", "proxy_get_metric", w(2), I32)
	fn("env", "proxy_set_effective_context", w(1), I32)
	fn("env", "proxy_done", nil, I32)
	fn("env", "proxy_call_foreign_function", w(6), I32)
	// FOR_ALL_HOST_FUNCTIONS_ABI_SPECIFIC.
	switch abi {
	case ABI010:
		fn("env", "proxy_get_configuration", w(2), I32)
		fn("env", "proxy_continue_request", nil, I32)
		fn("env", "proxy_continue_response", nil, I32)
		fn("env", "proxy_clear_route_cache", nil, I32)
	case ABI020:
		fn("env", "proxy_continue_stream", w(1), I32)
		fn("env", "proxy_close_stream", w(1), I32)
	case ABI021:
		fn("env", "proxy_continue_stream", w(1), I32)
		fn("env", "proxy_close_stream", w(1), I32)
		fn("env", "proxy_get_log_level", w(1), I32)
	}
	return out
}

type wasiSig struct {
	name    string
	params  []ValueType
	results []ValueType
}

// wasiSignatures are cpp-host's WASI functions with cpp-host's C++ types
// (include/proxy-wasm/exports.h). Note path_link (6 params) and
// path_symlink (4 params) take one parameter fewer than WASI preview1
// defines, so a module importing the standard signatures cannot load.
var wasiSignatures = func() []wasiSig {
	i, l := I32, I64
	r := []ValueType{I32}
	return []wasiSig{
		{"fd_write", []ValueType{i, i, i, i}, r},
		{"fd_read", []ValueType{i, i, i, i}, r},
		{"fd_seek", []ValueType{i, l, i, i}, r},
		{"fd_close", []ValueType{i}, r},
		{"fd_fdstat_get", []ValueType{i, i}, r},
		{"fd_fdstat_set_flags", []ValueType{i, i}, r},
		{"fd_fdstat_set_rights", []ValueType{i, l, l}, r},
		{"environ_get", []ValueType{i, i}, r},
		{"environ_sizes_get", []ValueType{i, i}, r},
		{"args_get", []ValueType{i, i}, r},
		{"args_sizes_get", []ValueType{i, i}, r},
		{"clock_time_get", []ValueType{i, l, i}, r},
		{"clock_res_get", []ValueType{i, i}, r},
		{"fd_advise", []ValueType{i, l, l, i}, r},
		{"fd_allocate", []ValueType{i, l, l}, r},
		{"fd_datasync", []ValueType{i}, r},
		{"fd_filestat_set_size", []ValueType{i, l}, r},
		{"fd_filestat_set_times", []ValueType{i, l, l, i}, r},
		{"fd_pread", []ValueType{i, i, i, l, i}, r},
		{"fd_pwrite", []ValueType{i, i, i, l, i}, r},
		{"fd_readdir", []ValueType{i, i, i, l, i}, r},
		{"fd_renumber", []ValueType{i, i}, r},
		{"fd_sync", []ValueType{i}, r},
		{"fd_tell", []ValueType{i, i}, r},
		{"path_create_directory", []ValueType{i, i, i}, r},
		{"path_filestat_set_times", []ValueType{i, i, i, i, l, l, i}, r},
		{"path_link", []ValueType{i, i, i, i, i, i}, r},
		{"path_readlink", []ValueType{i, i, i, i, i, i}, r},
		{"path_remove_directory", []ValueType{i, i, i}, r},
		{"path_rename", []ValueType{i, i, i, i, i, i}, r},
		{"path_symlink", []ValueType{i, i, i, i}, r},
		{"path_unlink_file", []ValueType{i, i, i}, r},
		{"sock_accept", []ValueType{i, i, i}, r},
		{"sock_recv", []ValueType{i, i, i, i, i, i}, r},
		{"sock_send", []ValueType{i, i, i, i, i}, r},
		{"sock_shutdown", []ValueType{i, i}, r},
		{"random_get", []ValueType{i, i}, r},
		{"sched_yield", nil, r},
		{"poll_oneoff", []ValueType{i, i, i, i}, r},
		{"proc_exit", []ValueType{i}, nil},
		{"path_open", []ValueType{i, i, i, i, i, l, l, i, i}, r},
		{"fd_prestat_get", []ValueType{i, i}, r},
		{"fd_prestat_dir_name", []ValueType{i, i, i}, r},
		{"path_filestat_get", []ValueType{i, i, i, i, i}, r},
		{"fd_filestat_get", []ValueType{i, i}, r},
	}
}()

// EnvoyImports returns the functions Envoy 1.40 (proxy-wasm-cpp-host as
// vendored there) links into a module of the given ABI version: the
// env.proxy_* functions of that ABI, env.pthread_equal,
// env.emscripten_notify_memory_growth, and cpp-host's WASI functions under
// both wasi_snapshot_preview1 and wasi_unstable (the full set added by
// cpp-host PR #427 and completed by PR #533). Envoy links imports by name and
// exact signature; anything else makes it refuse the module ("Failed to load
// Wasm module due to a missing import").
//
// Envoy does not provide imported globals; it does create imported memories
// and tables, which this list does not describe.
func EnvoyImports(abi ABIVersion) []Import {
	return envoyImports(abi)
}

// ImportProblem describes an import Envoy (or this host) cannot satisfy.
type ImportProblem struct {
	Import Import
	// Reason is "missing" (Envoy provides nothing by that name),
	// "signature" (Envoy provides it with another signature; Want is
	// Envoy's signature) or "kind" (a global, which Envoy cannot import).
	Reason string
	Want   string
}

func (p ImportProblem) String() string {
	switch p.Reason {
	case "signature":
		return fmt.Sprintf("%s: import type mismatch, Envoy provides %s", p.Import, p.Want)
	case "kind":
		return fmt.Sprintf("%s: Envoy cannot import a %s", p.Import.QualifiedName(), p.Import.Kind)
	}
	return fmt.Sprintf("%s: missing import, Envoy does not provide it", p.Import)
}

// CheckEnvoyImports compares a module's imports with what Envoy 1.40 links
// for the module's ABI version. It returns the problems found (nil if Envoy
// would link every import), or an error if the binary cannot be parsed or
// declares no Proxy-Wasm ABI version.
func CheckEnvoyImports(wasm []byte) ([]ImportProblem, error) {
	info, err := ParseModule(wasm)
	if err != nil {
		return nil, err
	}
	if info.ABI == ABIUnknown {
		return nil, errors.New("wasmhost: Missing or unknown Proxy-Wasm ABI version (no proxy_abi_version_* export)")
	}
	return checkImports(info.Imports, EnvoyImports(info.ABI)), nil
}

func checkImports(imports []Import, provided []Import) []ImportProblem {
	byName := make(map[string]Import, len(provided))
	for _, p := range provided {
		byName[p.QualifiedName()] = p
	}
	var problems []ImportProblem
	for _, imp := range imports {
		switch imp.Kind {
		case KindMemory, KindTable:
			continue // Envoy creates these.
		case KindGlobal:
			problems = append(problems, ImportProblem{Import: imp, Reason: "kind"})
			continue
		}
		p, ok := byName[imp.QualifiedName()]
		if !ok {
			problems = append(problems, ImportProblem{Import: imp, Reason: "missing"})
			continue
		}
		if !sameTypes(p.Params, imp.Params) || !sameTypes(p.Results, imp.Results) {
			problems = append(problems, ImportProblem{Import: imp, Reason: "signature", Want: p.Signature()})
		}
	}
	sort.SliceStable(problems, func(i, j int) bool {
		return problems[i].Import.QualifiedName() < problems[j].Import.QualifiedName()
	})
	return problems
}
