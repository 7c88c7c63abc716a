//go:build !linux

package envoytest

import "os/exec"

func setProcAttr(*exec.Cmd) {}
