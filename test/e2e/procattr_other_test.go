//go:build !linux

package e2e

import "syscall"

// childProcAttr puts a local process in its own process group.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
