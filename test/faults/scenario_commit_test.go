package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/callbackd/metrics"
)

// TestScenario5ResetDuringCommit is scenario 5: the connection between callbackd and PostgreSQL
// is reset during the COMMIT of a notification's apply transaction, in the two places that
// matter. For a third of the orders the pgwire proxy resets the connection instead of
// forwarding the COMMIT (PostgreSQL rolls back: the effect must be absent); for another third it
// forwards the COMMIT, waits for PostgreSQL's CommandComplete "COMMIT" and resets the connection
// instead of relaying it (the effect is committed and callbackd never hears so); the last third
// pass untouched. Two callbackd replicas share Redis and the database; each notification is
// delivered once, 16 at a time.
//
// Expected: every faulted delivery is answered with the provider's retryable failure (never
// success, never a refusal); right after the storm each order's effect is whole or absent, never
// half (receipt, ledger entry, outbox event and PAID status together); the reset-before orders
// have no effect, the reset-after orders have theirs; after the provider's retries every order
// is paid exactly once, and the checker's invariants hold.
func TestScenario5ResetDuringCommit(t *testing.T) {
	e := NewEnv(t, EnvOptions{Postgres: SharedPostgres(t), Redis: true})
	pgp := e.NewPGProxyFor()
	a := e.StartCallbackdPG("a", pgp, CallbackdOptions{})
	b := e.StartCallbackdPG("b", pgp, CallbackdOptions{})
	targets := []*Callbackd{a, b}

	const perGroup = 40
	ns := e.NewPayments("s5", 3*perGroup)
	e.RegisterOrders(a, ns)
	before, after := ns[:perGroup], ns[perGroup:2*perGroup]
	const (
		labelBefore = "reset-before-commit"
		labelAfter  = "reset-after-commit"
	)
	plan := NewCommitPlan(ns)
	for _, n := range before {
		plan.Set(n.OrderNo, PGAction{Label: labelBefore, ResetBefore: true})
	}
	for _, n := range after {
		plan.Set(n.OrderNo, PGAction{Label: labelAfter, ResetAfter: true})
	}
	pgp.SetRule(plan.Rule)

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Second)
	defer cancel()
	ops := e.Storm(ctx, ns, StormOptions{Targets: targets, Concurrency: 16, Phase: "storm"})
	answers := map[string]Op{}
	for _, op := range ops {
		answers[op.OrderNo] = op
	}
	atFault := e.Snapshot()
	effects := Effects(atFault)

	// Every faulted delivery: a retryable answer; the effect whole or absent, as the reset's
	// place says.
	type group struct {
		name          string
		label, stage  string
		ns            []Notification
		wantEffect    bool
		retryable     int
		matchedEffect int
	}
	groups := []*group{
		{name: "reset before COMMIT", label: labelBefore, stage: StageResetBefore, ns: before, wantEffect: false},
		{name: "reset after COMMIT", label: labelAfter, stage: StageResetAfter, ns: after, wantEffect: true},
	}
	for _, g := range groups {
		for _, n := range g.ns {
			op := answers[n.OrderNo]
			if !plan.Used(n.OrderNo) {
				t.Errorf("%s %s: expected its apply transaction's COMMIT to be faulted, the proxy never saw it (answer %s)", g.name, n.OrderNo, op.Class)
				continue
			}
			if op.Class == Retryable {
				g.retryable++
			} else {
				t.Errorf("%s %s: expected a retryable answer, got %s (status %d %q)", g.name, n.OrderNo, op.Class, op.Status, op.Body)
			}
			st := effects[n.OrderNo]
			if st.Present() == g.wantEffect && st.Whole() {
				g.matchedEffect++
			} else {
				t.Errorf("%s %s: expected effect present=%v and whole, got %+v", g.name, n.OrderNo, g.wantEffect, st)
			}
		}
	}
	half := 0
	for _, n := range ns {
		if st := effects[n.OrderNo]; !st.Whole() {
			half++
			t.Errorf("%s: half an effect after the storm: %+v", n.OrderNo, st)
		}
	}
	var untouchedOK int
	for _, n := range ns[2*perGroup:] {
		if answers[n.OrderNo].Class == Success {
			untouchedOK++
		}
	}

	pgp.SetRule(nil) // healed (the plan faulted each order's first commit only anyway)
	res := e.ProviderRetries(ctx, ns, targets, 20)
	t.Logf("scenario 5: provider retries: %d notifications resent, %d attempts, %d unfinished", res.Resent, res.Attempts, res.Unfinished)
	t.Logf("scenario 5: pgwire proxy counters: %v", pgp.Counts())
	t.Logf("scenario 5: untouched orders answered success at once: %d of %d; half effects after the storm: %d", untouchedOK, perGroup, half)
	t.Logf("scenario 5: duplicates stopped by gate: %s", FormatCounts(e.MetricsByLabel(metrics.DuplicatesStoppedTotal, "gate")))

	var faults []Fault
	for _, g := range groups {
		resets := pgp.Count(g.label, g.stage)
		ev := fmt.Sprintf("%d connection resets by the pgwire proxy (%s); %d of %d deliveries answered retryable; effect present=%v in %d of %d orders right after",
			resets, g.stage, g.retryable, len(g.ns), g.wantEffect, g.matchedEffect, len(g.ns))
		if g.wantEffect {
			ev += fmt.Sprintf("; PostgreSQL answered COMMIT %d times before the reset", pgp.Count(g.label, StageAnswerPrefix+"COMMIT"))
		}
		happened := resets == int64(len(g.ns)) && g.matchedEffect == len(g.ns)
		if g.wantEffect {
			happened = happened && pgp.Count(g.label, StageAnswerPrefix+"COMMIT") == int64(len(g.ns))
		}
		faults = append(faults, Fault{Name: "connection " + g.name, Evidence: ev, Happened: happened})
	}
	r := e.Check("scenario 5", ns, CheckOptions{Early: []Snapshot{atFault}, Faults: faults})
	RequireOK(t, r)
}

// TestScenario5NegativeControlLostCommit proves that the checker sees what scenario 5 guards
// against. The pgwire proxy turns the COMMIT of a quarter of the orders' apply transactions
// into a ROLLBACK and answers callbackd "COMMIT" anyway: a commit lost after it was
// acknowledged (what synchronous_commit=off and a crash, or a lying middlebox, would do).
// callbackd then answers success for effects that do not exist, and the checker must report
// those keys as false successes (and as never applied); the test fails if it does not.
func TestScenario5NegativeControlLostCommit(t *testing.T) {
	e := NewEnv(t, EnvOptions{Postgres: SharedPostgres(t), Redis: true})
	pgp := e.NewPGProxyFor()
	a := e.StartCallbackdPG("a", pgp, CallbackdOptions{})
	b := e.StartCallbackdPG("b", pgp, CallbackdOptions{})
	targets := []*Callbackd{a, b}

	const label = "commit-turned-rollback-answered-commit"
	ns := e.NewPayments("s5neg", 40)
	e.RegisterOrders(a, ns)
	lost := ns[:10]
	plan := NewCommitPlan(ns)
	for _, n := range lost {
		plan.Set(n.OrderNo, PGAction{Label: label, ReplaceSQL: "rollback", AnswerTag: "COMMIT"})
	}
	pgp.SetRule(plan.Rule)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Second)
	defer cancel()
	e.Storm(ctx, ns, StormOptions{Targets: targets, Concurrency: 16, Phase: "storm"})
	pgp.SetRule(nil)
	e.ProviderRetries(ctx, ns, targets, 10)

	r := e.Check("scenario 5 negative control (lost commits)", ns, CheckOptions{Faults: []Fault{{
		Name: "COMMIT replaced by ROLLBACK and answered COMMIT",
		Evidence: fmt.Sprintf("%d commits replaced, %d answers retagged, PostgreSQL answered ROLLBACK %d times",
			pgp.Count(label, StageReplaced), pgp.Count(label, StageRetagged), pgp.Count(label, StageAnswerPrefix+"ROLLBACK")),
		Happened: pgp.Count(label, StageRetagged) == int64(len(lost)),
	}}})
	by := r.ByInvariant()
	t.Logf("scenario 5 negative control: checker violations by invariant: %v", by)
	if r.OK() || by[InvNoFalseSuccess] < len(lost) || by[InvConverged] < len(lost) || by[InvFaultEvidence] != 0 {
		t.Errorf("negative control: expected the checker to report the %d lost commits as no-false-success and converged violations (and the fault to have happened), got %v", len(lost), by)
	}
}
