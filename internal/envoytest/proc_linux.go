package envoytest

import (
	"os/exec"
	"syscall"
)

// setProcAttr makes the kernel kill Envoy if the test process dies first.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
