package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// Negative control 1: the same kind of storm with synchronous_commit=off (the faultinject
// build's switch; the normal binary always forces it on) and a PostgreSQL crash right after the
// storm. Commits still in PostgreSQL's WAL buffers were already answered success and are lost:
// the checker must see successes without a committed effect. The WAL writer is slowed down
// (wal_writer_delay 10 s) so that the window is the whole storm, not 200 ms.
func TestNegativeControlAsyncCommitLosesAcknowledged(t *testing.T) {
	const orders = 200
	e := NewEnv(t, EnvOptions{PGOptions: []testenv.PGOption{
		testenv.WithSetting("wal_writer_delay", "10s"),
		testenv.WithSetting("wal_writer_flush_after", "1GB"),
		testenv.WithSetting("wal_buffers", "64MB"),
	}})
	a := e.StartCallbackd("a", CallbackdOptions{Env: []string{EnvAsyncCommit + "=1"}})
	ns := e.NewPayments("neg-async", orders)
	e.RegisterOrders(a, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e.Storm(ctx, ns, StormOptions{Targets: []*Callbackd{a}, Copies: 1, Concurrency: 8})
	before, err := e.PGStartTime()
	if err != nil {
		t.Fatalf("%v", err)
	}
	e.PG.Crash(t)
	e.PG.Start(t)
	early := e.WaitSnapshot(30 * time.Second)
	after, err := e.PGStartTime()
	if err != nil {
		t.Fatalf("%v", err)
	}
	r := e.Check("negative control: synchronous_commit=off + crash", ns, CheckOptions{Early: []Snapshot{early}, NoSink: true, AllowUnfinished: true,
		Faults: []Fault{{Name: "PostgreSQL immediate stop after the storm",
			Evidence: fmt.Sprintf("pg_postmaster_start_time %s → %s", before.Format("15:04:05.000"), after.Format("15:04:05.000")),
			Happened: after.After(before)}}})
	if got := r.ByInvariant()[InvNoFalseSuccess]; got == 0 {
		t.Errorf("negative control: expected the checker to find successes without a committed effect (%s), got none: %s", InvNoFalseSuccess, r.Summary(5))
	} else {
		t.Logf("negative control holds: the checker found %d successes answered for effects the crash lost", got)
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
				t.Logf("negative control holds: %d orders took two transitions out of PENDING", sm)
			default:
				RequireOK(t, r)
			}
		})
	}
}
