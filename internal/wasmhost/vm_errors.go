package wasmhost

import (
	"errors"
	"fmt"
	"strings"
)

// StartError is returned by NewVM when the plugin fails to start: VM start
// (_initialize), proxy_on_vm_start or proxy_on_configure returned false or
// crashed. Envoy refuses the configuration in that case. Error() includes
// every line the plugin logged, so a test can assert that a bad
// configuration names the offending field.
type StartError struct {
	// Phase is "initialize", "proxy_on_vm_start" or "proxy_on_configure".
	Phase string
	// Err is the trap, or nil if the callback returned false.
	Err  error
	Logs []LogEntry
}

func (e *StartError) Error() string {
	var b strings.Builder
	if e.Err != nil {
		fmt.Fprintf(&b, "wasmhost: plugin failed in %s: %v", e.Phase, e.Err)
	} else {
		fmt.Fprintf(&b, "wasmhost: %s returned false (Envoy rejects the configuration)", e.Phase)
	}
	if len(e.Logs) > 0 {
		b.WriteString("; plugin log:")
		for _, l := range e.Logs {
			b.WriteString("\n  ")
			b.WriteString(l.String())
		}
	}
	return b.String()
}

func (e *StartError) Unwrap() error { return e.Err }

// TrapError reports that a call into the VM crashed (a Go panic in the
// plugin, a trap, or a restricted host call). Envoy then marks the VM failed:
// no further callbacks run on it and its streams follow the failure policy.
type TrapError struct {
	// Callback is the export that was running, e.g. "proxy_on_request_headers".
	Callback string
	Err      error
}

func (e *TrapError) Error() string {
	return fmt.Sprintf("wasmhost: %s crashed: %v", e.Callback, e.Err)
}

func (e *TrapError) Unwrap() error { return e.Err }

// ErrVMFailed is wrapped by errors of operations refused because the VM
// crashed earlier (see VM.Failed).
var ErrVMFailed = errors.New("wasmhost: VM failed earlier")
