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
// two callbackd replicas behind a front that fails 30% of the requests at random: half of the
// failures reset the connection before callbackd sees the request, half after callbackd
// answered (so some committed effects are acknowledged into the void and the provider resends
// them).
//
// Expected: every notification is acknowledged within the schedule, every order is paid
// exactly once (one receipt, one ledger entry, one event id), the merchant receives each event,
// and the checker's invariants hold; the measured failure share is about 30% and includes
// successes lost on the way back.
func TestScenario8RetryScheduleFlaky(t *testing.T) {
	e := NewEnv(t, EnvOptions{Postgres: SharedPostgres(t), Redis: true})
	a := e.StartCallbackd("a", CallbackdOptions{})
	b := e.StartCallbackd("b", CallbackdOptions{})

	const (
		orders   = 200
		failRate = 0.30
		compress = 1000.0
	)
	ns := e.NewPayments("s8", orders)
	e.RegisterOrders(a, ns)
	seed := uint64(time.Now().UnixNano())
	ff, err := NewFlakyFront([]string{a.Base, b.Base}, failRate, seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ff.Close() })
	front := &Callbackd{Name: "flaky-front", Base: ff.URL()}

	var span time.Duration
	for _, d := range WeChatPayRetrySchedule {
		span += d
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Duration(float64(span)/compress)+30*time.Second)
	defer cancel()
	res := e.ReplaySchedule(ctx, ns, front, WeChatPayRetrySchedule, compress, 32)
	ff.SetFailRate(0)

	c := ff.Counts()
	failed := c[FrontDropRequest] + c[FrontDropAnswer]
	share := float64(failed) / float64(max(c[FrontRequests], 1))
	t.Logf("scenario 8: schedule %s compressed %.0f× (%s in all), seed %d: %s",
		fmtSchedule(WeChatPayRetrySchedule), compress, time.Duration(float64(span)/compress).Round(time.Millisecond), seed, res)
	t.Logf("scenario 8: flaky front: %d requests, %d forwarded, %d reset before callbackd, %d reset after callbackd answered (%d of them success answers lost), %d upstream errors: %.1f%% failed",
		c[FrontRequests], c[FrontForwarded], c[FrontDropRequest], c[FrontDropAnswer], c[FrontDropAnswer2xx], c[FrontUpstreamErrors], 100*share)
	t.Logf("scenario 8: callbacks by outcome: %s; duplicates stopped by gate: %s",
		FormatCounts(e.MetricsByLabel(metrics.CallbacksTotal, "outcome")), FormatCounts(e.MetricsByLabel(metrics.DuplicatesStoppedTotal, "gate")))

	if res.GaveUp != 0 || res.Acknowledged != orders {
		t.Errorf("provider schedule: expected all %d notifications acknowledged, got %s", orders, res)
	}
	faults := []Fault{{
		Name: fmt.Sprintf("%.0f%% of requests to callbackd failed at random (reset before or after callbackd)", 100*failRate),
		Evidence: fmt.Sprintf("%d of %d requests failed (%.1f%%): %d reset before callbackd, %d after its answer, %d of those were success answers lost",
			failed, c[FrontRequests], 100*share, c[FrontDropRequest], c[FrontDropAnswer], c[FrontDropAnswer2xx]),
		Happened: share >= failRate-0.08 && share <= failRate+0.08 && c[FrontDropRequest] > 0 && c[FrontDropAnswer2xx] > 0,
	}}
	r := e.Check("scenario 8", ns, CheckOptions{Faults: faults})
	RequireOK(t, r)
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
