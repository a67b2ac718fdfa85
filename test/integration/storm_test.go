package integration_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/internal/promtext"
	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// Acceptance 2 (issue 3): 1,000 distinct orders, each notified 5 times concurrently in random
// order → 1,000 ledger entries, no order paid twice, and no success answer for an effect that is
// not committed. The last point is checked at the moment each success answer arrives: the test
// looks the order's receipt and ledger entry up in PostgreSQL right then, so an answer sent
// before the commit would be caught.
func TestDistinctOrdersNotifiedFiveTimes(t *testing.T) {
	const orders, copies, concurrency = 1000, 5, 24
	pg := sharedPostgres(t)
	rg := testenv.StartRedis(t, testenv.RedisOptions{Replicas: 1, Sentinels: 3})
	s := newStack(t, pg, "storm", stackOptions{redis: rg})
	a := s.start(t, "a")

	ps := newPayments(t, "storm", orders)
	s.registerOrders(t, a, ps)

	jobs := shuffledJobs(orders, copies)

	before := gateCounts(s, t, []*instance{a})
	var (
		tally        [4]atomic.Int64 // by verdict
		uncommitted  atomic.Int64
		mu           sync.Mutex
		acknowledged = make(map[int]bool)
		firstProblem string
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	parallel(len(jobs), concurrency, func(k int) {
		j := jobs[k]
		// Every copy carries its own message id: providers may change it between resends, and
		// the idempotency key must not depend on it.
		ans := s.notify(ctx, a, ps[j.order], fmt.Sprintf("msg_%s_%d", ps[j.order].OrderNo, j.copy))
		tally[ans.verdict].Add(1)
		if ans.verdict != success {
			return
		}
		ok, err := s.committedNow(ctx, ps[j.order].OrderNo)
		mu.Lock()
		defer mu.Unlock()
		acknowledged[j.order] = true
		if err != nil || !ok {
			uncommitted.Add(1)
			if firstProblem == "" {
				firstProblem = fmt.Sprintf("order %s answered success, committed receipt+ledger=%v (lookup error %v)", ps[j.order].OrderNo, ok, err)
			}
		}
	})
	elapsed := time.Since(start)
	if n := uncommitted.Load(); n > 0 {
		t.Errorf("success answers without a committed receipt and ledger entry at answer time: expected 0, got %d; first: %s", n, firstProblem)
	}
	if n := tally[rejected].Load(); n > 0 {
		t.Errorf("refusals of valid notifications: expected 0, got %d", n)
	}

	// Orders whose every copy got "not yet" are finished the way a provider finishes them: by
	// resending until success.
	var resent []int
	for i := range ps {
		if !acknowledged[i] {
			resent = append(resent, i)
		}
	}
	parallel(len(resent), 8, func(k int) {
		if d := s.deliver(ctx, a, ps[resent[k]], "msg_resend_"+ps[resent[k]].OrderNo, 50); !d.succeeded {
			t.Errorf("resend of order %s: expected success, got none after %d attempts (%d refusals)", ps[resent[k]].OrderNo, d.attempts, d.rejects)
		}
	})

	dups := promtext.Delta(before, gateCounts(s, t, []*instance{a}))
	t.Logf("sent=%d (%d orders x %d) at concurrency %d in %v (%.0f/s): successes=%d retryable=%d refused=%d transport errors=%d; orders acknowledged during the storm=%d, resent afterwards=%d; duplicates stopped per gate %s",
		len(jobs), orders, copies, concurrency, elapsed.Round(time.Millisecond), float64(len(jobs))/elapsed.Seconds(),
		tally[success].Load(), tally[retryable].Load(), tally[rejected].Load(), tally[transportError].Load(),
		len(acknowledged), len(resent), promtext.Format(dups))
	s.expectExactlyOnce(t, orders)
	t.Logf("database: %s", s.counts(t))
}

// job is one delivery of a storm: copy number copy of order number order.
type job struct{ order, copy int }

// shuffledJobs returns every copy of every order in random order.
func shuffledJobs(orders, copies int) []job {
	jobs := make([]job, 0, orders*copies)
	for i := 0; i < orders; i++ {
		for c := 0; c < copies; c++ {
			jobs = append(jobs, job{i, c})
		}
	}
	rand.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	return jobs
}

// committedNow reports whether orderNo has a committed receipt and a ledger entry right now.
func (s *stack) committedNow(ctx context.Context, orderNo string) (bool, error) {
	var ok bool
	err := s.db.QueryRow(ctx, `
		SELECT EXISTS (SELECT 1 FROM callback_receipts WHERE order_no = $1)
		   AND EXISTS (SELECT 1 FROM ledger_entries WHERE order_no = $1)`, orderNo).Scan(&ok)
	return ok, err
}
