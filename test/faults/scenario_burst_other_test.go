//go:build !linux

package faults

// realtimeThread is a no-op outside Linux: the release runs at normal priority.
func realtimeThread() (ok bool, restore func() error) { return false, func() error { return nil } }
