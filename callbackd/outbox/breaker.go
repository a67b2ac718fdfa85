package outbox

import (
	"sync"
	"time"
)

// breaker is one endpoint's circuit breaker, per replica. After threshold consecutive failed
// attempts it opens: no delivery of the endpoint is claimed for cooldown, so a merchant system
// that is down does not burn its events' retry schedules (and our connections) on attempts that
// cannot succeed. After the cooldown it lets one probe through (half-open); the probe's success
// closes it, its failure opens it for another cooldown.
//
// It is ours rather than sony/gobreaker's because the dispatcher needs to know, before claiming
// rows, how many attempts it may start (zero, one probe, or unlimited), and because its time must
// come from the injected clock so that tests can move through cooldowns; gobreaker answers per
// call and reads the system clock.
type breaker struct {
	threshold int
	cooldown  time.Duration

	mu        sync.Mutex
	failures  int       // consecutive failures while closed
	openUntil time.Time // zero while closed
	probing   bool      // the half-open probe is in flight
}

// breakerState is a breaker's state, for the metric.
type breakerState int

const (
	breakerClosed breakerState = iota
	breakerOpen
	breakerHalfOpen
)

func newBreaker(threshold int, cooldown time.Duration) *breaker {
	return &breaker{threshold: threshold, cooldown: cooldown}
}

// allow returns how many attempts may start now (-1: no limit from the breaker) and whether the
// one allowed attempt is the half-open probe, which the caller must report with done, or give
// back with cancelProbe if it claimed nothing.
func (b *breaker) allow(now time.Time) (n int, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.openUntil.IsZero():
		return -1, false
	case now.Before(b.openUntil) || b.probing:
		return 0, false
	default:
		b.probing = true
		return 1, true
	}
}

// cancelProbe gives back an unused probe.
func (b *breaker) cancelProbe() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
}

// done reports an attempt's result. Results of attempts that started before the breaker opened
// still count: they are evidence about the endpoint as much as the probe is.
func (b *breaker) done(now time.Time, success, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
	}
	if success {
		b.failures = 0
		b.openUntil = time.Time{}
		return
	}
	if !b.openUntil.IsZero() {
		// Open or half-open: a failure (the probe's, or a straggler's) restarts the cooldown.
		b.openUntil = now.Add(b.cooldown)
		return
	}
	b.failures++
	if b.failures >= b.threshold {
		b.openUntil = now.Add(b.cooldown)
	}
}

// state reports the breaker's state at now.
func (b *breaker) state(now time.Time) breakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.openUntil.IsZero():
		return breakerClosed
	case now.Before(b.openUntil):
		return breakerOpen
	default:
		return breakerHalfOpen
	}
}
