package gate

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// manualClock is an otter.Clock that moves only when the test says so, and never ticks (no
// periodic clean-up: reads alone must honour expiry).
type manualClock struct{ now atomic.Int64 }

func newManualClock() *manualClock {
	c := &manualClock{}
	c.now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *manualClock) NowNano() int64                      { return c.now.Load() }
func (c *manualClock) Tick(time.Duration) <-chan time.Time { return nil }
func (c *manualClock) Advance(d time.Duration)             { c.now.Add(int64(d)) }

func newTestWindow(t *testing.T, maxEntries int, clock *manualClock) *Window {
	t.Helper()
	w, err := NewWindow(WindowOptions{MaxEntries: maxEntries, Clock: clock})
	if err != nil {
		t.Fatalf("NewWindow: %v", err)
	}
	return w
}

func TestWindowAnswersOnlyRememberedKeys(t *testing.T) {
	clock := newManualClock()
	w := newTestWindow(t, 100, clock)
	paid := KeyOf("ch|m|order-1|payment|")
	other := KeyOf("ch|m|order-2|payment|")

	if w.Contains(paid) {
		t.Fatal("a fresh window: expected no key, got a hit")
	}
	w.Remember(paid, time.Minute)
	if !w.Contains(paid) {
		t.Fatal("after Remember: expected a hit, got a miss")
	}
	if w.Contains(other) {
		t.Fatal("a key never remembered: expected a miss, got a hit")
	}
}

func TestWindowExpiresAfterTheTTL(t *testing.T) {
	clock := newManualClock()
	w := newTestWindow(t, 100, clock)
	short, long := KeyOf("short"), KeyOf("long")
	w.Remember(short, 10*time.Second)
	w.Remember(long, 60*time.Second)

	clock.Advance(9 * time.Second)
	if !w.Contains(short) {
		t.Fatal("9s into a 10s TTL: expected a hit, got a miss")
	}
	clock.Advance(2 * time.Second)
	if w.Contains(short) {
		t.Fatal("11s into a 10s TTL: expected a miss, got a hit")
	}
	if !w.Contains(long) {
		t.Fatal("11s into a 60s TTL: expected a hit, got a miss")
	}
	// A repeat does not extend the TTL: the window forgets on schedule.
	w.Remember(long, 60*time.Second)
	clock.Advance(50 * time.Second)
	if w.Contains(long) {
		t.Fatal("61s after the first Remember: expected a miss, got a hit")
	}
}

func TestWindowIgnoresNonPositiveTTLAndNil(t *testing.T) {
	w := newTestWindow(t, 10, newManualClock())
	k := KeyOf("k")
	w.Remember(k, 0)
	if w.Contains(k) {
		t.Fatal("Remember with TTL 0: expected nothing recorded, got a hit")
	}
	var nilWindow *Window
	nilWindow.Remember(k, time.Minute)
	if nilWindow.Contains(k) || nilWindow.Len() != 0 {
		t.Fatal("a nil window: expected it to hold nothing")
	}
}

func TestWindowIsBounded(t *testing.T) {
	const maxEntries = 1000
	w := newTestWindow(t, maxEntries, newManualClock())
	for i := range 20 * maxEntries {
		w.Remember(KeyOf(fmt.Sprint(i)), time.Hour)
	}
	w.cache.CleanUp()
	if got := w.Len(); got > maxEntries {
		t.Fatalf("after 20x MaxEntries inserts: expected at most %d entries, got %d", maxEntries, got)
	}
}

func TestNewWindowRejectsZeroSize(t *testing.T) {
	if _, err := NewWindow(WindowOptions{}); err == nil {
		t.Fatal("MaxEntries 0: expected an error, got none")
	}
}

func TestKeyOfHidesTheIdempotencyKey(t *testing.T) {
	k := KeyOf("wx|1900000001||ORDER-42|payment|")
	if s := k.String(); len(s) != 64 || k.Short() != s[:12] {
		t.Fatalf("expected 64 hex digits with a 12-digit prefix, got %q / %q", s, k.Short())
	}
	if KeyOf("a") == KeyOf("b") {
		t.Fatal("distinct idempotency keys: expected distinct digests")
	}
}
