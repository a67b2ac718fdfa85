package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// Acceptance 1 (issue 3), the replay test from the field: one valid notification sent 100 times at
// concurrency 20 ends in success every time, and the database holds exactly one PAID order, one
// receipt, one ledger entry and one outbox event; with Redis, with Redis stopped, and with two
// instances sharing PostgreSQL and Redis.
//
// Each of the 100 sends is a provider delivery: while another request holds the key and has not
// committed yet, the pipeline answers "not yet" (retryable) by design — the design's Redis gate
// never answers success before a commit — and the sender resends, as every provider does. The
// test requires every delivery to end in success, never a refusal, and logs how many interim
// retryable answers there were.
func TestReplayOfOneNotification(t *testing.T) {
	pg := sharedPostgres(t)
	rg := testenv.StartRedis(t, testenv.RedisOptions{Replicas: 1, Sentinels: 3})

	t.Run("one instance with Redis Sentinel", func(t *testing.T) {
		s := newStack(t, pg, "replay_redis", stackOptions{redis: rg})
		a := s.start(t, "a")
		replay(t, s, []*instance{a})
	})

	t.Run("two instances sharing PostgreSQL and Redis", func(t *testing.T) {
		s := newStack(t, pg, "replay_two", stackOptions{redis: rg})
		a, b := s.start(t, "a"), s.start(t, "b")
		replay(t, s, []*instance{a, b})
	})

	t.Run("Redis stopped", func(t *testing.T) {
		s := newStack(t, pg, "replay_noredis", stackOptions{redis: rg})
		a := s.start(t, "a")
		for _, n := range rg.Nodes() {
			n.Stop(t)
		}
		t.Logf("stopped every Redis node (%d) after callbackd became ready", len(rg.Nodes()))
		replay(t, s, []*instance{a})
		m := s.scrape(t, a)
		if got := m.total("callbackd_redis_degraded_total", nil); got == 0 {
			t.Errorf("callbackd_redis_degraded_total with Redis stopped: expected > 0, got 0")
		}
	})
}

// replay registers one order, sends its payment notification 100 times at concurrency 20 split
// round-robin over insts, and checks the exactly-once counts.
func replay(t *testing.T, s *stack, insts []*instance) {
	const sends, concurrency, maxAttempts = 100, 20, 100
	p := newPayments(t, "replay", 1)[0]
	s.registerOrder(t, insts[0], p, merchantID)
	msgID := "msg_" + randomHex(t, 12)

	before := gateCounts(s, t, insts)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	results := make([]delivery, sends)
	start := time.Now()
	parallel(sends, concurrency, func(i int) {
		results[i] = s.deliver(ctx, insts[i%len(insts)], p, msgID, maxAttempts)
	})
	elapsed := time.Since(start)

	var firstTry, retries, rejects, failed int
	for i, d := range results {
		switch {
		case d.rejects > 0:
			rejects++
			t.Errorf("send %d: expected success, got a refusal after %d attempts", i, d.attempts)
		case !d.succeeded:
			failed++
			t.Errorf("send %d: expected success, still retryable after %d attempts", i, d.attempts)
		case d.attempts == 1:
			firstTry++
		}
		retries += d.retries
	}
	dups := diffByLabel(before, gateCounts(s, t, insts))
	t.Logf("sent=%d instances=%d in %v: successes=%d (first try %d) interim retryable answers=%d refusals=%d unfinished=%d; duplicates stopped per gate %s",
		sends, len(insts), elapsed.Round(time.Millisecond), sends-rejects-failed, firstTry, retries, rejects, failed, format(dups))
	s.expectExactlyOnce(t, 1)
	t.Logf("database: %s", s.counts(t))

	// The merchant sees the payment through the orders API of any instance.
	got := s.getOrder(t, insts[len(insts)-1], p.OrderNo)
	if got.Status != "PAID" || got.ProviderTxnID != p.TxnID || got.PaidAt == nil || len(got.LedgerEntries) != 1 || got.LedgerEntries[0].Amount != p.Amount {
		t.Errorf("GET /v1/orders/%s: expected PAID by %s with one ledger entry of %d, got %+v", p.OrderNo, p.TxnID, p.Amount, got)
	}
}

// gateCounts sums callbackd_duplicates_stopped_total per gate over the instances.
func gateCounts(s *stack, t testing.TB, insts []*instance) map[string]float64 {
	out := map[string]float64{}
	for _, inst := range insts {
		for gate, v := range s.scrape(t, inst).byLabel("callbackd_duplicates_stopped_total", "gate") {
			out[gate] += v
		}
	}
	return out
}
