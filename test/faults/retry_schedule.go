package faults

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// WeChatPayRetrySchedule is WeChat Pay's documented wait before each resend of an
// unacknowledged notification (15 resends over 24 h 4 min; /work/shared/protocols.md).
var WeChatPayRetrySchedule = []time.Duration{
	15 * time.Second, 15 * time.Second, 30 * time.Second, 3 * time.Minute, 10 * time.Minute,
	20 * time.Minute, 30 * time.Minute, 30 * time.Minute, 30 * time.Minute, 60 * time.Minute,
	3 * time.Hour, 3 * time.Hour, 3 * time.Hour, 6 * time.Hour, 6 * time.Hour,
}

// ScheduleResult is what a provider's retry schedule took.
type ScheduleResult struct {
	// Acknowledged notifications got a success answer; GaveUp ones exhausted the schedule.
	Acknowledged, GaveUp int
	// Attempts is the number of requests sent.
	Attempts int
	// AttemptsToAck counts acknowledged notifications by the attempt that succeeded (1 = first).
	AttemptsToAck map[int]int
	// Longest is the longest (compressed) time from a notification's first attempt to its
	// acknowledgement.
	Longest time.Duration
	// Elapsed is the whole replay's duration.
	Elapsed time.Duration
}

// String renders the result in one line.
func (r ScheduleResult) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r.AttemptsToAck)) {
		parts = append(parts, fmt.Sprintf("#%d:%d", k, r.AttemptsToAck[k]))
	}
	return fmt.Sprintf("acknowledged=%d gave_up=%d attempts=%d acknowledged at attempt %v; longest %s; took %s",
		r.Acknowledged, r.GaveUp, r.Attempts, parts, r.Longest.Round(time.Millisecond), r.Elapsed.Round(time.Millisecond))
}

// ReplaySchedule plays the provider's retry schedule, time-compressed: every notification is
// delivered to the targets (in turn, as through a load balancer) and, while the answer is anything but success (a provider knows no
// permanent failure), resent after the next wait of schedule divided by compress, at most
// len(schedule) times. Attempts are recorded in the history with phases "attempt-01",
// "attempt-02", …; every attempt of one notification carries the same webhook-id, freshly
// signed. concurrency notifications are replayed at once.
func (e *Env) ReplaySchedule(ctx context.Context, ns []Notification, targets []*Callbackd, schedule []time.Duration, compress float64, concurrency int) ScheduleResult {
	res := ScheduleResult{AttemptsToAck: map[int]int{}}
	var mu sync.Mutex
	var next atomic.Uint64
	start := time.Now()
	Parallel(len(ns), concurrency, func(i int) {
		n := ns[i]
		first := time.Now()
		msgID := "msg_" + n.OrderNo + "_" + string(n.Kind)
		for attempt := 1; ; attempt++ {
			if ctx.Err() != nil {
				mu.Lock()
				res.GaveUp++
				mu.Unlock()
				return
			}
			target := targets[(next.Add(1)-1)%uint64(len(targets))]
			op := e.Send(ctx, target, n, msgID, fmt.Sprintf("attempt-%02d", attempt))
			mu.Lock()
			res.Attempts++
			if op.Class == Success {
				res.Acknowledged++
				res.AttemptsToAck[attempt]++
				res.Longest = max(res.Longest, time.Since(first))
				mu.Unlock()
				return
			}
			if attempt > len(schedule) {
				res.GaveUp++
				mu.Unlock()
				return
			}
			mu.Unlock()
			wait := time.Duration(float64(schedule[attempt-1]) / compress)
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
		}
	})
	res.Elapsed = time.Since(start)
	return res
}

// LatencySummary is the answer latency of a set of ops: p50, p99 and max, and the slowest op.
func LatencySummary(ops []Op) string {
	if len(ops) == 0 {
		return "no requests"
	}
	ds := make([]time.Duration, len(ops))
	slowest := 0
	for i, op := range ops {
		ds[i] = op.Answered.Sub(op.Sent)
		if ds[i] > ds[slowest] {
			slowest = i
		}
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	q := func(p float64) time.Duration { return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))] }
	s := ops[slowest]
	return fmt.Sprintf("p50 %s, p99 %s, max %s (%s %s on %s: %s %d %q)",
		q(0.50).Round(time.Microsecond), q(0.99).Round(time.Microsecond), ds[slowest].Round(time.Microsecond),
		s.Phase, s.OrderNo, s.Instance, s.Class, s.Status, s.Body)
}
