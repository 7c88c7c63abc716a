package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/envoytest"
)

// machine describes where the numbers were measured.
type machine struct {
	CPU      string
	Cores    int
	MemTotal string
	Kernel   string
	Go       string
	Envoy    string
	Commit   string
}

func describeMachine(ctx context.Context, root string) machine {
	m := machine{Cores: runtime.NumCPU(), Go: runtime.Version()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if m.CPU == "" {
		m.CPU = runtime.GOARCH
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				if f := strings.Fields(rest); len(f) == 2 {
					kb, _ := strconv.ParseUint(f[0], 10, 64)
					m.MemTotal = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = runtime.GOOS + " " + strings.TrimSpace(string(b))
	}
	if v, err := envoytest.EnvoyVersion(ctx, ""); err == nil {
		m.Envoy = v
		if i := strings.Index(v, "version: "); i >= 0 {
			m.Envoy = strings.TrimSpace(v[i+len("version: "):])
		}
	} else {
		m.Envoy = "not found: " + err.Error()
	}
	if out, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--short", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
		if out, err := exec.CommandContext(ctx, "git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(out))) > 0 {
			m.Commit += " (with uncommitted changes)"
		}
	}
	return m
}

// loadAvg returns the 1-minute load average ("" if unknown). The machine
// may be shared, so every section records it.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	if f := strings.Fields(string(b)); len(f) >= 3 {
		return f[0] + " " + f[1] + " " + f[2]
	}
	return ""
}

// clkTck is the kernel's USER_HZ, the unit of /proc/<pid>/stat times.
const clkTck = 100

// procCPU returns the CPU time (user+system) process pid has used.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may contain spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("bad /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("bad /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad /proc/%d/stat", pid)
	}
	return time.Duration(ut+st) * time.Second / clkTck, nil
}

// selfCPU returns the CPU time this process (generator and upstream) used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startEnvoy starts Envoy with a generous start-up bound: on a loaded
// two-core machine V8 compiling the 4 MB Go module for every VM can take
// well over Envoy's usual few seconds.
func startEnvoy(ctx context.Context, o envoytest.Options) (*envoytest.Envoy, error) {
	if o.StartTimeout == 0 {
		o.StartTimeout = 5 * time.Minute
	}
	t0 := time.Now()
	e, err := envoytest.Start(ctx, o)
	if err == nil && time.Since(t0) > 10*time.Second {
		progress("Envoy took %v to become ready", time.Since(t0).Round(time.Second))
	}
	return e, err
}

// sluiceStats returns the plugin's counters and gauges from Envoy's /stats
// (wasmcustom.sluice...), keyed by the name after "sluice" with dots as
// underscores ("cas_retries", "rule_<name>_allowed", "table_overflow"), so
// that both the dotted names (sluice.cas.retries) and the older underscored
// ones (sluice_cas_retries) are read alike.
func sluiceStats(e *envoytest.Envoy) map[string]uint64 {
	raw, err := e.Stats(`^wasmcustom\.sluice`)
	out := map[string]uint64{}
	if err != nil {
		return out
	}
	for k, v := range raw {
		k = strings.TrimPrefix(k, "wasmcustom.sluice")
		k = strings.TrimLeft(strings.ReplaceAll(k, ".", "_"), "_")
		out[k] += v
	}
	return out
}

// raiseNoFile lifts the soft limit on open files to the hard limit (Envoy,
// started afterwards, inherits it) and returns the resulting soft limit.
func raiseNoFile() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	if rl.Cur < rl.Max {
		want := rl
		want.Cur = rl.Max
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want) == nil {
			rl = want
		}
	}
	return rl.Cur
}
