//go:build linux

package faults

import (
	"syscall"
	"unsafe"
)

// realtimeThread moves the calling OS thread to SCHED_FIFO priority 1, so that the callbackd
// threads woken by the release writes cannot preempt the loop before it wrote every last byte.
// It reports false when the system refuses (no privilege); the release then runs as it is.
//
// The caller must have locked its goroutine to the thread, and must call restore before
// unlocking it. The thread must NOT be left to die with a locked goroutine: children started
// with Pdeathsig (callbackd, PostgreSQL, Redis) are killed when the thread that forked them
// exits, and any thread may have been that one.
func realtimeThread() (ok bool, restore func() error) {
	const schedOther, schedFIFO = 0, 1
	set := func(policy, priority int32) error {
		param := struct{ priority int32 }{priority: priority}
		_, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_SETSCHEDULER, 0, uintptr(policy), uintptr(unsafe.Pointer(&param)))
		if errno != 0 {
			return errno
		}
		return nil
	}
	if err := set(schedFIFO, 1); err != nil {
		return false, func() error { return nil }
	}
	return true, func() error { return set(schedOther, 0) }
}
