//go:build linux

package faults

import (
	"syscall"
	"unsafe"
)

// realtimeThread moves the calling OS thread to SCHED_FIFO priority 1, so that the callbackd
// threads woken by the release writes cannot preempt the loop before it wrote every last byte.
// It reports false when the system refuses (no privilege); the release then runs as it is. The
// caller must have locked its goroutine to the thread and must let the goroutine end without
// unlocking it, so that the thread, real-time priority and all, ends with it.
func realtimeThread() bool {
	const schedFIFO = 1
	param := struct{ priority int32 }{priority: 1}
	_, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_SETSCHEDULER, 0, schedFIFO, uintptr(unsafe.Pointer(&param)))
	return errno == 0
}
