// Package clock is the time source of callbackd's schedulers (outbox retries, leases, retention
// cut-offs). Production code uses Real; tests inject a Fake and move it with Advance or Set, so
// that a retry schedule of hours is checked in milliseconds and to the exact instant.
//
// Only decisions about wall-clock time go through a Clock. Short real-time waits (a poll
// interval, a pause between batches) stay on package time: they pace the work, they do not
// decide it.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
}

// Real is the system clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// Fake is a clock that moves only when told to. The zero value is not usable; create one with
// NewFake. It is safe for concurrent use.
type Fake struct {
	mu  sync.Mutex
	now time.Time
}

// NewFake returns a Fake set to start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

// Now returns the fake current time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the clock forward by d (backwards when d is negative) and returns the new time.
func (f *Fake) Advance(d time.Duration) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	return f.now
}

// Set moves the clock to t.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = t
}
