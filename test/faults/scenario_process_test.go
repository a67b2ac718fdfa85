package faults

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/callbackd/gate"
	"github.com/seed-1cff2221/callback-platform/callbackd/metrics"
)

// TestScenario6KillAfterCommit is the first half of scenario 6: callbackd is SIGKILLed after
// PostgreSQL committed a notification's effect and before callbackd answered the provider.
//
// The moment is made exact with the pgwire proxy: for the first orders it forwards the COMMIT,
// receives PostgreSQL's CommandComplete and holds it. When every held order's effect is visible
// in the database (read directly) and no answer has left, callbackd a is SIGKILLed, restarted,
// and the provider resends (a storm of copies to both replicas, then retries until success).
//
// Expected: the killed requests got no answer (never a success, which would be fine, nor a
// refusal); every resend is acknowledged without a second effect (one receipt, one ledger
// entry, one event id per order), including while the dead process's Redis claims are still
// held; the checker's invariants hold.
func TestScenario6KillAfterCommit(t *testing.T) {
	e := NewEnv(t, EnvOptions{Postgres: SharedPostgres(t), Redis: true})
	pgp := e.NewPGProxyFor()
	a := e.StartCallbackdPG("a", pgp, CallbackdOptions{})
	b := e.StartCallbackdPG("b", pgp, CallbackdOptions{})
	targets := []*Callbackd{a, b}

	// At most a few: each held commit keeps one of a's 16 pooled connections busy.
	const held = 10
	const label = "commit-answer-held"
	ns := e.NewPayments("s6k", 60)
	e.RegisterOrders(b, ns)
	release := make(chan struct{})
	var releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) })
	plan := NewCommitPlan(ns)
	for _, n := range ns[:held] {
		plan.Set(n.OrderNo, PGAction{Label: label, HoldAfter: release})
	}
	pgp.SetRule(plan.Rule)

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Second)
	defer cancel()
	var inFlight []Op
	stormDone := make(chan struct{})
	go func() {
		defer close(stormDone)
		inFlight = e.Storm(ctx, ns[:held], StormOptions{Targets: []*Callbackd{a}, Concurrency: held, Phase: "in-flight-at-kill"})
	}()
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	err := pgp.WaitCount(wctx, label, StageHeldAnswer, held)
	wcancel()
	if err != nil {
		t.Fatalf("waiting for callbackd a's commits to be held: %v (proxy counters %v)", err, pgp.Counts())
	}
	committed := e.Snapshot()
	effects := Effects(committed)
	presentAtKill := 0
	for _, n := range ns[:held] {
		if effects[n.OrderNo].Present() {
			presentAtKill++
		}
	}
	answeredBeforeKill := e.History.Len()
	a.Kill(t)
	killedAt := time.Now()
	releaseOnce.Do(func() { close(release) }) // the held answers now go to a dead process
	<-stormDone

	noAnswer := 0
	for _, op := range inFlight {
		switch op.Class {
		case Transport:
			noAnswer++
		case Success, Rejected:
			t.Errorf("%s: killed in flight: expected no answer (or a retryable one), got %s", op.OrderNo, op.Class)
		}
	}
	if presentAtKill != held {
		t.Errorf("effects committed while their answers were held: expected %d, got %d", held, presentAtKill)
	}

	a.Restart(t)
	restarted := e.Snapshot()
	e.Storm(ctx, ns, StormOptions{Targets: targets, Copies: 2, Concurrency: 16, Phase: "after-restart"})
	res := e.ProviderRetries(ctx, ns, targets, 20)
	sinceKill := time.Since(killedAt)

	// The resends of the killed keys: acknowledged, none applied again.
	var resent, resentOK int
	killed := map[string]bool{}
	for _, n := range ns[:held] {
		killed[n.OrderNo] = true
	}
	for _, op := range e.History.Ops() {
		if killed[op.OrderNo] && op.Phase != "in-flight-at-kill" {
			resent++
			if op.Class == Success {
				resentOK++
			}
		}
	}
	t.Logf("scenario 6 (SIGKILL): %d commits held at the proxy, %d effects committed before the kill, %d requests answered before the kill, %d in-flight requests got no answer; after restart %d resends of the killed keys, %d acknowledged (%.1fs after the kill)",
		pgp.Count(label, StageHeldAnswer), presentAtKill, answeredBeforeKill, noAnswer, resent, resentOK, sinceKill.Seconds())
	t.Logf("scenario 6 (SIGKILL): provider retries: %d resent, %d attempts, %d unfinished", res.Resent, res.Attempts, res.Unfinished)
	t.Logf("scenario 6 (SIGKILL): callbacks by outcome after the restart: %s; duplicates stopped by gate: %s",
		FormatCounts(e.MetricsByLabel(metrics.CallbacksTotal, "outcome")), FormatCounts(e.MetricsByLabel(metrics.DuplicatesStoppedTotal, "gate")))

	faults := []Fault{{
		Name: "SIGKILL of callbackd a after PostgreSQL committed and before a answered",
		Evidence: fmt.Sprintf("%d COMMITs answered by PostgreSQL and held at the pgwire proxy; %d of %d effects committed before the kill; %d requests left without an answer; a restarted and ready",
			pgp.Count(label, StageHeldAnswer), presentAtKill, held, noAnswer),
		Happened: pgp.Count(label, StageHeldAnswer) == held && presentAtKill == held && noAnswer >= 1,
	}}
	r := e.Check("scenario 6 (SIGKILL)", ns, CheckOptions{Early: []Snapshot{committed, restarted}, Faults: faults})
	RequireOK(t, r)
}

// TestScenario6PauseBeyondLockTTL is the second half of scenario 6: callbackd a is frozen
// (SIGSTOP) while it holds the Redis claims of notifications whose transactions are open, for
// longer than the lock TTL; replica b takes the keys over when the claims expire; then a wakes
// (SIGCONT) and tries to finish.
//
// The pause point is pinned with the pgwire proxy: a's COMMITs are held before reaching
// PostgreSQL, so at the SIGSTOP every transaction has written its receipt, locked its order and
// not committed. While a sleeps, PostgreSQL ends its idle transactions
// (idle_in_transaction_session_timeout), the claims expire, and the provider's resends to b are
// applied. After SIGCONT the held COMMITs are released to whatever is left of a's sessions.
//
// Expected: b acknowledges every notification while a is frozen; a, once awake, never answers
// success for an effect it did not commit and applies nothing a second time; one receipt, one
// ledger entry and one event id per order; the checker's invariants hold.
func TestScenario6PauseBeyondLockTTL(t *testing.T) {
	const (
		lockTTL = 5 * time.Second // the shortest callbackd accepts with its default timeouts
		// minFreeze keeps a frozen well past the lock TTL, whenever b finishes.
		minFreeze = lockTTL + 3*time.Second
	)
	// A server of its own: its log is the evidence of the transactions it ended.
	e := NewEnv(t, EnvOptions{Redis: true, LockTTL: lockTTL})
	pgp := e.NewPGProxyFor()
	a := e.StartCallbackdPG("a", pgp, CallbackdOptions{})
	b := e.StartCallbackdPG("b", pgp, CallbackdOptions{})

	const held = 10
	const label = "commit-held-before-postgres"
	ns := e.NewPayments("s6p", held)
	e.RegisterOrders(b, ns)
	release := make(chan struct{})
	var releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) })
	plan := NewCommitPlan(ns)
	for _, n := range ns {
		plan.Set(n.OrderNo, PGAction{Label: label, HoldBefore: release})
	}
	pgp.SetRule(plan.Rule)

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Second)
	defer cancel()
	var paused []Op
	stormDone := make(chan struct{})
	go func() {
		defer close(stormDone)
		paused = e.Storm(ctx, ns, StormOptions{Targets: []*Callbackd{a}, Concurrency: held, Phase: "paused-holder"})
	}()
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	err := pgp.WaitCount(wctx, label, StageHeldQuery, held)
	wcancel()
	if err != nil {
		t.Fatalf("waiting for callbackd a's commits to be held: %v (proxy counters %v)", err, pgp.Counts())
	}
	claimsAtPause := claimTokens(t, e)
	a.Pause(t)
	pausedAt := time.Now()
	atPause := e.Snapshot()
	uncommittedAtPause := 0
	for _, n := range ns {
		if st := Effects(atPause)[n.OrderNo]; !st.Receipt && !st.Ledger {
			uncommittedAtPause++
		}
	}

	// The provider resends to b while a sleeps, until b acknowledges each (bounded).
	var mu sync.Mutex
	tookOver := map[string]time.Duration{}
	Parallel(len(ns), len(ns), func(i int) {
		n := ns[i]
		deadline := time.Now().Add(30 * time.Second)
		for attempt := 0; time.Now().Before(deadline) && ctx.Err() == nil; attempt++ {
			op := e.Send(ctx, b, n, fmt.Sprintf("msg_%s_takeover_%d", n.OrderNo, attempt), "takeover")
			if op.Class == Success {
				mu.Lock()
				tookOver[n.OrderNo] = op.Answered.Sub(pausedAt)
				mu.Unlock()
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
	})
	if d := minFreeze - time.Since(pausedAt); d > 0 {
		time.Sleep(d)
	}
	stillFrozen := a.Running()
	pausedFor := time.Since(pausedAt)
	idleKills := strings.Count(e.PG.LogTail(500), "idle-in-transaction timeout")
	claimsAfter := claimTokens(t, e)
	a.Resume(t)
	releaseOnce.Do(func() { close(release) })
	<-stormDone

	var aSuccess, aRetry, aOther int
	for _, op := range paused {
		switch op.Class {
		case Success:
			aSuccess++
		case Retryable:
			aRetry++
		default:
			aOther++
		}
	}
	var firstTakeover, lastTakeover time.Duration
	for _, d := range tookOver {
		if firstTakeover == 0 || d < firstTakeover {
			firstTakeover = d
		}
		lastTakeover = max(lastTakeover, d)
	}
	if len(tookOver) != held {
		t.Errorf("takeover by b while a was frozen: expected %d keys acknowledged, got %d", held, len(tookOver))
	}
	res := e.ProviderRetries(ctx, ns, []*Callbackd{a, b}, 20)

	t.Logf("scenario 6 (SIGSTOP): %d COMMITs held before PostgreSQL at the pause, %d uncommitted transactions, Redis claims held by tokens: %d at the pause, %d while b finished; a frozen for %.1fs (lock TTL %s)",
		pgp.Count(label, StageHeldQuery), uncommittedAtPause, claimsAtPause, claimsAfter, pausedFor.Seconds(), lockTTL)
	t.Logf("scenario 6 (SIGSTOP): b acknowledged %d of %d keys while a was frozen, the first %.1fs and the last %.1fs after the SIGSTOP; PostgreSQL ended %d of a's idle transactions (idle-in-transaction timeout)",
		len(tookOver), held, firstTakeover.Seconds(), lastTakeover.Seconds(), idleKills)
	t.Logf("scenario 6 (SIGSTOP): a's answers after SIGCONT: success=%d retryable=%d other=%d; provider retries afterwards: %d resent, %d unfinished",
		aSuccess, aRetry, aOther, res.Resent, res.Unfinished)
	t.Logf("scenario 6 (SIGSTOP): lock contention seen: %.0f; callbacks by outcome: %s",
		e.MetricsTotal(metrics.LockContentionTotal, nil), FormatCounts(e.MetricsByLabel(metrics.CallbacksTotal, "outcome")))

	faults := []Fault{{
		Name: "SIGSTOP of callbackd a, holding claims with open transactions, for longer than the lock TTL",
		Evidence: fmt.Sprintf("%d COMMITs held at the pgwire proxy; %d claim tokens in Redis at the SIGSTOP; frozen %.1fs > lock TTL %s (still running, not dead: %v); b took over %d keys; PostgreSQL ended %d idle transactions",
			pgp.Count(label, StageHeldQuery), claimsAtPause, pausedFor.Seconds(), lockTTL, stillFrozen, len(tookOver), idleKills),
		Happened: pgp.Count(label, StageHeldQuery) == held && claimsAtPause >= held && pausedFor > lockTTL && stillFrozen && len(tookOver) == held,
	}}
	r := e.Check("scenario 6 (SIGSTOP)", ns, CheckOptions{Early: []Snapshot{atPause}, Faults: faults})
	RequireOK(t, r)
}

// claimTokens counts callbackd's Redis keys on the master holding a claim token (not the
// SUCCESS mark), read directly from the master.
func claimTokens(t *testing.T, e *Env) int {
	t.Helper()
	keys, err := RedisKeys(e.Redis.MasterAddr())
	if err != nil {
		t.Fatalf("read callbackd's Redis keys: %v", err)
	}
	n := 0
	for _, v := range keys {
		if v != gate.SuccessMark {
			n++
		}
	}
	return n
}
