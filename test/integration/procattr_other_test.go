//go:build !linux

package integration_test

import "syscall"

// childProcAttr puts callbackd in its own process group.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
