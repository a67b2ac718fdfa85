//go:build !linux

package outbox_test

import "syscall"

// childProcAttr: without Pdeathsig, the test's cleanup kills the child.
func childProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
