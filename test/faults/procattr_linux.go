//go:build linux

package faults

import "syscall"

// childProcAttr puts callbackd in its own process group and has the kernel kill it if the test
// binary dies, so a crashed test run never leaves a callbackd behind.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
