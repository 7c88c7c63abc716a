package wasmhost

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
)

// VM is one instance of the module: what Envoy runs on one worker thread.
// It has one root (plugin) context and any number of HTTP stream contexts.
//
// Every method locks the VM, so a VM may be driven from several goroutines,
// but calls into it are serialized as on an Envoy worker. Different VMs run
// in parallel.
type VM struct {
	h   *Host
	id  int
	ctx context.Context
	mod api.Module
	mem api.Memory
	fn  guestFuncs
	// mapped is the linear memory's own mapping (WithResidentMemory).
	mapped *mappedMemory

	mu sync.Mutex

	calls    []uint64 // host calls per hostFunc.idx
	scratch  []byte   // reused buffer for shared data reads
	restrict int
	depth    int
	stacks   [][]uint64

	rootID        uint32
	nextContextID uint32
	current       uint32 // context of the running callback
	effective     uint32 // proxy_set_effective_context; 0 = none
	streams       map[uint32]*Stream

	vmConfig, pluginConfig []byte
	configuring            bool // PluginConfiguration buffer readable (cpp-host temp_plugin_)

	stopNext  bool
	after     []func()
	inAfter   bool
	endQueue  []*Stream
	pollSpins int

	tickPeriod time.Duration
	tickDue    time.Duration // monotonic time of the next timer tick
	tickArmed  bool

	logs     []LogEntry
	dropped  int
	warnings []string
	failed   error
	closed   bool

	rootDone        bool // on_done(root) returned false; waiting for proxy_done
	rootDeleted     bool
	metricIDs       map[uint32]*stat
	nextMetricID    [3]uint32
	httpCalls       map[uint32]*HTTPCall
	nextHTTPToken   uint32
	httpResp        *httpCallResponse
	statusCode      uint32
	statusMsg       string
	pendingMu       sync.Mutex
	pendingQueueRdy []queueReady
}

type queueReady struct{ contextID, token uint32 }

type guestFuncs struct {
	initialize, start, main, mainVoid, malloc                     api.Function
	onContextCreate, onVMStart, onConfigure                       api.Function
	onRequestHeaders, onRequestBody, onRequestTrailers            api.Function
	onResponseHeaders, onResponseBody, onResponseTrailers         api.Function
	onLog, onDone, onDelete, onTick, onQueueReady, onHTTPCallResp api.Function
}

// NewVM instantiates the module (one Envoy worker VM) and starts the plugin
// the way Envoy does: _initialize (then main or __main_void if exported),
// proxy_on_context_create(root, 0), proxy_on_vm_start(root, len(vmConfig)),
// proxy_on_configure(root, len(pluginConfig)). vmConfig is readable as the
// VmConfiguration buffer at any time; pluginConfig as the
// PluginConfiguration buffer only during proxy_on_configure (and the root's
// proxy_on_context_create), as in Envoy. If the plugin refuses to start, the
// returned *StartError carries its log lines.
func (h *Host) NewVM(vmConfig, pluginConfig []byte) (*VM, error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, errors.New("wasmhost: host is closed")
	}
	id := h.nextVM
	h.nextVM++
	h.mu.Unlock()

	vm := &VM{
		h:             h,
		id:            id,
		calls:         make([]uint64, len(h.funcs)),
		nextContextID: 1, // 0 is the VM context
		streams:       map[uint32]*Stream{},
		vmConfig:      append([]byte(nil), vmConfig...),
		pluginConfig:  append([]byte(nil), pluginConfig...),
		metricIDs:     map[uint32]*stat{},
		nextMetricID:  [3]uint32{uint32(MetricCounter), uint32(MetricGauge), uint32(MetricHistogram)},
		httpCalls:     map[uint32]*HTTPCall{},
		nextHTTPToken: 1,
	}
	vm.ctx = context.WithValue(context.Background(), vmCtxKey{}, vm)
	ctx := vm.ctx
	if alloc, m := h.allocator(); alloc != nil {
		ctx, vm.mapped = experimental.WithMemoryAllocator(ctx, alloc), m
	}
	mod, err := h.rt.InstantiateModule(ctx, h.compiled,
		wazero.NewModuleConfig().WithName(fmt.Sprintf("vm%d", id)).WithStartFunctions())
	if err != nil {
		return nil, fmt.Errorf("wasmhost: instantiating VM %d: %w", id, err)
	}
	vm.mod = mod
	vm.mem = mod.Memory()
	f := &vm.fn
	for name, p := range map[string]*api.Function{
		"_initialize": &f.initialize, "_start": &f.start, "main": &f.main, "__main_void": &f.mainVoid,
		h.mallocName:              &f.malloc,
		"proxy_on_context_create": &f.onContextCreate, "proxy_on_vm_start": &f.onVMStart,
		"proxy_on_configure": &f.onConfigure, "proxy_on_request_headers": &f.onRequestHeaders,
		"proxy_on_request_body": &f.onRequestBody, "proxy_on_request_trailers": &f.onRequestTrailers,
		"proxy_on_response_headers": &f.onResponseHeaders, "proxy_on_response_body": &f.onResponseBody,
		"proxy_on_response_trailers": &f.onResponseTrailers, "proxy_on_log": &f.onLog,
		"proxy_on_done": &f.onDone, "proxy_on_delete": &f.onDelete, "proxy_on_tick": &f.onTick,
		"proxy_on_queue_ready": &f.onQueueReady, "proxy_on_http_call_response": &f.onHTTPCallResp,
	} {
		*p = mod.ExportedFunction(name) // nil when not exported
	}

	vm.mu.Lock()
	defer vm.mu.Unlock()
	fail := func(phase string, err error) (*VM, error) {
		logs := append([]LogEntry(nil), vm.logs...)
		_ = mod.Close(context.Background())
		vm.closed = true
		return nil, &StartError{Phase: phase, Err: err, Logs: logs}
	}

	// cpp-host WasmBase::startVm: restricted host calls during start.
	vm.restrict = restrictStart
	switch {
	case f.initialize != nil:
		err = vm.invoke(0, "_initialize", f.initialize, nil)
		if err == nil && f.main != nil {
			err = vm.invoke(0, "main", f.main, nil, 0, 0)
		} else if err == nil && f.mainVoid != nil {
			err = vm.invoke(0, "__main_void", f.mainVoid, nil)
		}
	case f.start != nil:
		err = vm.invoke(0, "_start", f.start, nil)
	}
	vm.restrict = restrictNone
	if err != nil {
		return fail("initialize", err)
	}

	// cpp-host ContextBase::onStart and onConfigure.
	vm.rootID = vm.allocContextID()
	vm.configuring = true
	err = vm.invoke(vm.rootID, "proxy_on_context_create", f.onContextCreate, nil, uint64(vm.rootID), 0)
	vm.configuring = false
	if err != nil {
		return fail("proxy_on_context_create", err)
	}
	ok := true
	err = vm.invoke(vm.rootID, "proxy_on_vm_start", f.onVMStart, func(ret uint64, _ bool) { ok = uint32(ret) != 0 },
		uint64(vm.rootID), uint64(len(vm.vmConfig)))
	if err != nil || !ok {
		return fail("proxy_on_vm_start", err)
	}
	vm.configuring = true
	err = vm.invoke(vm.rootID, "proxy_on_configure", f.onConfigure, func(ret uint64, _ bool) { ok = uint32(ret) != 0 },
		uint64(vm.rootID), uint64(len(vm.pluginConfig)))
	vm.configuring = false
	if err != nil || !ok {
		return fail("proxy_on_configure", err)
	}
	vm.finishOp()

	h.mu.Lock()
	h.vms = append(h.vms, vm)
	h.mu.Unlock()
	return vm, nil
}

// NewVMs creates n VMs with the same configuration, as Envoy does for n
// worker threads.
func (h *Host) NewVMs(n int, vmConfig, pluginConfig []byte) ([]*VM, error) {
	vms := make([]*VM, 0, n)
	for range n {
		vm, err := h.NewVM(vmConfig, pluginConfig)
		if err != nil {
			return nil, err
		}
		vms = append(vms, vm)
	}
	return vms, nil
}

// ID returns the VM's index in its Host (0 for the first VM).
func (vm *VM) ID() int { return vm.id }

// RootContextID returns the id of the plugin's root context (1: context ids
// start at 1, 0 being the VM context, as in cpp-host).
func (vm *VM) RootContextID() uint32 { return vm.rootID }

func (vm *VM) allocContextID() uint32 {
	for {
		id := vm.nextContextID
		vm.nextContextID++
		if id == 0 || id == vm.rootID {
			continue
		}
		if _, used := vm.streams[id]; !used {
			return id
		}
	}
}

// contextExists reports whether id names a live context of this VM (the VM
// context 0, the root context, or a stream not yet deleted).
func (vm *VM) contextExists(id uint32) bool {
	if id == 0 || (id == vm.rootID && !vm.rootDeleted) {
		return true
	}
	_, ok := vm.streams[id]
	return ok
}

// active returns the context host calls act on: the effective context if
// one is set and still exists, else the context of the running callback
// (cpp-host contextOrEffectiveContext).
func (vm *VM) active() uint32 {
	if vm.effective != 0 && vm.contextExists(vm.effective) {
		return vm.effective
	}
	return vm.current
}

// activeStream returns the stream of the active context, or nil for the
// root or VM context.
func (vm *VM) activeStream() *Stream { return vm.streams[vm.active()] }

func (vm *VM) stack(n int) []uint64 {
	for len(vm.stacks) <= vm.depth {
		vm.stacks = append(vm.stacks, make([]uint64, 16))
	}
	s := vm.stacks[vm.depth]
	if n > len(s) {
		s = make([]uint64, n)
		vm.stacks[vm.depth] = s
	}
	return s[:n]
}

// invoke calls a guest export on behalf of context ctxID the way cpp-host
// does: the effective context is cleared for the call and restored after it
// (SaveRestoreContext); post sees the result and whether
// proxy_send_local_response stopped iteration; then, for an outermost call,
// the actions deferred by the call run (DeferAfterCallActions). A missing
// export is skipped, as Envoy skips callbacks a module does not export.
func (vm *VM) invoke(ctxID uint32, name string, fn api.Function, post func(ret uint64, stopped bool), args ...uint64) error {
	if fn == nil {
		return nil
	}
	if vm.failed != nil {
		return fmt.Errorf("%w: %v", ErrVMFailed, vm.failed)
	}
	n := len(args)
	if r := len(fn.Definition().ResultTypes()); r > n {
		n = r
	}
	st := vm.stack(n)
	copy(st, args)
	saveCur, saveEff := vm.current, vm.effective
	vm.current, vm.effective = ctxID, 0
	ctx := vm.ctx
	var cancel context.CancelFunc
	if vm.h.cfg.callTimeout > 0 && vm.depth == 0 {
		ctx, cancel = context.WithTimeout(ctx, vm.h.cfg.callTimeout)
	}
	if vm.depth == 0 {
		vm.pollSpins = 0
	}
	vm.depth++
	err := fn.CallWithStack(ctx, st)
	vm.depth--
	if cancel != nil {
		cancel()
	}
	vm.current, vm.effective = saveCur, saveEff
	if err != nil {
		terr := &TrapError{Callback: name, Err: err}
		vm.failed = terr
		vm.after = nil
		vm.stopNext = false
		vm.logHost(LogCritical, terr.Error())
		return terr
	}
	if post != nil {
		post(st[0], vm.stopNext)
	}
	if vm.depth == 0 {
		vm.stopNext = false
		vm.runAfter()
	}
	return nil
}

// deferAction queues an action to run after the outermost running callback
// returns, like cpp-host addAfterVmCallAction.
func (vm *VM) deferAction(f func()) { vm.after = append(vm.after, f) }

func (vm *VM) runAfter() {
	if vm.inAfter {
		return
	}
	vm.inAfter = true
	for len(vm.after) > 0 && vm.failed == nil {
		f := vm.after[0]
		vm.after = vm.after[1:]
		f()
	}
	vm.after = nil
	vm.inAfter = false
}

// finishOp ends a host-driven operation: streams whose response completed
// (or that were reset) run proxy_on_log, proxy_on_done and proxy_on_delete,
// as Envoy destroys them at the end of the event, and queued
// proxy_on_queue_ready notifications are delivered.
func (vm *VM) finishOp() {
	for i := 0; i < 100; i++ {
		progressed := false
		for len(vm.endQueue) > 0 {
			s := vm.endQueue[0]
			vm.endQueue = vm.endQueue[1:]
			s.end()
			progressed = true
		}
		if vm.deliverQueueReady() {
			progressed = true
		}
		if !progressed {
			return
		}
	}
}

// op runs a host-driven operation under the VM lock.
func (vm *VM) op(f func() error) error {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.closed {
		return errors.New("wasmhost: VM is closed")
	}
	vm.deliverQueueReady()
	err := f()
	vm.finishOp()
	return err
}

// opAction is op for a stream operation that answers an Action.
func (vm *VM) opAction(f func() (Action, error)) (Action, error) {
	var act Action
	err := vm.op(func() error {
		var err error
		act, err = f()
		return err
	})
	return act, err
}

// Tick calls proxy_on_tick on the root context now, whether or not a tick
// period is set, then runs what the plugin deferred (streams resumed or
// answered through proxy_set_effective_context; their on_response_headers
// for local responses, and on_log/on_done/on_delete for finished streams).
func (vm *VM) Tick() error {
	return vm.op(func() error {
		return vm.invoke(vm.rootID, "proxy_on_tick", vm.fn.onTick, nil, uint64(vm.rootID))
	})
}

// TickPeriod returns the period last set by proxy_set_tick_period_milliseconds
// (0: no timer).
func (vm *VM) TickPeriod() time.Duration {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.tickPeriod
}

func (vm *VM) setTickPeriod(d time.Duration) {
	vm.tickPeriod = d
	if d <= 0 {
		vm.tickArmed = false
		return
	}
	vm.tickArmed = true
	vm.tickDue = vm.h.cfg.clock.Monotonic() + d
}

func (vm *VM) nextTickDue() (time.Duration, bool) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.closed || vm.failed != nil || !vm.tickArmed {
		return 0, false
	}
	return vm.tickDue, true
}

// timerTick fires the tick timer due at due and re-arms it.
func (vm *VM) timerTick(due time.Duration) error {
	return vm.op(func() error {
		if !vm.tickArmed || vm.tickDue != due {
			return nil
		}
		vm.tickDue = due + vm.tickPeriod
		err := vm.invoke(vm.rootID, "proxy_on_tick", vm.fn.onTick, nil, uint64(vm.rootID))
		// If the plugin changed the period during the tick, setTickPeriod
		// already re-armed the timer from now.
		return err
	})
}

// Failed returns the *TrapError that failed the VM, or nil.
func (vm *VM) Failed() error {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.failed
}

// OpenStreams returns the streams not yet deleted, by context id.
func (vm *VM) OpenStreams() []*Stream {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	out := make([]*Stream, 0, len(vm.streams))
	for _, s := range vm.streams {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// Close shuts the plugin down as Envoy does on a configuration removal:
// open streams end (on_log, on_done, on_delete), then proxy_on_done on the
// root context and, if it returns true, proxy_on_delete (if it returns false
// the plugin must call proxy_done later, which this host honours only during
// that proxy_on_done call's follow-ups). The instance is then released.
func (vm *VM) Close() error {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.closed {
		return nil
	}
	for _, s := range vm.streams {
		if !s.ended {
			vm.endQueue = append(vm.endQueue, s)
		}
	}
	sort.Slice(vm.endQueue, func(i, j int) bool { return vm.endQueue[i].id < vm.endQueue[j].id })
	vm.finishOp()
	if vm.failed == nil {
		done := true
		_ = vm.invoke(vm.rootID, "proxy_on_done", vm.fn.onDone, func(ret uint64, _ bool) { done = uint32(ret) != 0 }, uint64(vm.rootID))
		if done {
			vm.deleteRoot()
		} else {
			vm.rootDone = true
		}
	}
	vm.closed = true
	return vm.mod.Close(context.Background())
}

// Kill makes the VM vanish at once, as a worker whose VM crashed or whose
// thread is gone: no callback of any kind runs any more (open streams get
// no proxy_on_log/on_done, the root context no proxy_on_done, no tick
// fires), and the instance is released. Whatever the plugin keeps in
// shared data stays there, which is what tests of leak recovery need.
func (vm *VM) Kill() error {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.closed {
		return nil
	}
	for _, s := range vm.streams {
		s.ended = true
		s.state = StreamReset
	}
	vm.endQueue = nil
	vm.tickArmed = false
	vm.closed = true
	return vm.mod.Close(context.Background())
}

func (vm *VM) deleteRoot() {
	if vm.rootDeleted {
		return
	}
	vm.rootDone = false
	_ = vm.invoke(vm.rootID, "proxy_on_delete", vm.fn.onDelete, nil, uint64(vm.rootID))
	vm.rootDeleted = true
}

// postQueueReady records a proxy_on_queue_ready notification for this VM;
// it may be called from another VM's goroutine.
func (vm *VM) postQueueReady(contextID, token uint32) {
	vm.pendingMu.Lock()
	vm.pendingQueueRdy = append(vm.pendingQueueRdy, queueReady{contextID, token})
	vm.pendingMu.Unlock()
}

// deliverQueueReady runs pending proxy_on_queue_ready callbacks (vm.mu held).
func (vm *VM) deliverQueueReady() bool {
	vm.pendingMu.Lock()
	pending := vm.pendingQueueRdy
	vm.pendingQueueRdy = nil
	vm.pendingMu.Unlock()
	for _, p := range pending {
		if vm.failed != nil {
			break
		}
		_ = vm.invoke(p.contextID, "proxy_on_queue_ready", vm.fn.onQueueReady, nil, uint64(p.contextID), uint64(p.token))
	}
	return len(pending) > 0
}

// DeliverPending runs proxy_on_queue_ready for items other VMs enqueued on
// queues this VM registered. Envoy posts these to the worker's event loop;
// this host delivers them at the start and end of every operation on the
// VM, or when DeliverPending is called.
func (vm *VM) DeliverPending() error {
	return vm.op(func() error { return nil })
}

// HTTPCalls returns the proxy_http_call requests still awaiting a response,
// by token.
func (vm *VM) HTTPCalls() []HTTPCall {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	out := make([]HTTPCall, 0, len(vm.httpCalls))
	for _, c := range vm.httpCalls {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Token < out[j].Token })
	return out
}

// RespondHTTPCall completes the HTTP call token: proxy_on_http_call_response
// (the calling root, token, number of headers, body size, number of trailers) runs with
// the response readable through the HttpCallResponse* maps and buffer. A nil
// resp models a failed call (reset): Envoy then reports 0/0/0 and
// proxy_get_status returns BrokenConnection with message "reset".
func (vm *VM) RespondHTTPCall(token uint32, resp *Response) error {
	return vm.op(func() error {
		call, ok := vm.httpCalls[token]
		if !ok {
			return fmt.Errorf("wasmhost: no pending HTTP call with token %d", token)
		}
		delete(vm.httpCalls, token)
		var nh, nb, nt int
		if resp != nil {
			vm.httpResp = &httpCallResponse{headers: newHeaderMap(resp.headers()), trailers: newHeaderMap(nil), body: append([]byte(nil), resp.Body...)}
			nh, nb = len(vm.httpResp.headers.kv), len(resp.Body)
		} else {
			vm.statusCode, vm.statusMsg = uint32(StatusBrokenConnection), "reset"
		}
		err := vm.invoke(call.root, "proxy_on_http_call_response", vm.fn.onHTTPCallResp, nil,
			uint64(call.root), uint64(token), uint64(nh), uint64(nb), uint64(nt))
		vm.httpResp = nil
		vm.statusCode, vm.statusMsg = 0, ""
		return err
	})
}
