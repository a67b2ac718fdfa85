package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/callbackd/metrics"
)

// TestScenario8RetryScheduleFlaky is scenario 8: WeChat Pay's real retry schedule (15 s, 15 s,
// 30 s, 3 m, 10 m, 20 m, 30 m, 30 m, 30 m, 60 m, 3 h, 3 h, 3 h, 6 h, 6 h) compressed 1000×, against
// two callbackd replicas of which 30% of the requests fail at random, in two ways:
//
//   - front: a load balancer in front of callbackd resets 30% of the requests, half before
//     callbackd sees them, half after callbackd answered (so some committed effects are
//     acknowledged into the void and the provider resends them);
//   - commit: the pgwire proxy resets the database connection at 30% of the apply
//     transactions' COMMITs, half before PostgreSQL gets the COMMIT, half after it committed
//     (callbackd answers "retry" either way).
//
// Expected: every notification is acknowledged within the schedule, every order is paid
// exactly once (one receipt, one ledger entry, one event id), the merchant receives each event,
// and the checker's invariants hold; the measured failure share is about 30% and includes
// committed effects whose success never reached the provider.
func TestScenario8RetryScheduleFlaky(t *testing.T) {
	const (
		orders   = 200
		failRate = 0.30
		compress = 1000.0
	)
	var span time.Duration
	for _, d := range WeChatPayRetrySchedule {
		span += d
	}
	for _, tc := range []struct {
		name   string
		front  bool // fail requests in front of callbackd
		commit bool // reset database connections at COMMIT
	}{
		{name: "front-resets", front: true},
		{name: "commit-resets", commit: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := NewEnv(t, EnvOptions{Postgres: SharedPostgres(t), Redis: true})
			pgp := e.NewPGProxyFor()
			a := e.StartCallbackdPG("a", pgp, CallbackdOptions{})
			b := e.StartCallbackdPG("b", pgp, CallbackdOptions{})
			targets := []*Callbackd{a, b}

			ns := e.NewPayments("s8", orders)
			e.RegisterOrders(a, ns)
			seed := uint64(time.Now().UnixNano())
			var ff *FlakyFront
			if tc.front {
				var err error
				if ff, err = NewFlakyFront([]string{a.Base, b.Base}, failRate, seed); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = ff.Close() })
				targets = []*Callbackd{{Name: "flaky-front", Base: ff.URL()}}
			}
			var rcf *RandomCommitFaults
			if tc.commit {
				rcf = NewRandomCommitFaults(ns, failRate, seed)
				pgp.SetRule(rcf.Rule)
			}

			ctx, cancel := context.WithTimeout(t.Context(), time.Duration(float64(span)/compress)+30*time.Second)
			defer cancel()
			res := e.ReplaySchedule(ctx, ns, targets, WeChatPayRetrySchedule, compress, 32)
			pgp.SetRule(nil)
			if ff != nil {
				ff.SetFailRate(0)
			}
			t.Logf("scenario 8 (%s): schedule %s compressed %.0f× (%s in all), seed %d: %s", tc.name,
				fmtSchedule(WeChatPayRetrySchedule), compress, time.Duration(float64(span)/compress).Round(time.Millisecond), seed, res)
			t.Logf("scenario 8 (%s): callbacks by outcome: %s; duplicates stopped by gate: %s", tc.name,
				FormatCounts(e.MetricsByLabel(metrics.CallbacksTotal, "outcome")), FormatCounts(e.MetricsByLabel(metrics.DuplicatesStoppedTotal, "gate")))
			t.Logf("scenario 8 (%s): answer latency %s", tc.name, LatencySummary(e.History.Ops()))
			if res.GaveUp != 0 || res.Acknowledged != orders {
				t.Errorf("provider schedule: expected all %d notifications acknowledged, got %s", orders, res)
			}

			var fault Fault
			switch {
			case tc.front:
				c := ff.Counts()
				failed := c[FrontDropRequest] + c[FrontDropAnswer]
				share := float64(failed) / float64(max(c[FrontRequests], 1))
				fault = Fault{
					Name: fmt.Sprintf("%.0f%% of requests to callbackd reset at random in front of it", 100*failRate),
					Evidence: fmt.Sprintf("%d of %d requests failed (%.1f%%): %d reset before callbackd, %d after its answer (%d of those success answers lost), %d upstream errors",
						failed, c[FrontRequests], 100*share, c[FrontDropRequest], c[FrontDropAnswer], c[FrontDropAnswer2xx], c[FrontUpstreamErrors]),
					Happened: share >= failRate-0.1 && share <= failRate+0.1 && c[FrontDropRequest] > 0 && c[FrontDropAnswer2xx] > 0,
				}
			case tc.commit:
				before := pgp.Count(LabelRandomResetBefore, StageResetBefore)
				after := pgp.Count(LabelRandomResetAfter, StageResetAfter)
				committed := pgp.Count(LabelRandomResetAfter, StageAnswerPrefix+"COMMIT")
				share := float64(before+after) / float64(max(rcf.Commits(), 1))
				fault = Fault{
					Name: fmt.Sprintf("%.0f%% of apply COMMITs cut by a connection reset at random", 100*failRate),
					Evidence: fmt.Sprintf("%d of %d COMMITs faulted (%.1f%%): %d reset before PostgreSQL got them, %d after it committed (%d answered COMMIT)",
						before+after, rcf.Commits(), 100*share, before, after, committed),
					Happened: share >= failRate-0.1 && share <= failRate+0.1 && before > 0 && committed > 0,
				}
			}
			r := e.Check("scenario 8 ("+tc.name+")", ns, CheckOptions{Faults: []Fault{fault}})
			RequireOK(t, r)
		})
	}
}

func fmtSchedule(s []time.Duration) string {
	out := ""
	for i, d := range s {
		if i > 0 {
			out += ","
		}
		out += shortDuration(d)
	}
	return out
}

func shortDuration(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	default:
		return d.String()
	}
}
