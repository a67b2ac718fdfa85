//go:build linux

package testenv

import "syscall"

// sysProcAttr puts a server in its own process group (a terminal's Ctrl-C reaches the test
// binary, which then stops its servers in order) and asks the kernel to SIGKILL it when the
// test binary dies, so that no server outlives its test. Credentials, when given, are applied
// before the parent-death signal is armed, which keeps the signal in place.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
		Credential: cred,
	}
}
