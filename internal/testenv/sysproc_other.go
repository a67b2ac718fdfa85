//go:build !linux

package testenv

import "syscall"

// sysProcAttr puts a server in its own process group. Outside Linux there is no parent-death
// signal; the reaper removes what a killed test binary leaves behind.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}
