package envoytest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// What a running Envoy reports: its stats, logs and memory.

// Stats returns Envoy's counters and gauges from /stats, optionally limited to
// names matching the regular expression filter (Envoy's ?filter=). Text
// readouts and histograms are left out. Custom metrics of a wasm plugin show
// up as "wasmcustom.<name>".
func (e *Envoy) Stats(filter string) (map[string]uint64, error) {
	path := "/stats"
	if filter != "" {
		path += "?filter=" + url.QueryEscape(filter)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := e.Admin(ctx, path)
	if err != nil {
		return nil, err
	}
	return ParseStats(string(b)), nil
}

// Stat returns one counter or gauge by its exact name (0 if absent).
func (e *Envoy) Stat(name string) (uint64, error) {
	m, err := e.Stats("^" + regexp.QuoteMeta(name) + "$")
	if err != nil {
		return 0, err
	}
	return m[name], nil
}

// ParseStats parses the plain-text output of Envoy's /stats ("name: value"
// lines) into a map, keeping the lines whose value is an unsigned integer.
func ParseStats(text string) map[string]uint64 {
	m := map[string]uint64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndex(line, ": ")
		if i <= 0 {
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSpace(line[i+2:]), 10, 64)
		if err != nil {
			continue
		}
		m[line[:i]] = v
	}
	return m
}

// Logs returns everything Envoy has written to stdout and stderr so far
// (also after Stop).
func (e *Envoy) Logs() string {
	e.mu.Lock()
	saved, stopped := e.savedLogs, e.stopped
	e.mu.Unlock()
	if stopped && saved != "" {
		return saved
	}
	b, err := os.ReadFile(e.logPath)
	if err != nil {
		return saved
	}
	return string(b)
}

// WaitForLog waits until Envoy's log contains substr, the process exits, or
// ctx ends.
func (e *Envoy) WaitForLog(ctx context.Context, substr string) error {
	for {
		if strings.Contains(e.Logs(), substr) {
			return nil
		}
		select {
		case <-e.done:
			if strings.Contains(e.Logs(), substr) {
				return nil
			}
			return fmt.Errorf("envoytest: envoy exited before logging %q", substr)
		case <-ctx.Done():
			return fmt.Errorf("envoytest: waiting for log %q: %w", substr, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ResidentMemory returns Envoy's resident set size in bytes (VmRSS from
// /proc/<pid>/status; where there is no /proc, the admin /memory endpoint's
// total_physical_bytes).
func (e *Envoy) ResidentMemory() (uint64, error) {
	if rss, err := procRSS(e.Pid()); err == nil {
		return rss, nil
	}
	m, err := e.Memory()
	if err != nil {
		return 0, err
	}
	return m["total_physical_bytes"], nil
}

// Memory returns the admin /memory endpoint's figures in bytes: allocated,
// heap_size, pageheap_unmapped, pageheap_free, total_thread_cache,
// total_physical_bytes.
func (e *Envoy) Memory() (map[string]uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := e.Admin(ctx, "/memory")
	if err != nil {
		return nil, err
	}
	var raw map[string]string
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("envoytest: /memory: %v", err)
	}
	m := map[string]uint64{}
	for k, v := range raw {
		if n, err := strconv.ParseUint(v, 10, 64); err == nil {
			m[k] = n
		}
	}
	return m, nil
}

func procRSS(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				n, err := strconv.ParseUint(f[0], 10, 64)
				return n * 1024, err
			}
		}
	}
	return 0, errors.New("envoytest: no VmRSS in /proc status")
}
