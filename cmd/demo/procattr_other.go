//go:build !linux

package main

import "syscall"

// childProcAttr puts callbackd in its own process group, so Ctrl-C in a terminal reaches only
// the demo, which then stops it in order.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
