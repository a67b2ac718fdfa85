//go:build linux

package e2e

import "syscall"

// childProcAttr puts a local process (operator, callbackd) in its own process group and has the
// kernel SIGKILL it if the test binary dies, so that none outlives the test.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
