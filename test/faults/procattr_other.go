//go:build !linux

package faults

import "syscall"

// childProcAttr puts callbackd in its own process group.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
