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

// Scenario 4b: callbackd a is partitioned from PostgreSQL for 6 s (longer than its request timeout) in the middle of a storm over
// a and b (the link holds every byte, so statements and COMMITs sent before or during the
// partition may reach the server only after the heal, long after a gave up on them); b keeps
// its link. a answers retryable failures, b carries on; nothing a answered success for is
// missing, and the provider's retries converge.
func TestScenario4PostgresPartition(t *testing.T) {
	const orders, copies = 300, 3
	e := NewEnv(t, EnvOptions{Postgres: SharedPostgres(t), Redis: true, Replicas: 1})
	a := e.StartCallbackd("a", CallbackdOptions{})
	b := e.StartCallbackd("b", CallbackdOptions{})
	both := []*Callbackd{a, b}
	ns := e.NewPayments("s4b", orders)
	e.RegisterOrders(a, ns)

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
	partitionedAt := time.Now()
	a.Links.PG.SetMode(Partition)
	time.Sleep(6 * time.Second) // longer than callbackd's request timeout
	healedAt := time.Now()
	a.Links.PG.SetMode(Pass)
	<-stormDone
	// Requests sent during the partition, by instance and answer; a's that waited 1 s or more.
	var aIn, bIn [4]int
	stalled := 0
	idx := map[Class]int{Success: 0, Retryable: 1, Rejected: 2, Transport: 3}
	for _, op := range e.History.Ops() {
		if op.Sent.Before(partitionedAt) || op.Sent.After(healedAt) {
			continue
		}
		if op.Instance == a.Name {
			aIn[idx[op.Class]]++
			if op.Answered.Sub(op.Sent) >= time.Second {
				stalled++
			}
		} else {
			bIn[idx[op.Class]]++
		}
	}
	WaitReady(t, 60*time.Second, both...)
	retries := e.ProviderRetries(ctx, ns, both, 100)
	held := a.Links.PG.Stats().Held
	t.Logf("scenario 4b: a's PostgreSQL link partitioned for %v after %d of %d deliveries had started; held chunks=%d; requests sent during the partition: a success=%d retryable=%d rejected=%d no-answer=%d (%d waited 1 s or more), b success=%d retryable=%d rejected=%d no-answer=%d; provider retries %+v",
		healedAt.Sub(partitionedAt).Round(time.Millisecond), orders*copies/3, orders*copies, held,
		aIn[0], aIn[1], aIn[2], aIn[3], stalled, bIn[0], bIn[1], bIn[2], bIn[3], retries)
	t.Logf("scenario 4b: duplicates stopped per gate %s", FormatCounts(e.MetricsByLabel("callbackd_duplicates_stopped_total", "gate")))
	RequireOK(t, e.Check("scenario 4b", ns, CheckOptions{Faults: []Fault{
		{Name: "partition of callbackd a from PostgreSQL for 6 s",
			Evidence: fmt.Sprintf("%d chunks held by a's PostgreSQL link; requests to a sent during it: %d retryable or unanswered, %d waited 1 s or more; %d successes at b", held, aIn[1]+aIn[3], stalled, bIn[0]),
			Happened: held > 0 && aIn[1]+aIn[3]+stalled > 0},
	}}))
}
