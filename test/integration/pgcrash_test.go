package integration_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// Acceptance 4 (issue 3): PostgreSQL is stopped (immediate shutdown, like a crash) during a storm.
// Answers in that window are retryable failures, never a success for something not committed:
// after the restart, every order that was ever answered success has its receipt and ledger entry
// (synchronous commit survives the crash). Re-sending everything then converges to exactly-once.
func TestPostgresStoppedDuringStorm(t *testing.T) {
	const orders, copies, concurrency = 300, 3, 16
	pg := testenv.StartPostgres(t) // its own server: this test crashes it
	rg := testenv.StartRedis(t, testenv.RedisOptions{Replicas: 1, Sentinels: 3})
	s := newStack(t, pg, "pgcrash", stackOptions{redis: rg})
	a := s.start(t, "a")

	ps := newPayments(t, "pgcrash", orders)
	s.registerOrders(t, a, ps)

	type outcome struct {
		order    int
		verdict  verdict
		sent, at time.Time
	}
	var (
		mu       sync.Mutex
		outcomes []outcome
		started  atomic.Int64
	)
	// Deliveries in random order, so that first notifications of new orders keep arriving while
	// the server is down, not only duplicates the in-process window answers.
	jobs := shuffledJobs(orders, copies)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		parallel(orders*copies, concurrency, func(k int) {
			started.Add(1)
			i := jobs[k].order
			sent := time.Now()
			ans := s.notify(ctx, a, ps[i], fmt.Sprintf("msg_%s_%d", ps[i].OrderNo, jobs[k].copy))
			mu.Lock()
			outcomes = append(outcomes, outcome{order: i, verdict: ans.verdict, sent: sent, at: time.Now()})
			mu.Unlock()
			// Pace the storm so that it spans the outage instead of finishing inside it.
			time.Sleep(5 * time.Millisecond)
		})
	}()

	for started.Load() < orders*copies/3 {
		time.Sleep(5 * time.Millisecond)
	}
	crashedAt := time.Now()
	pg.Crash(t)
	notReady := false
	for time.Since(crashedAt) < 5*time.Second {
		if code, err := s.get(a, "/readyz"); err == nil && code != http.StatusOK {
			notReady = true
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !notReady {
		t.Errorf("/readyz while PostgreSQL is down: expected a non-200 answer within 5s, kept answering 200")
	}
	time.Sleep(time.Second)
	restartedAt := time.Now()
	pg.Start(t)
	<-done

	// Every success ever answered must be durable: look at the database right after the restart,
	// before anything is re-sent.
	committed := s.committedOrders(t)
	var tally, inWindow [4]int
	acknowledged := map[int]bool{}
	for _, o := range outcomes {
		tally[o.verdict]++
		if o.sent.After(crashedAt) && o.at.Before(restartedAt) {
			inWindow[o.verdict]++
		}
		if o.verdict == success {
			acknowledged[o.order] = true
		}
	}
	lost := 0
	for i := range acknowledged {
		if !committed[ps[i].OrderNo] {
			lost++
			if lost <= 3 {
				t.Errorf("order %s was answered success but has no committed receipt and ledger entry after the restart", ps[i].OrderNo)
			}
		}
	}
	if lost > 0 {
		t.Errorf("acknowledged but not committed: expected 0 orders, got %d", lost)
	}
	if tally[rejected] > 0 {
		t.Errorf("refusals of valid notifications: expected 0, got %d", tally[rejected])
	}
	if inWindow[retryable]+inWindow[transportError] == 0 {
		t.Errorf("answers while PostgreSQL was down: expected retryable failures, got none (window answers %v)", inWindow)
	}

	// Wait for callbackd to see the database again, then re-send everything until success.
	for deadline := time.Now().Add(30 * time.Second); ; {
		if code, err := s.get(a, "/readyz"); err == nil && code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz after the PostgreSQL restart: expected 200 within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	readyAfter := time.Since(restartedAt)
	var resendRetries atomic.Int64
	parallel(orders, concurrency, func(i int) {
		d := s.deliver(ctx, a, ps[i], "msg_resend_"+ps[i].OrderNo, 100)
		resendRetries.Add(int64(d.retries))
		if !d.succeeded {
			t.Errorf("re-send of order %s after the restart: expected success, got none after %d attempts (%d refusals)", ps[i].OrderNo, d.attempts, d.rejects)
		}
	})

	t.Logf("storm sent=%d (%d orders x %d): success=%d retryable=%d refused=%d transport errors=%d; PostgreSQL down for %v: in that window success=%d retryable=%d refused=%d transport errors=%d; acknowledged orders=%d, all committed after the restart=%v; ready %v after the restart began; re-sent %d orders (%d interim retryable answers)",
		len(outcomes), orders, copies, tally[success], tally[retryable], tally[rejected], tally[transportError],
		restartedAt.Sub(crashedAt).Round(time.Millisecond), inWindow[success], inWindow[retryable], inWindow[rejected], inWindow[transportError],
		len(acknowledged), lost == 0, readyAfter.Round(time.Millisecond), orders, resendRetries.Load())
	s.expectExactlyOnce(t, orders)
	t.Logf("database: %s", s.counts(t))
}
