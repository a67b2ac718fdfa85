//go:build linux

package outbox_test

import "syscall"

// childProcAttr has the kernel kill the child dispatcher if the test binary dies, so a crashed
// test run never leaves one behind.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
