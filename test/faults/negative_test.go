package faults

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// Negative control 1: a storm with synchronous_commit=off (the faultinject build's switch; the
// normal binary always forces it on) and a PostgreSQL crash (immediate stop) while it runs.
// Commits still in PostgreSQL's WAL buffers were already answered success and are lost: the
// checker must see successes without a committed effect. The WAL writer is slowed down
// (wal_writer_delay 10 s); what is lost is the last few milliseconds of commits before the crash
// (measured: 3 of 200 when crashing right after a storm), so the crash comes mid-storm and a round
// is repeated (fresh orders, up to 3 rounds) if a crash happened to lose nothing.
func TestNegativeControlAsyncCommitLosesAcknowledged(t *testing.T) {
	const orders, rounds = 200, 3
	e := NewEnv(t, EnvOptions{PGOptions: []testenv.PGOption{
		testenv.WithSetting("wal_writer_delay", "10s"),
		testenv.WithSetting("wal_writer_flush_after", "1GB"),
		testenv.WithSetting("wal_buffers", "64MB"),
	}})
	a := e.StartCallbackd("a", CallbackdOptions{Env: []string{EnvAsyncCommit + "=1"}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var all []Notification
	var early []Snapshot
	var faults []Fault
	var r Report
	for round := 1; round <= rounds; round++ {
		WaitReady(t, 60*time.Second, a)
		ns := e.NewPayments(fmt.Sprintf("neg-async-%d", round), orders)
		e.RegisterOrders(a, ns)
		all = append(all, ns...)
		before, err := e.PGStartTime()
		if err != nil {
			t.Fatalf("%v", err)
		}
		var started atomic.Int64
		done := make(chan struct{})
		go func() {
			defer close(done)
			e.Storm(ctx, ns, StormOptions{Targets: []*Callbackd{a}, Copies: 1, Concurrency: 16, Started: &started,
				Phase: fmt.Sprintf("round-%d", round)})
		}()
		for started.Load() < orders*3/4 {
			time.Sleep(time.Millisecond)
		}
		e.PG.Crash(t)
		<-done
		e.PG.Start(t)
		early = append(early, e.WaitSnapshot(30*time.Second))
		after, err := e.PGStartTime()
		if err != nil {
			t.Fatalf("%v", err)
		}
		faults = append(faults, Fault{Name: fmt.Sprintf("round %d: PostgreSQL immediate stop mid-storm", round),
			Evidence: fmt.Sprintf("pg_postmaster_start_time %s → %s", before.Format("15:04:05.000"), after.Format("15:04:05.000")),
			Happened: after.After(before)})
		r = e.Check(fmt.Sprintf("negative control: synchronous_commit=off + crash, round %d", round), all,
			CheckOptions{Early: early, NoSink: true, AllowUnfinished: true, Faults: faults})
		if r.ByInvariant()[InvNoFalseSuccess] > 0 {
			break
		}
	}
	lost := map[string]bool{}
	for _, v := range r.Violations {
		if v.Invariant == InvNoFalseSuccess {
			lost[v.Key] = true
		}
	}
	if len(lost) == 0 {
		t.Errorf("negative control: expected the checker to find successes without a committed effect (%s) within %d rounds, got none: %s", InvNoFalseSuccess, rounds, r.Summary(5))
	} else {
		t.Logf("negative control holds: the checker found %d notifications answered success whose effect the crash lost", len(lost))
	}
}

// Negative control 2: the conditional update removed (the faultinject build reads the order
// without FOR UPDATE and updates it without status = 'PENDING', and sleeps 30 ms between the
// two so that the race is frequent), with a payment and a close of every order arriving at two
// callbackd processes at once. Both take effect: the checker must see orders that were paid and
// closed. The same storm against the guarded build is the positive control: the checker passes.
func TestNegativeControlUnguardedUpdate(t *testing.T) {
	const orders = 60
	for _, tc := range []struct {
		name      string
		env       []string
		wantFails bool
	}{
		{name: "guarded (control: the checker passes)", env: []string{EnvAfterOrderRead + "=30ms"}, wantFails: false},
		{name: "unguarded (the checker fails)", env: []string{EnvUnguardedUpdate + "=1", EnvAfterOrderRead + "=30ms"}, wantFails: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := NewEnv(t, EnvOptions{Postgres: sharedPostgres(t)})
			a := e.StartCallbackd("a", CallbackdOptions{Env: tc.env})
			b := e.StartCallbackd("b", CallbackdOptions{Env: tc.env})
			pays := e.NewPayments("neg-guard", orders)
			e.RegisterOrders(a, pays)
			var all []Notification
			for _, p := range pays {
				all = append(all, p, CloseOf(p))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			Parallel(len(pays), 16, func(i int) {
				done := make(chan struct{})
				go func() { e.Send(ctx, a, pays[i], "msg_pay_"+pays[i].OrderNo, "race"); close(done) }()
				c := CloseOf(pays[i])
				e.Send(ctx, b, c, "msg_close_"+c.OrderNo, "race")
				<-done
			})
			retries := e.ProviderRetries(ctx, all, []*Callbackd{a, b}, 50)
			t.Logf("provider retries %+v", retries)
			r := e.Check(tc.name, all, CheckOptions{})
			sm := r.ByInvariant()[InvStateMachine]
			switch {
			case tc.wantFails && sm == 0:
				t.Errorf("negative control: expected %s violations (orders both paid and closed), got none: %s", InvStateMachine, r.Summary(5))
			case tc.wantFails:
				twice := map[string]bool{}
				for _, v := range r.Violations {
					if v.Invariant == InvStateMachine {
						twice[v.Key] = true
					}
				}
				t.Logf("negative control holds: %d of %d orders broke the state machine (%d violations), e.g. paid and closed", len(twice), orders, sm)
			default:
				RequireOK(t, r)
			}
		})
	}
}
