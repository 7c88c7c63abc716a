package wasmhost

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// Host stands in for Envoy 1.40 (its proxy-wasm-cpp-host) around one
// compiled proxy-wasm module. The module is compiled once; every NewVM
// instantiates it again, as Envoy runs one VM per worker thread. All VMs of
// a Host share one SharedData store, one Metrics store and one Clock.
//
// A Host is safe for concurrent use; each VM serializes its own calls.
type Host struct {
	cfg      config
	rt       wazero.Runtime
	compiled wazero.CompiledModule
	info     *ModuleInfo
	funcs    []*hostFunc
	// exports the host looks up on every instance.
	hasInitialize, hasStart, hasMain, hasMainVoid bool
	mallocName                                    string

	mu     sync.Mutex
	vms    []*VM
	nextVM int
	closed bool
	logMu  sync.Mutex
}

type config struct {
	clock       Clock
	vmID        string
	rootID      string
	pluginName  string
	shared      *SharedData
	metrics     *Metrics
	logOut      io.Writer
	logLevel    LogLevel
	env         map[string]string
	props       map[string]string
	failOpen    bool
	stopIter    bool
	clusters    map[string]bool
	foreign     map[string]ForeignFunc
	cache       wazero.CompilationCache
	callTimeout time.Duration
	random      io.Reader
	maxPollSpin int
	maxLogs     int
	resident    bool
}

// Option configures a Host.
type Option func(*config)

// WithClock sets the time source (default: a ManualClock starting at
// 2026-01-01T00:00:00Z). Pass a *ManualClock you keep to move time in a test.
func WithClock(c Clock) Option { return func(o *config) { o.clock = c } }

// WithRealClock uses the machine's clocks (for benchmarks).
func WithRealClock() Option { return func(o *config) { o.clock = RealClock() } }

// WithVMID sets vm_config.vm_id (default ""). Shared data and shared queues
// are namespaced by it; it is also the plugin_vm_id property.
func WithVMID(id string) Option { return func(o *config) { o.vmID = id } }

// WithRootID sets the plugin's root_id (the plugin_root_id property).
func WithRootID(id string) Option { return func(o *config) { o.rootID = id } }

// WithPluginName sets the plugin's name (the plugin_name property).
func WithPluginName(name string) Option { return func(o *config) { o.pluginName = name } }

// WithSharedData makes the Host use s instead of a fresh store, so several
// Hosts (plugins) can share data as plugins with the same vm_id do in Envoy.
func WithSharedData(s *SharedData) Option { return func(o *config) { o.shared = s } }

// WithMetrics makes the Host use m instead of a fresh stats store.
func WithMetrics(m *Metrics) Option { return func(o *config) { o.metrics = m } }

// WithLogOutput echoes every plugin log line at or above the log level (see
// WithLogLevel) to w, prefixed with the VM and level. Lines are captured per
// VM whatever the level (VM.Logs).
func WithLogOutput(w io.Writer) Option { return func(o *config) { o.logOut = w } }

// WithMaxLogEntries bounds the log lines kept per VM (default 100000; 0 or
// less keeps everything). When the bound is reached the oldest half is
// dropped (see VM.DroppedLogs), so long benchmarks do not grow without limit.
func WithMaxLogEntries(n int) Option { return func(o *config) { o.maxLogs = n } }

// WithLogLevel sets the level proxy_get_log_level reports and the threshold
// for WithLogOutput (default LogInfo, Envoy's default).
func WithLogLevel(l LogLevel) Option { return func(o *config) { o.logLevel = l } }

// WithEnv sets vm_config.environment_variables, read by the guest through
// WASI environ_get (Go: os.Getenv / syscall.Getenv).
func WithEnv(env map[string]string) Option {
	return func(o *config) {
		o.env = make(map[string]string, len(env))
		for k, v := range env {
			o.env[k] = v
		}
	}
}

// WithProperties sets properties visible from every context of every VM
// (root and streams), e.g. node metadata. Request.Properties override them.
func WithProperties(p Properties) Option {
	return func(o *config) { o.props = normalizeProperties(p) }
}

// WithFailOpen sets the plugin's failure_policy to FAIL_OPEN: once a VM has
// crashed, its streams continue without the plugin. The default is Envoy's
// FAIL_CLOSED: such streams get a local 503 with details "wasm_fail_stream".
func WithFailOpen() Option { return func(o *config) { o.failOpen = true } }

// WithAllowOnHeadersStopIteration sets the plugin's
// allow_on_headers_stop_iteration (Envoy >= 1.35): a header callback's
// StopIteration (1, the Go SDK's ActionPause) then stops the headers only,
// and the body goes on to the plugin's body callback (or, where the module
// exports none, continues the headers with it). By default cpp-host makes
// StopIteration StopAllIterationAndWatermark: the body waits in Envoy
// (convertVmCallResultToFilterHeadersStatus).
func WithAllowOnHeadersStopIteration() Option { return func(o *config) { o.stopIter = true } }

// WithClusters declares the upstream clusters proxy_http_call may target;
// a call to any other cluster returns BadArgument as in Envoy.
func WithClusters(names ...string) Option {
	return func(o *config) {
		for _, n := range names {
			o.clusters[n] = true
		}
	}
}

// ForeignFunc implements a foreign function callable through
// proxy_call_foreign_function. It receives the argument bytes and returns
// the result bytes and the status handed back to the guest.
type ForeignFunc func(args []byte) ([]byte, Status)

// WithForeignFunction registers a foreign function. Envoy registers a few
// (e.g. "compress", "declare_property"); by default this host registers
// none, and calling an unknown name returns NotFound as in Envoy.
func WithForeignFunction(name string, fn ForeignFunc) Option {
	return func(o *config) { o.foreign[name] = fn }
}

// WithCompilationCache sets wazero's compilation cache. By default all Hosts
// in the process share one in-memory cache, so compiling the same module
// twice is cheap.
func WithCompilationCache(c wazero.CompilationCache) Option {
	return func(o *config) { o.cache = c }
}

// WithCallTimeout aborts any single call into a VM that runs longer than d
// (the VM is then failed). It makes wazero check for cancellation inside
// loops, which costs a little; the default (0) never interrupts.
func WithCallTimeout(d time.Duration) Option { return func(o *config) { o.callTimeout = d } }

// WithRandom sets the source of WASI random_get (default crypto/rand).
func WithRandom(r io.Reader) Option { return func(o *config) { o.random = r } }

var defaultCache = wazero.NewCompilationCache()

// New compiles wasm and prepares a Host for it. It fails loudly when Envoy
// 1.40 would refuse the module (no Proxy-Wasm ABI version export, an import
// Envoy does not provide or provides with another signature, no malloc or
// proxy_on_memory_allocate export) and when the module imports a function
// Envoy provides but this host does not implement (the gRPC calls).
func New(ctx context.Context, wasm []byte, opts ...Option) (*Host, error) {
	cfg := config{
		logLevel:    LogInfo,
		clusters:    map[string]bool{},
		foreign:     map[string]ForeignFunc{},
		random:      rand.Reader,
		maxPollSpin: 1_000_000,
		maxLogs:     100_000,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.clock == nil {
		cfg.clock = NewManualClock(defaultStart)
	}
	if cfg.shared == nil {
		cfg.shared = NewSharedData()
	}
	if cfg.metrics == nil {
		cfg.metrics = NewMetrics()
	}
	if cfg.cache == nil {
		cfg.cache = defaultCache
	}

	info, err := ParseModule(wasm)
	if err != nil {
		return nil, err
	}
	switch info.ABI {
	case ABIUnknown:
		return nil, errors.New("wasmhost: Envoy would refuse this module: Missing or unknown Proxy-Wasm ABI version (no proxy_abi_version_* export)")
	case ABI010:
		return nil, errors.New("wasmhost: Proxy-Wasm ABI 0.1.0 is not supported by this host")
	}
	if problems := checkImports(info.Imports, EnvoyImports(info.ABI)); len(problems) > 0 {
		var b strings.Builder
		fmt.Fprintf(&b, "wasmhost: Envoy 1.40 would refuse this module (ABI %s): Failed to load Wasm module due to", info.ABI)
		for _, p := range problems {
			b.WriteString("\n  ")
			b.WriteString(p.String())
		}
		return nil, errors.New(b.String())
	}
	h := &Host{cfg: cfg, info: info}
	h.funcs = h.hostFuncs()
	implemented := map[string]bool{}
	for _, f := range h.funcs {
		implemented[f.qname] = true
	}
	var missing []string
	for _, imp := range info.Imports {
		if imp.Kind == KindFunc && !implemented[imp.QualifiedName()] {
			missing = append(missing, imp.QualifiedName())
		}
		if imp.Kind == KindMemory || imp.Kind == KindTable {
			missing = append(missing, imp.QualifiedName()+" ("+imp.Kind.String()+")")
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("wasmhost: the module imports %s, which Envoy provides but this host does not implement", strings.Join(missing, ", "))
	}
	switch {
	case info.HasExport("malloc"):
		h.mallocName = "malloc"
	case info.HasExport("proxy_on_memory_allocate"):
		h.mallocName = "proxy_on_memory_allocate"
	default:
		return nil, errors.New("wasmhost: Envoy would refuse this module: Wasm module is missing malloc function (export malloc or proxy_on_memory_allocate)")
	}
	h.hasInitialize = info.HasExport("_initialize")
	h.hasStart = info.HasExport("_start")
	h.hasMain = info.HasExport("main")
	h.hasMainVoid = info.HasExport("__main_void")

	rc := wazero.NewRuntimeConfig().
		WithCompilationCache(cfg.cache).
		WithMemoryLimitPages(maxMemoryPages).
		WithCloseOnContextDone(cfg.callTimeout > 0)
	h.rt = wazero.NewRuntimeWithConfig(ctx, rc)
	if err := h.instantiateHostModules(ctx); err != nil {
		_ = h.rt.Close(ctx)
		return nil, err
	}
	h.compiled, err = h.rt.CompileModule(ctx, wasm)
	if err != nil {
		_ = h.rt.Close(ctx)
		return nil, fmt.Errorf("wasmhost: compiling module: %w", err)
	}
	return h, nil
}

// instantiateHostModules registers the host functions under env,
// wasi_snapshot_preview1 and wasi_unstable.
func (h *Host) instantiateHostModules(ctx context.Context) error {
	byModule := map[string][]*hostFunc{}
	for _, f := range h.funcs {
		byModule[f.module] = append(byModule[f.module], f)
	}
	for module, fs := range byModule {
		b := h.rt.NewHostModuleBuilder(module)
		for _, f := range fs {
			b.NewFunctionBuilder().
				WithGoModuleFunction(h.wrap(f), toAPITypes(f.params), toAPITypes(f.results)).
				WithName(f.name).
				Export(f.name)
		}
		if _, err := b.Instantiate(ctx); err != nil {
			return fmt.Errorf("wasmhost: instantiating host module %s: %w", module, err)
		}
	}
	return nil
}

func toAPITypes(ts []ValueType) []api.ValueType {
	out := make([]api.ValueType, len(ts))
	for i, t := range ts {
		out[i] = api.ValueType(t)
	}
	return out
}

// ABI returns the module's Proxy-Wasm ABI version.
func (h *Host) ABI() ABIVersion { return h.info.ABI }

// Imports returns the module's imports.
func (h *Host) Imports() []Import { return append([]Import(nil), h.info.Imports...) }

// SharedData returns the shared-data store of this Host's VMs.
func (h *Host) SharedData() *SharedData { return h.cfg.shared }

// SharedValue reads key in this Host's vm_id namespace of the shared data.
func (h *Host) SharedValue(key string) (value []byte, cas uint32, ok bool) {
	return h.cfg.shared.Get(h.cfg.vmID, key)
}

// Metrics returns the stats store of this Host's VMs.
func (h *Host) Metrics() *Metrics { return h.cfg.metrics }

// Clock returns the Host's clock.
func (h *Host) Clock() Clock { return h.cfg.clock }

// VMs returns the VMs created so far (closed ones included), in order.
func (h *Host) VMs() []*VM {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*VM(nil), h.vms...)
}

// AdvanceClock moves a ManualClock forward by d and fires proxy_on_tick on
// every VM whose tick period elapses on the way, in time order, with the
// clock set to each tick's due time. A VM's first tick is due one period
// after proxy_set_tick_period_milliseconds; later ticks follow every period
// (like Envoy's per-worker timer, re-armed after each tick). The first guest
// error stops the advance and is returned; the clock is then left at the
// failing tick's time. It fails if the Host's clock is not a *ManualClock.
func (h *Host) AdvanceClock(d time.Duration) error {
	mc, ok := h.cfg.clock.(*ManualClock)
	if !ok {
		return errors.New("wasmhost: AdvanceClock needs a *ManualClock (see WithClock)")
	}
	target := mc.Monotonic() + d
	for {
		var next *VM
		var due time.Duration
		for _, vm := range h.VMs() {
			if at, ok := vm.nextTickDue(); ok && at <= target && (next == nil || at < due) {
				next, due = vm, at
			}
		}
		if next == nil {
			break
		}
		if now := mc.Monotonic(); due > now {
			mc.Advance(due - now)
		}
		if err := next.timerTick(due); err != nil {
			return err
		}
	}
	if now := mc.Monotonic(); target > now {
		mc.Advance(target - now)
	}
	return nil
}

// FireDueTicks calls proxy_on_tick once on every VM whose tick timer is due
// at the clock's current time, and re-arms each timer one period after its
// due time (or from now, if it fell more than a period behind). It works with
// any Clock; with RealClock, call it periodically to emulate Envoy's timers.
func (h *Host) FireDueTicks() error {
	now := h.cfg.clock.Monotonic()
	for _, vm := range h.VMs() {
		due, ok := vm.nextTickDue()
		if !ok || due > now {
			continue
		}
		if err := vm.timerTick(due); err != nil {
			return err
		}
		vm.mu.Lock()
		if vm.tickArmed && vm.tickDue <= now {
			vm.tickDue = now + vm.tickPeriod
		}
		vm.mu.Unlock()
	}
	return nil
}

// Close closes every VM and releases the runtime.
func (h *Host) Close(ctx context.Context) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	vms := append([]*VM(nil), h.vms...)
	h.mu.Unlock()
	for _, vm := range vms {
		_ = vm.Close()
	}
	return h.rt.Close(ctx)
}

func (h *Host) echo(vm *VM, e LogEntry) {
	if h.cfg.logOut == nil || e.Level < h.cfg.logLevel {
		return
	}
	h.logMu.Lock()
	defer h.logMu.Unlock()
	fmt.Fprintf(h.cfg.logOut, "wasm vm%d [%s] %s\n", vm.id, e.Level, e.Message)
}

// hostFunc is one function the host exports to guests.
type hostFunc struct {
	module, name, qname string
	params, results     []ValueType
	idx                 int
	allowStart          bool // callable during _initialize/main (cpp-host startVm)
	allowMalloc         bool // callable from inside malloc (cpp-host allocMemory)
	fn                  func(vm *VM, mod api.Module, stack []uint64)
}

type vmCtxKey struct{}

// trapPanic carries a trap out of a host function through wazero.
type trapPanic struct{ err error }

func (t trapPanic) Error() string { return t.err.Error() }
func (t trapPanic) Unwrap() error { return t.err }

const (
	restrictNone = iota
	restrictStart
	restrictMalloc
)

func (h *Host) wrap(f *hostFunc) api.GoModuleFunc {
	return func(ctx context.Context, mod api.Module, stack []uint64) {
		vm := ctx.Value(vmCtxKey{}).(*VM)
		vm.calls[f.idx]++
		switch vm.restrict {
		case restrictStart:
			if !f.allowStart {
				panic(trapPanic{fmt.Errorf("restricted_callback: %s called during VM start (_initialize/main); Envoy traps", f.qname)})
			}
		case restrictMalloc:
			if !f.allowMalloc {
				panic(trapPanic{fmt.Errorf("restricted_callback: %s called from inside %s; Envoy traps", f.qname, vm.h.mallocName)})
			}
		}
		f.fn(vm, mod, stack)
	}
}

// Start-time allow list: cpp-host src/wasm.cc WasmBase::startVm.
var startAllowedWASI = map[string]bool{
	"fd_write": true, "args_sizes_get": true, "args_get": true, "environ_sizes_get": true,
	"environ_get": true, "clock_time_get": true, "clock_res_get": true, "random_get": true,
	"poll_oneoff": true, "fd_fdstat_get": true, "fd_fdstat_set_flags": true,
	"fd_advise": true, "fd_allocate": true, "fd_datasync": true, "fd_fdstat_set_rights": true,
	"fd_filestat_get": true, "fd_filestat_set_size": true, "fd_filestat_set_times": true,
	"fd_pread": true, "fd_prestat_dir_name": true, "fd_prestat_get": true, "fd_pwrite": true,
	"fd_readdir": true, "fd_renumber": true, "fd_sync": true, "fd_tell": true,
	"path_create_directory": true, "path_filestat_get": true, "path_filestat_set_times": true,
	"path_link": true, "path_readlink": true, "path_remove_directory": true, "path_rename": true,
	"path_symlink": true, "path_unlink_file": true, "sock_accept": true, "sock_recv": true,
	"sock_send": true, "sock_shutdown": true,
}

// Malloc-time allow list: cpp-host include/proxy-wasm/wasm.h WasmBase::allocMemory.
var mallocAllowedWASI = map[string]bool{
	"fd_write": true, "clock_time_get": true, "poll_oneoff": true,
}

// hostFuncs builds the table of implemented host functions.
func (h *Host) hostFuncs() []*hostFunc {
	var out []*hostFunc
	add := func(module, name string, params, results []ValueType, fn func(*VM, api.Module, []uint64)) {
		f := &hostFunc{module: module, name: name, qname: module + "." + name, params: params, results: results, idx: len(out), fn: fn}
		switch module {
		case "env":
			f.allowStart = name == "proxy_log" || name == "emscripten_notify_memory_growth"
			f.allowMalloc = name == "proxy_log"
		default:
			f.allowStart = startAllowedWASI[name]
			f.allowMalloc = mallocAllowedWASI[name]
		}
		out = append(out, f)
	}
	impl := proxyImpls()
	for _, imp := range EnvoyImports(h.info.ABI) {
		if imp.Module != "env" {
			continue
		}
		if fn, ok := impl[imp.Name]; ok {
			add("env", imp.Name, imp.Params, imp.Results, fn)
		}
	}
	wimpl := wasiImpls()
	for _, m := range []string{"wasi_snapshot_preview1", "wasi_unstable"} {
		for _, s := range wasiSignatures {
			fn, ok := wimpl[s.name]
			if !ok {
				panic("wasmhost: no implementation for WASI " + s.name)
			}
			add(m, s.name, s.params, s.results, fn)
		}
	}
	return out
}
