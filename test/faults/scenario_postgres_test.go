package faults

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// Scenario 4: PostgreSQL stops immediately (a crash: pg_ctl stop -m immediate) in the middle of
// a storm over two callbackd processes and is restarted 2 s later. Answers in the outage are
// retryable failures, never a success for something not committed: a snapshot right after the
// restart holds every success answered before it. The provider's retries then converge.
func TestScenario4PostgresCrash(t *testing.T) {
	const orders, copies = 300, 3
	e := NewEnv(t, EnvOptions{Redis: true, Replicas: 1})
	a := e.StartCallbackd("a", CallbackdOptions{})
	b := e.StartCallbackd("b", CallbackdOptions{})
	both := []*Callbackd{a, b}
	ns := e.NewPayments("s4", orders)
	e.RegisterOrders(a, ns)
	startedBefore, err := e.PGStartTime()
	if err != nil {
		t.Fatalf("%v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var started atomic.Int64
	stormDone := make(chan []Op, 1)
	go func() {
		stormDone <- e.Storm(ctx, ns, StormOptions{Targets: both, Copies: copies, Concurrency: 16,
			Pace: 4 * time.Millisecond, Started: &started})
	}()
	for started.Load() < orders*copies/3 {
		time.Sleep(5 * time.Millisecond)
	}
	crashedAt := time.Now()
	e.PG.Crash(t)
	notReady := false
	for time.Since(crashedAt) < 2*time.Second {
		if code, err := a.Get("/readyz"); err == nil && code != http.StatusOK {
			notReady = true
		}
		time.Sleep(50 * time.Millisecond)
	}
	restartedAt := time.Now()
	e.PG.Start(t)
	early := e.WaitSnapshot(30 * time.Second) // before any retry: every success so far must be in it
	<-stormDone
	startedAfter, err := e.PGStartTime()
	if err != nil {
		t.Fatalf("%v", err)
	}
	var inOutage [4]int
	for _, op := range e.History.Ops() {
		if op.Sent.After(crashedAt) && op.Answered.Before(restartedAt) {
			switch op.Class {
			case Success:
				inOutage[0]++
			case Retryable:
				inOutage[1]++
			case Rejected:
				inOutage[2]++
			case Transport:
				inOutage[3]++
			}
		}
	}
	WaitReady(t, 30*time.Second, both...)
	retries := e.ProviderRetries(ctx, ns, both, 100)
	t.Logf("scenario 4: PostgreSQL crashed after %d of %d deliveries had started, down %v; answers sent and answered in the outage: success=%d retryable=%d rejected=%d no-answer=%d; /readyz went non-200=%v; provider retries %+v",
		orders*copies/3, orders*copies, restartedAt.Sub(crashedAt).Round(time.Millisecond), inOutage[0], inOutage[1], inOutage[2], inOutage[3], notReady, retries)
	t.Logf("scenario 4: duplicates stopped per gate %s", FormatCounts(e.MetricsByLabel("callbackd_duplicates_stopped_total", "gate")))
	RequireOK(t, e.Check("scenario 4", ns, CheckOptions{Early: []Snapshot{early}, Faults: []Fault{
		{Name: "PostgreSQL immediate stop and restart",
			Evidence: fmt.Sprintf("pg_postmaster_start_time %s → %s; %d retryable or unanswered requests in the outage", startedBefore.Format("15:04:05.000"), startedAfter.Format("15:04:05.000"), inOutage[1]+inOutage[3]),
			Happened: startedAfter.After(startedBefore) && inOutage[1]+inOutage[3] > 0},
	}}))
}
