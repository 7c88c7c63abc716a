package wasmhost

import (
	"fmt"
	"strings"
)

// LogEntry is one line the plugin logged (proxy_log, or stdout/stderr
// through WASI fd_write), or a message of this host about the plugin.
type LogEntry struct {
	Level LogLevel
	// Message is the text. For stdout/stderr a single trailing newline is
	// removed, as Envoy does; Envoy logs every fd_write as one line.
	Message string
	// ContextID is the context (effective, if set) the line was logged from
	// (0 during VM start).
	ContextID uint32
	// Source is "proxy_log", "stdout" (logged at info by Envoy), "stderr"
	// (logged at error) or "host" (this host's own diagnostics).
	Source string
}

func (e LogEntry) String() string { return "[" + e.Level.String() + "] " + e.Message }

func (vm *VM) log(level LogLevel, msg, source string) {
	vm.appendLog(LogEntry{Level: level, Message: msg, ContextID: vm.active(), Source: source})
}

func (vm *VM) logHost(level LogLevel, msg string) {
	vm.appendLog(LogEntry{Level: level, Message: msg, ContextID: vm.current, Source: "host"})
}

func (vm *VM) appendLog(e LogEntry) {
	if limit := vm.h.cfg.maxLogs; limit > 0 && len(vm.logs) >= limit {
		drop := len(vm.logs) - limit/2
		n := copy(vm.logs, vm.logs[drop:])
		clear(vm.logs[n:])
		vm.logs = vm.logs[:n]
		vm.dropped += drop
	}
	vm.logs = append(vm.logs, e)
	vm.h.echo(vm, e)
}

// DroppedLogs returns how many old log lines were dropped to respect
// WithMaxLogEntries.
func (vm *VM) DroppedLogs() int {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.dropped
}

func (vm *VM) warn(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	vm.warnings = append(vm.warnings, msg)
	vm.logHost(LogWarn, msg)
}

// Logs returns a copy of every line logged on this VM so far.
func (vm *VM) Logs() []LogEntry {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return append([]LogEntry(nil), vm.logs...)
}

// LogText returns the log lines joined by newlines ("[level] message").
func (vm *VM) LogText() string {
	var b strings.Builder
	for _, l := range vm.Logs() {
		b.WriteString(l.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// ClearLogs forgets the captured log lines.
func (vm *VM) ClearLogs() {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	vm.logs = nil
}

// Warnings returns what this host noticed that Envoy would handle badly or
// silently (a second local response on one stream, a continue on a stream
// that is not paused, a local response sent from the root context, ...).
func (vm *VM) Warnings() []string {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return append([]string(nil), vm.warnings...)
}
