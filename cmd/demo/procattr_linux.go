package main

import "syscall"

// childProcAttr puts callbackd in its own process group (so Ctrl-C in a terminal reaches only
// the demo, which then stops it in order) and has the kernel kill it if the demo dies.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
