package outbox

import (
	"testing"
	"time"
)

func TestBreakerOpensAfterThresholdAndProbesAfterCooldown(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	b := newBreaker(3, 30*time.Second)
	type step struct {
		name      string
		at        time.Duration // since t0
		do        string        // "fail", "ok", "allow"
		probe     bool          // for fail/ok: the attempt was the probe
		wantAllow int           // for allow
		wantProbe bool          // for allow
		wantState breakerState
	}
	steps := []step{
		{name: "closed allows without limit", do: "allow", wantAllow: -1, wantState: breakerClosed},
		{name: "1st failure", do: "fail", wantState: breakerClosed},
		{name: "2nd failure", do: "fail", wantState: breakerClosed},
		{name: "a success resets the count", do: "ok", wantState: breakerClosed},
		{name: "1st failure again", do: "fail", wantState: breakerClosed},
		{name: "2nd failure again", do: "fail", wantState: breakerClosed},
		{name: "3rd consecutive failure opens", do: "fail", wantState: breakerOpen},
		{name: "open allows nothing", at: 29 * time.Second, do: "allow", wantAllow: 0, wantState: breakerOpen},
		{name: "after the cooldown one probe", at: 30 * time.Second, do: "allow", wantAllow: 1, wantProbe: true, wantState: breakerHalfOpen},
		{name: "no second probe while one is out", at: 31 * time.Second, do: "allow", wantAllow: 0, wantState: breakerHalfOpen},
		{name: "failed probe reopens", at: 32 * time.Second, do: "fail", probe: true, wantState: breakerOpen},
		{name: "cooldown restarts from the probe's failure", at: 61 * time.Second, do: "allow", wantAllow: 0, wantState: breakerOpen},
		{name: "next probe", at: 62 * time.Second, do: "allow", wantAllow: 1, wantProbe: true, wantState: breakerHalfOpen},
		{name: "successful probe closes", at: 63 * time.Second, do: "ok", probe: true, wantState: breakerClosed},
		{name: "closed again", at: 63 * time.Second, do: "allow", wantAllow: -1, wantState: breakerClosed},
	}
	for _, s := range steps {
		now := t0.Add(s.at)
		switch s.do {
		case "allow":
			n, probe := b.allow(now)
			if n != s.wantAllow || probe != s.wantProbe {
				t.Fatalf("%s: allow() = %d, probe %v; want %d, probe %v", s.name, n, probe, s.wantAllow, s.wantProbe)
			}
		case "fail", "ok":
			b.done(now, s.do == "ok", s.probe)
		}
		if got := b.state(now); got != s.wantState {
			t.Fatalf("%s: state = %d, want %d", s.name, got, s.wantState)
		}
	}
}

func TestBreakerCancelledProbeCanBeRetaken(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	b := newBreaker(1, time.Second)
	b.done(t0, false, false)
	now := t0.Add(time.Second)
	if n, probe := b.allow(now); n != 1 || !probe {
		t.Fatalf("allow() after the cooldown = %d, %v; want the probe", n, probe)
	}
	b.cancelProbe() // nothing was due
	if n, probe := b.allow(now); n != 1 || !probe {
		t.Fatalf("allow() after a cancelled probe = %d, %v; want the probe again", n, probe)
	}
}

func TestValidEndpointName(t *testing.T) {
	for name, want := range map[string]bool{
		"crm": true, "erp-2": true, "a": true, "0": true,
		"": false, "-crm": false, "crm-": false, "CRM": false, "crm/../x": false, "crm.x": false,
		"a234567890123456789012345678901234567890123456789012345678901234": false, // 64 characters
	} {
		if got := validEndpointName(name); got != want {
			t.Errorf("validEndpointName(%q) = %v, want %v", name, got, want)
		}
	}
}
