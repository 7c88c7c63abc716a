package envoytest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Changing a running Envoy's configuration: its listener (file-based LDS) and the plugin's configuration.

// writeFileAtomic writes data to a temporary file in path's directory and
// renames it over path, so a watcher never sees a partial file.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(tmp, 0o644)
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		_ = os.Remove(tmp)
	}
	return werr
}

// Reconfigure changes the listener of an Envoy started with
// DynamicListeners: it applies change to a copy of the current options,
// renders the listener, atomically replaces the LDS file (write to a temporary
// file, then rename) and waits until Envoy has applied it
// (listener_manager.lds.update_success grows and no listener is warming) or
// rejected it (update_rejected grows: the error wraps ErrRejected and carries
// the log's error lines; Envoy keeps the old listener).
//
// Only listener-level options take effect: Routes (over existing clusters),
// XFFNumTrustedHops, UseRemoteAddress, Wasm, LocalRateLimit. Connections opened before the
// update keep the old filter chain until they drain (Options.DrainTime), so
// use new connections to observe the change; the shared Client's idle
// connections are closed on success.
func (e *Envoy) Reconfigure(ctx context.Context, change func(*Options)) error {
	if e.ldsPath == "" {
		return errors.New("envoytest: Reconfigure needs Options.DynamicListeners")
	}
	e.reconfMu.Lock()
	defer e.reconfMu.Unlock()
	cur := e.Options()
	next := cur
	if next.Wasm != nil {
		w := *next.Wasm
		if w.Env != nil {
			w.Env = make(map[string]string, len(next.Wasm.Env))
			for k, v := range next.Wasm.Env {
				w.Env[k] = v
			}
		}
		next.Wasm = &w
	}
	if next.LocalRateLimit != nil {
		l := *next.LocalRateLimit
		next.LocalRateLimit = &l
	}
	next.Routes = append([]Route(nil), next.Routes...)
	change(&next)
	next.Bin, next.Dir, next.Upstream, next.Clusters = cur.Bin, cur.Dir, cur.Upstream, cur.Clusters
	next.DynamicListeners, next.ListenerPort = true, cur.ListenerPort
	n, err := next.normalized()
	if err != nil {
		return err
	}
	if n.AccessLogFormat != "" && n.AccessLogPath == "" {
		n.AccessLogPath = filepath.Join(e.dir, "access.log")
	}
	render := n
	if n.Wasm != nil {
		if _, err := os.Stat(n.Wasm.File); err != nil {
			return fmt.Errorf("envoytest: wasm module: %w", err)
		}
		if e.container != "" && !e.mounted(n.Wasm.File) {
			// A module the running container cannot see: copy it into the
			// mounted directory and name the copy.
			b, err := os.ReadFile(n.Wasm.File)
			if err != nil {
				return err
			}
			w := *n.Wasm
			w.File = filepath.Join(e.dir, fmt.Sprintf("module-%d.wasm", e.ldsVersion+1))
			if err := os.WriteFile(w.File, b, 0o644); err != nil {
				return err
			}
			render.Wasm = &w
		}
	}

	before, err := e.Stats(`^listener_manager\.lds\.update_(success|rejected)$`)
	if err != nil {
		return err
	}
	logLen := len(e.Logs())
	version := strconv.Itoa(e.ldsVersion + 1)
	lds, err := renderLDS(render, e.listenPort, version)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(e.ldsPath, []byte(lds)); err != nil {
		return err
	}
	e.ldsVersion++
	for {
		st, err := e.Stats(`^listener_manager\.(lds\.update_(success|rejected)|total_listeners_warming)$`)
		if err == nil {
			if st["listener_manager.lds.update_rejected"] > before["listener_manager.lds.update_rejected"] {
				logs := e.logsSince(ctx, logLen, "config rejected")
				return fmt.Errorf("envoytest: LDS version %s: %w\n%s", version, ErrRejected, logDigest(logs, 20))
			}
			if st["listener_manager.lds.update_success"] > before["listener_manager.lds.update_success"] &&
				st["listener_manager.total_listeners_warming"] == 0 {
				e.mu.Lock()
				e.opts = n
				e.mu.Unlock()
				e.client.CloseIdleConnections()
				return nil
			}
		}
		if err := e.pause(ctx); err != nil {
			return fmt.Errorf("envoytest: waiting for LDS version %s: %w\n%s", version, err, logDigest(e.Logs(), 20))
		}
	}
}

// SetPluginConfig replaces the wasm plugin's configuration (Wasm.Config) of an
// Envoy started with DynamicListeners and Wasm; see Reconfigure.
func (e *Envoy) SetPluginConfig(ctx context.Context, config string) error {
	if e.Options().Wasm == nil {
		return errors.New("envoytest: SetPluginConfig needs Options.Wasm")
	}
	return e.Reconfigure(ctx, func(o *Options) { o.Wasm.Config = config })
}

// mounted reports whether the container sees the file path: one of its
// read-only mounts, or inside its working directory.
func (e *Envoy) mounted(path string) bool {
	if strings.HasPrefix(path, e.dir+string(filepath.Separator)) {
		return true
	}
	for _, m := range e.mounts {
		if m == path {
			return true
		}
	}
	return false
}

// logsSince returns Envoy's log after its first from bytes, once it holds
// until (for at most 2 s): Envoy counts a rejected update in its stats
// before its log lines about it reach the log (a container's log lags
// further), and the error of a rejection carries those lines.
func (e *Envoy) logsSince(ctx context.Context, from int, until string) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for {
		logs := e.Logs()
		if len(logs) >= from {
			logs = logs[from:]
		}
		if strings.Contains(logs, until) || e.pause(ctx) != nil {
			return logs
		}
	}
}
