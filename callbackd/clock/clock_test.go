package clock

import (
	"testing"
	"time"
)

func TestFakeMovesOnlyWhenTold(t *testing.T) {
	start := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	f := NewFake(start)
	if got := f.Now(); !got.Equal(start) {
		t.Fatalf("Now() = %v, want the start %v", got, start)
	}
	if got, want := f.Advance(90*time.Second), start.Add(90*time.Second); !got.Equal(want) {
		t.Fatalf("Advance(90s) = %v, want %v", got, want)
	}
	later := start.Add(6 * time.Hour)
	f.Set(later)
	if got := f.Now(); !got.Equal(later) {
		t.Fatalf("after Set, Now() = %v, want %v", got, later)
	}
}

func TestRealFollowsTheSystemClock(t *testing.T) {
	before := time.Now()
	got := Real{}.Now()
	if got.Before(before) || got.After(time.Now()) {
		t.Fatalf("Real.Now() = %v, not between the surrounding time.Now() calls", got)
	}
}
