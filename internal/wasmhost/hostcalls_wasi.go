package wasmhost

import (
	"encoding/binary"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/tetratelabs/wazero/api"
)

// This file implements the WASI functions exactly as proxy-wasm-cpp-host
// does (src/exports.cc, wasi_unstable_*): no file system, stdout/stderr go
// to the log, clocks come from the host, poll_oneoff never sleeps. The same
// implementations are registered under wasi_snapshot_preview1 and
// wasi_unstable.

func errno(st []uint64, e uint32) { st[0] = uint64(e) }

func isStdio(fd uint32) bool { return fd == 1 || fd == 2 }

func wasiImpls() map[string]proxyFn {
	enosys := func(_ *VM, _ api.Module, st []uint64) { errno(st, errnoNosys) }
	enotsup := func(_ *VM, _ api.Module, st []uint64) { errno(st, errnoNotsup) }
	stdioOK := func(_ *VM, _ api.Module, st []uint64) {
		if isStdio(u32(st[0])) {
			errno(st, errnoSuccess)
		} else {
			errno(st, errnoBadf)
		}
	}
	return map[string]proxyFn{
		"fd_write": func(vm *VM, _ api.Module, st []uint64) {
			n, e := wasiWritev(vm, u32(st[0]), u32(st[1]), u32(st[2]))
			if e == errnoSuccess && !vm.mem.WriteUint32Le(u32(st[3]), n) {
				e = errnoFault
			}
			errno(st, e)
		},
		"fd_pwrite": func(vm *VM, _ api.Module, st []uint64) {
			if !isStdio(u32(st[0])) {
				errno(st, errnoBadf)
				return
			}
			n, e := wasiWritev(vm, u32(st[0]), u32(st[1]), u32(st[2]))
			if e == errnoSuccess && !vm.mem.WriteUint32Le(u32(st[4]), n) {
				e = errnoFault
			}
			errno(st, e)
		},
		"fd_read":  enosys,
		"fd_pread": enosys,
		"fd_seek": func(vm *VM, _ api.Module, st []uint64) {
			vm.logHost(LogError, "wasi_unstable fd_seek")
			errno(st, errnoSuccess)
		},
		"fd_close": func(vm *VM, _ api.Module, st []uint64) {
			vm.logHost(LogError, "wasi_unstable fd_close")
			errno(st, errnoSuccess)
		},
		"fd_fdstat_get": func(vm *VM, _ api.Module, st []uint64) {
			if !isStdio(u32(st[0])) {
				errno(st, errnoBadf)
				return
			}
			var b [24]byte
			binary.LittleEndian.PutUint64(b[8:], 64) // fs_rights_base = FD_WRITE
			vm.mem.Write(u32(st[1]), b[:])
			errno(st, errnoSuccess)
		},
		"fd_fdstat_set_flags":   enosys,
		"fd_fdstat_set_rights":  stdioOK,
		"fd_advise":             func(_ *VM, _ api.Module, st []uint64) { errno(st, errnoSuccess) },
		"fd_allocate":           stdioOK,
		"fd_datasync":           stdioOK,
		"fd_filestat_set_size":  stdioOK,
		"fd_filestat_set_times": stdioOK,
		"fd_sync":               stdioOK,
		"fd_readdir": func(vm *VM, _ api.Module, st []uint64) {
			if !vm.mem.WriteUint32Le(u32(st[4]), 0) {
				errno(st, errnoFault)
				return
			}
			errno(st, errnoNotdir)
		},
		"fd_renumber": func(_ *VM, _ api.Module, st []uint64) {
			if !isStdio(u32(st[0])) || !isStdio(u32(st[1])) {
				errno(st, errnoBadf)
				return
			}
			errno(st, errnoNotsup)
		},
		"fd_tell": func(vm *VM, _ api.Module, st []uint64) {
			if !isStdio(u32(st[0])) {
				errno(st, errnoBadf)
				return
			}
			if !vm.mem.WriteUint64Le(u32(st[1]), 0) {
				errno(st, errnoFault)
				return
			}
			errno(st, errnoSuccess)
		},
		"fd_prestat_get":        func(_ *VM, _ api.Module, st []uint64) { errno(st, errnoBadf) },
		"fd_prestat_dir_name":   enosys,
		"fd_filestat_get":       func(_ *VM, _ api.Module, st []uint64) { errno(st, errnoBadf) },
		"path_open":             func(_ *VM, _ api.Module, st []uint64) { errno(st, errnoNoent) },
		"path_filestat_get":     enotsup,
		"path_create_directory": enotsup, "path_filestat_set_times": enotsup, "path_link": enotsup,
		"path_remove_directory": enotsup, "path_rename": enotsup, "path_symlink": enotsup,
		"path_unlink_file": enotsup,
		"path_readlink": func(vm *VM, _ api.Module, st []uint64) {
			if !vm.mem.WriteUint32Le(u32(st[5]), 0) {
				errno(st, errnoFault)
				return
			}
			errno(st, errnoNotsup)
		},
		"sock_accept": func(vm *VM, _ api.Module, st []uint64) {
			if !vm.mem.WriteUint64Le(u32(st[2]), 0) { // cpp-host writes an unsigned long
				errno(st, errnoFault)
				return
			}
			errno(st, errnoNotsup)
		},
		"sock_recv": func(vm *VM, _ api.Module, st []uint64) {
			if !vm.mem.WriteUint32Le(u32(st[4]), 0) || !vm.mem.WriteUint16Le(u32(st[5]), 0) {
				errno(st, errnoFault)
				return
			}
			errno(st, errnoNotsup)
		},
		"sock_send": func(vm *VM, _ api.Module, st []uint64) {
			if !vm.mem.WriteUint32Le(u32(st[4]), 0) {
				errno(st, errnoFault)
				return
			}
			errno(st, errnoNotsup)
		},
		"sock_shutdown": enotsup,
		"environ_sizes_get": func(vm *VM, _ api.Module, st []uint64) {
			env := vm.h.cfg.env
			size := 0
			for k, v := range env {
				size += len(k) + len(v) + 2
			}
			if !vm.mem.WriteUint32Le(u32(st[0]), uint32(len(env))) || !vm.mem.WriteUint32Le(u32(st[1]), uint32(size)) {
				errno(st, errnoFault)
				return
			}
			errno(st, errnoSuccess)
		},
		"environ_get": func(vm *VM, _ api.Module, st []uint64) {
			arr, buf := u32(st[0]), u32(st[1])
			keys := make([]string, 0, len(vm.h.cfg.env))
			for k := range vm.h.cfg.env {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				entry := k + "=" + vm.h.cfg.env[k] + "\x00"
				if !vm.mem.WriteUint32Le(arr, buf) || !vm.mem.WriteString(buf, entry) {
					errno(st, errnoFault)
					return
				}
				buf += uint32(len(entry))
				arr += 4
			}
			errno(st, errnoSuccess)
		},
		"args_get": func(_ *VM, _ api.Module, st []uint64) { errno(st, errnoSuccess) },
		"args_sizes_get": func(vm *VM, _ api.Module, st []uint64) {
			if !vm.mem.WriteUint32Le(u32(st[0]), 0) || !vm.mem.WriteUint32Le(u32(st[1]), 0) {
				errno(st, errnoFault)
				return
			}
			errno(st, errnoSuccess)
		},
		"clock_time_get": func(vm *VM, _ api.Module, st []uint64) {
			var t uint64
			switch u32(st[0]) {
			case 0:
				t = uint64(vm.h.cfg.clock.Now().UnixNano())
			case 1:
				t = uint64(vm.h.cfg.clock.Monotonic())
			default:
				errno(st, errnoNotsup)
				return
			}
			if !vm.mem.WriteUint64Le(u32(st[2]), t) {
				errno(st, errnoFault)
				return
			}
			errno(st, errnoSuccess)
		},
		"clock_res_get": func(vm *VM, _ api.Module, st []uint64) {
			switch u32(st[0]) {
			case 0, 1:
			default:
				errno(st, errnoNotsup)
				return
			}
			if !vm.mem.WriteUint64Le(u32(st[1]), 1) {
				errno(st, errnoFault)
				return
			}
			errno(st, errnoSuccess)
		},
		"random_get": func(vm *VM, _ api.Module, st []uint64) {
			n := u32(st[1])
			if n > maxRandomGetBytes {
				errno(st, errnoInval)
				return
			}
			if n == 0 {
				errno(st, errnoSuccess)
				return
			}
			buf := make([]byte, n)
			if _, err := io.ReadFull(vm.h.cfg.random, buf); err != nil {
				panic(trapPanic{fmt.Errorf("random_get: %w", err)})
			}
			if !vm.mem.Write(u32(st[0]), buf) {
				errno(st, errnoFault)
				return
			}
			errno(st, errnoSuccess)
		},
		"sched_yield": func(_ *VM, _ api.Module, st []uint64) { errno(st, errnoSuccess) },
		"poll_oneoff": func(vm *VM, _ api.Module, st []uint64) {
			// cpp-host does not wait: it reports zero events at once.
			if !vm.mem.WriteUint32Le(u32(st[3]), 0) {
				errno(st, errnoFault)
				return
			}
			vm.pollSpins++
			if vm.pollSpins > vm.h.cfg.maxPollSpin {
				if _, manual := vm.h.cfg.clock.(*ManualClock); manual {
					panic(trapPanic{fmt.Errorf("poll_oneoff called %d times in one callback: the guest is waiting for time to pass, but the ManualClock only moves when the test advances it", vm.pollSpins)})
				}
			}
			errno(st, errnoSuccess)
		},
		"proc_exit": func(vm *VM, _ api.Module, _ []uint64) {
			// cpp-host only reports the call and returns to the guest.
			vm.logHost(LogError, "wasi_unstable proc_exit")
		},
	}
}

// wasiWritev implements cpp-host writevImpl: stdout is logged at info,
// stderr at error, one log line per call with one trailing newline removed.
func wasiWritev(vm *VM, fd, iovs, iovsLen uint32) (uint32, uint32) {
	var level LogLevel
	var source string
	switch fd {
	case 1:
		level, source = LogInfo, "stdout"
	case 2:
		level, source = LogError, "stderr"
	default:
		return 0, errnoBadf
	}
	var b strings.Builder
	for i := uint32(0); i < iovsLen; i++ {
		iov, ok := vm.mem.Read(iovs+i*8, 8)
		if !ok {
			return 0, errnoFault
		}
		ptr, n := binary.LittleEndian.Uint32(iov), binary.LittleEndian.Uint32(iov[4:])
		if n == 0 {
			continue
		}
		data, ok := vm.mem.Read(ptr, n)
		if !ok {
			return 0, errnoFault
		}
		b.Write(data)
	}
	s := b.String()
	written := uint32(len(s))
	if written > 0 {
		vm.log(level, strings.TrimSuffix(s, "\n"), source)
	}
	return written, errnoSuccess
}
